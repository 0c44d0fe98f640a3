"""``[transform.window]`` and its aggregations: every window kind's keys and rules."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from flow_jobs.spec.base import (
    EVENT_TS,
    IMPORT_PATH,
    ImportPath,
    SpecModel,
    _identifier,
    dead_letter_topic_rule,
    key_error,
    not_supported,
)

WindowKind = Literal[
    "tumbling",
    "hopping",
    "session",
    "sliding",
    "count_tumbling",
    "count_hopping",
    "count_sliding",
]
TIME_KINDS = ("tumbling", "hopping", "session", "sliding")
COUNT_KINDS = ("count_tumbling", "count_hopping", "count_sliding")
#: Kinds whose windows can reopen (late_data = "reopen"): fixed bounds.
REOPEN_KINDS = ("tumbling", "hopping")

AggKind = Literal[
    "count", "sum", "min", "max", "avg", "first", "last", "count_distinct", "collect", "reduce"
]


class Aggregation(SpecModel):
    """One ``[[transform.window.aggregations]]`` entry."""

    agg: AggKind
    column: str | None = None
    as_: str = Field(alias="as", min_length=1)
    #: count_distinct: "approximate" (HyperLogLog, the default) or "exact".
    mode: Literal["approximate", "exact"] | None = None
    #: count_distinct approximate: log2 of the HLL register count (14: ~0.8% error).
    hll_precision: Annotated[int, Field(ge=4, le=21)] | None = None
    #: count_distinct approximate: also write the DataSketches HLL sketch (binary).
    keep_sketch: bool | None = None
    max_distinct_values_per_group: Annotated[int, Field(gt=0)] | None = None
    #: reduce: ``module:function`` (or a function, in Python) called with the first value.
    initializer: ImportPath | None = None
    #: reduce: ``module:function`` called with (aggregate, value) for every later value.
    reducer: ImportPath | None = None
    #: reduce: the Spark DDL type of what the reducer returns, e.g. "DOUBLE".
    result_type: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> Aggregation:
        _identifier("as", self.as_)
        agg = self.agg
        if agg not in ("count", "reduce") and not self.column:
            raise key_error("column", f'column is required for agg = "{agg}"')
        distinct = agg == "count_distinct"
        if self.mode is not None and not distinct:
            raise key_error(
                "mode", f'mode = "{self.mode}" is only valid for agg = "count_distinct"'
            )
        approximate = distinct and self.mode != "exact"
        for key in ("hll_precision", "keep_sketch"):
            if getattr(self, key) is not None and not approximate:
                raise key_error(
                    key, f'{key} is only valid with agg = "count_distinct" and mode = "approximate"'
                )
        exact = distinct and self.mode == "exact"
        if exact and self.max_distinct_values_per_group is None:
            raise key_error(
                "max_distinct_values_per_group",
                'max_distinct_values_per_group is required when agg = "count_distinct" and '
                'mode = "exact" (exact distinct counts keep every value in state)',
            )
        if self.max_distinct_values_per_group is not None and not exact:
            raise key_error(
                "max_distinct_values_per_group",
                'max_distinct_values_per_group is only valid with agg = "count_distinct" '
                'and mode = "exact"',
            )
        for key in ("initializer", "reducer", "result_type"):
            value = getattr(self, key)
            if agg == "reduce" and not value:
                raise key_error(key, f'{key} is required for agg = "reduce"')
            if agg != "reduce" and value is not None:
                raise key_error(key, f'{key} is only valid for agg = "reduce"')
            if key != "result_type" and value and not IMPORT_PATH.match(value):
                raise key_error(key, f"{key} = {value!r} is not an import path (module:function)")
        return self

    @property
    def precision(self) -> int:
        return self.hll_precision or 14

    @property
    def sketch_column(self) -> str | None:
        return f"{self.as_}_sketch" if self.keep_sketch else None

    def output_names(self) -> list[str]:
        return [self.as_, *([self.sketch_column] if self.sketch_column else [])]


class WindowSpec(SpecModel):
    """``[transform.window]``: every window kind's keys (docs/spec-reference.md)."""

    kind: WindowKind
    duration_ms: Annotated[int, Field(gt=0)] | None = None
    hop_ms: Annotated[int, Field(gt=0)] | None = None
    gap_ms: Annotated[int, Field(gt=0)] | None = None
    count: Annotated[int, Field(ge=2)] | None = None
    step: Annotated[int, Field(ge=1)] | None = None
    event_time_column: str = EVENT_TS
    time_mode: Literal["event", "processing"] = "event"
    lateness_ms: Annotated[int, Field(ge=0)] = 0
    source_idleness_ms: Annotated[int, Field(gt=0)] = 60_000
    group_by: list[str] = Field(default_factory=list)
    late_data: Literal["drop", "dlq", "reopen"] = "drop"
    allowed_lateness_ms: Annotated[int, Field(ge=0)] | None = None
    #: late_data = "dlq": late rows go to this Kafka topic instead of the dead-letter table
    dead_letter_topic: str | None = None
    max_groups_per_window: Annotated[int, Field(gt=0)] = 1_000_000
    crash_recovery: Literal["at_least_once", "kafka_eos", "persisted"] = "at_least_once"
    on_state_cap: Literal["fail", "drop_new_groups", "backpressure"] = "fail"
    window_start_column: str = "window_start"
    window_end_column: str = "window_end"
    #: Count windows only: their bounds (first and last event time) need not be unique.
    window_index_column: str = "window_index"
    #: late_data = "reopen": 1 for a window's first emit, +1 for each correction
    revision_column: str = "revision"
    #: "current" on every kind: an update per trigger supersedes the window's earlier
    #: row. Time windows keep their natural key while they grow; count windows are keyed
    #: by their index then (their bounds move); a session's bounds move too (an event
    #: extends it, or merges two), so its row replaces the group's rows it overlaps.
    emit: Literal["final", "current"] = "final"
    #: Rows whose event time is further ahead of the micro-batch's processing time are
    #: dead-lettered: one far-future row would otherwise push the watermark ahead and
    #: make every following on-time row late.
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    #: Tumbling / hopping windows over one JSON source: the Kafka reader folds records
    #: into partial aggregates before Spark (flow_jobs.plan.combine). A throughput knob.
    pre_aggregate: bool = True
    aggregations: list[Aggregation] = Field(min_length=1)

    @model_validator(mode="after")
    def _rules(self) -> WindowSpec:
        self._size_rules()
        self._time_rules()
        self._late_data_rules()
        if self.crash_recovery != "at_least_once":
            raise not_supported("crash_recovery", self.crash_recovery, ("at_least_once",))
        if self.on_state_cap != "fail":
            raise not_supported("on_state_cap", self.on_state_cap, ("fail",))
        self._output_rules()
        return self

    def _size_rules(self) -> None:
        needs = _SIZE_KEYS[self.kind]
        for key in ("duration_ms", "hop_ms", "gap_ms", "count", "step"):
            value = getattr(self, key)
            if key in needs and value is None:
                raise key_error(key, f'{key} is required when kind = "{self.kind}"')
            if key not in needs and value is not None:
                valid = [k for k, keys in _SIZE_KEYS.items() if key in keys]
                raise key_error(
                    key,
                    f"{key} is only valid for kind = "
                    + " or ".join(f'"{k}"' for k in valid)
                    + f', not "{self.kind}"',
                )
        if (
            self.hop_ms is not None
            and self.duration_ms is not None
            and self.hop_ms > self.duration_ms
        ):
            raise key_error(
                "hop_ms", f"hop_ms = {self.hop_ms} must be <= duration_ms = {self.duration_ms}"
            )
        if self.step is not None and self.count is not None and self.step > self.count:
            raise key_error("step", f"step = {self.step} must be <= count = {self.count}")

    def _time_rules(self) -> None:
        _identifier("event_time_column", self.event_time_column)
        if self.time_mode == "processing" and self.event_time_column != EVENT_TS:
            raise key_error(
                "time_mode",
                f'time_mode = "processing" stamps rows with their arrival time in {EVENT_TS}; '
                f"event_time_column = {self.event_time_column!r} would be ignored, remove it",
            )

    def _late_data_rules(self) -> None:
        if self.late_data == "dlq" and self.time_mode == "processing":
            raise key_error(
                "late_data",
                'late_data = "dlq" needs event time: with time_mode = "processing" every row '
                'is stamped on arrival and none is ever late; use "drop"',
            )
        if self.late_data == "reopen" and self.allowed_lateness_ms is None:
            raise key_error(
                "allowed_lateness_ms", 'allowed_lateness_ms is required when late_data = "reopen"'
            )
        if self.late_data != "reopen" and self.allowed_lateness_ms is not None:
            raise key_error(
                "allowed_lateness_ms", 'allowed_lateness_ms is only valid with late_data = "reopen"'
            )
        if self.late_data == "reopen":
            self._reopen_rules()
        dead_letter_topic_rule(self.dead_letter_topic, self.late_data)

    def _reopen_rules(self) -> None:
        if self.kind not in REOPEN_KINDS:
            why = {
                "session": "a late row can merge two emitted sessions into one with other "
                "bounds, and the superseded rows would stay in the target",
                "sliding": "each event time is its own window; reopening one is not there yet",
            }.get(self.kind, "")
            raise key_error(
                "late_data",
                f'late_data = "reopen" is not supported for kind = "{self.kind}": {why}; '
                f'use "drop" or "dlq" (reopen works for {", ".join(REOPEN_KINDS)})',
            )
        if self.time_mode == "processing":
            raise key_error(
                "late_data",
                'late_data = "reopen" needs event time: with time_mode = "processing" every '
                'row is stamped on arrival and none is ever late; use "drop"',
            )
        if self.emit == "current":
            raise key_error(
                "late_data",
                'late_data = "reopen" re-emits a closed window when a late row corrects it; '
                'emit = "current" already emits every change: use emit = "final" with reopen',
            )

    def _output_rules(self) -> None:
        seen: dict[str, str] = {}

        def claim(name: str, key: str) -> None:
            _identifier(key, name)
            if name in seen:
                raise key_error(
                    key,
                    f"{key} = {name!r} collides with {seen[name]}; output columns must be unique",
                )
            seen[name] = key

        claim(self.window_start_column, "window_start_column")
        claim(self.window_end_column, "window_end_column")
        if self.is_count_based:
            claim(self.window_index_column, "window_index_column")
        if self.reopens:
            claim(self.revision_column, "revision_column")
        for i, column in enumerate(self.group_by):
            if column in self.group_by[:i]:
                raise key_error("group_by", f"group_by[{i}] = {column!r} is listed twice")
            claim(column, f"group_by[{i}]")
        for i, a in enumerate(self.aggregations):
            for name in a.output_names():
                key = f"aggregations[{i}].as"
                if name in seen and seen[name].endswith(".as"):
                    raise key_error(
                        "aggregations",
                        f"{key} = {name!r} repeats {seen[name]}; every alias must be unique",
                    )
                if name in seen and seen[name].startswith("group_by"):
                    raise key_error(
                        "aggregations",
                        f"{key} = {name!r} equals a group_by column; output columns must be unique",
                    )
                if name in seen:
                    raise key_error("aggregations", f"{key} = {name!r} equals a window column name")
                seen[name] = key

    @property
    def is_count_based(self) -> bool:
        return self.kind in COUNT_KINDS

    @property
    def reopens(self) -> bool:
        return self.late_data == "reopen"

    @property
    def exact_distinct(self) -> bool:
        """An exact count_distinct: its set is capped while the window is open."""
        return any(a.agg == "count_distinct" and a.mode == "exact" for a in self.aggregations)

    @property
    def watermark_delay_ms(self) -> int:
        """How far Spark's watermark runs behind the highest event time: ``lateness_ms``,
        plus ``allowed_lateness_ms`` when windows reopen (their rows must still reach the
        operator; it emits a window first when the watermark + allowed lateness passes
        its end, ``flow_jobs.windows.fixed``)."""
        allowed = (self.allowed_lateness_ms or 0) if self.reopens else 0
        return self.lateness_ms + allowed

    @property
    def engine(self) -> Literal["native", "state"]:
        """Where the window runs: Spark's native aggregation, or its arbitrary-state API."""
        if self.reopens:  # Spark's aggregation emits a window once, or on every change
            return "state"
        if self.kind == "session" and self.emit == "current":
            return "state"  # Spark refuses update mode for session windows (SPARK-36463)
        if self.exact_distinct:
            # Spark's aggregation keeps the set in its own state, where no check can see
            # it before the window is emitted; the state API caps it while open.
            return "state"
        return "native" if self.kind in ("tumbling", "hopping", "session") else "state"

    @property
    def stride(self) -> int | None:
        """Count windows: how many events apart consecutive windows start."""
        if self.kind == "count_tumbling":
            return self.count
        if self.kind == "count_sliding":
            return 1
        return self.step


_SIZE_KEYS = {
    "tumbling": ("duration_ms",),
    "hopping": ("duration_ms", "hop_ms"),
    "session": ("gap_ms",),
    "sliding": ("duration_ms",),
    "count_tumbling": ("count",),
    "count_hopping": ("count", "step"),
    "count_sliding": ("count",),
}
