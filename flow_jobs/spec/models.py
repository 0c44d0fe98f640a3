"""Pipeline spec: pydantic v2 models, the single source of truth for configuration.

Every config-time rule lives here, in the model that owns the key, so a message always
names the key and the value. Values the spec reference reserves for later (``late_data = "dlq"``,
``crash_recovery = "kafka_eos"``, ...) are part of the accepted vocabulary and rejected
with "not supported yet", so a user can tell a typo from a roadmap item.

The same models are the Python facade: ``Window``, ``Aggregation`` and ``Lookup`` are
importable from ``flow_jobs``, take callables where TOML takes import paths, and
``PipelineSpec.to_toml()`` writes the file ``load_spec`` reads back.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from flow_jobs.locations import on_object_store

PIPELINE_NAME = re.compile(r"^[a-z0-9_-]+$")
SQL_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

#: The column every source injects: the Kafka timestamp, or the arrival time in
#: processing-time mode.
EVENT_TS = "_event_ts"
#: The struct of Kafka metadata a JSON source view carries (key, topic, partition,
#: offset, timestamp); count-based windows order a group's events by it.
KAFKA_COLUMN = "_kafka"

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


def key_error(key: str, message: str) -> PydanticCustomError:
    """An error about ``key`` of the model being validated.

    The loader appends ``key`` to the error's location, so the user reads the full
    dotted key (``transform.window.hop_ms``) whichever validator found the problem.
    """
    return PydanticCustomError("spec_key", "{key}: {message}", {"key": key, "message": message})


def not_supported(key: str, value: object, supported: tuple[str, ...] | str) -> PydanticCustomError:
    shown = supported if isinstance(supported, str) else ", ".join(map(repr, supported))
    return key_error(key, f"{key} = {value!r} is not supported yet; supported: {shown}")


def revealed(options: Mapping[str, SecretStr]) -> dict[str, str]:
    """Storage options as delta-rs takes them: revealed only where a table is opened."""
    return {k: v.get_secret_value() for k, v in options.items()}


#: Kafka's legal topic names (at most 249 characters of these).
KAFKA_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def dead_letter_topic_rule(topic: str | None, late_data: str) -> None:
    if topic is None:
        return
    if late_data != "dlq":
        raise key_error(
            "dead_letter_topic",
            f'dead_letter_topic is where late_data = "dlq" sends late rows; late_data is '
            f'"{late_data}": set late_data = "dlq" or remove it',
        )
    if not KAFKA_TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise key_error(
            "dead_letter_topic",
            f"dead_letter_topic = {topic!r} is not a Kafka topic name (letters, digits, "
            "'.', '_', '-'; at most 249)",
        )


def _identifier(key: str, value: str) -> None:
    if not SQL_IDENTIFIER.match(value):
        raise key_error(
            key, f"{key} = {value!r} is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*)"
        )


def resolve_import_path(path: str) -> Callable[..., Any]:
    """``"package.module:function"`` to the function it names."""
    module_name, _, qualname = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{path} is not callable")
    return target


def _import_path(value: Any) -> Any:
    """Facade: a callable becomes the import path TOML stores (and must resolve back)."""
    if not callable(value):
        return value
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if not module or "<" in qualname:
        raise ValueError(
            f"{qualname or value!r} is not a module-level function; TOML can only name "
            "functions by import path (module:function)"
        )
    path = f"{module}:{qualname}"
    try:
        resolved = resolve_import_path(path)
    except (ImportError, AttributeError, TypeError):
        resolved = None
    if resolved is not value:
        raise ValueError(f"{path} does not resolve back to the function given")
    return path


ImportPath = Annotated[str, BeforeValidator(_import_path)]


class SpecModel(BaseModel):
    """Base for every spec table: unknown keys are errors, models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def aware_instant(value: object, key: str) -> datetime:
    """An instant from an ISO-8601 string or a (TOML) datetime, in UTC; a time without
    a zone is refused: read on another machine it would mean another instant."""
    example = "2026-11-01T10:00:00Z"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{key} = {value!r} is not an ISO-8601 time; write e.g. {example!r}"
            ) from None
    if not isinstance(value, datetime):  # a bare TOML date, a number
        shown = value.isoformat() if isinstance(value, date) else repr(value)
        raise ValueError(f"{key} = {shown} is not a time; write e.g. {example!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{key} = {value.isoformat()!r} has no time zone; add one, e.g. "
            f"{value.isoformat()}Z (UTC) or {value.isoformat()}+01:00"
        )
    return value.astimezone(UTC)


def epoch_ms(instant: datetime) -> int:
    """An aware instant as epoch milliseconds (exactly, not through a float)."""
    return (instant - _EPOCH) // timedelta(milliseconds=1)


class StartingTimestamp(SpecModel):
    """``starting_offsets = { timestamp = "2026-11-01T10:00:00Z" }``: a fresh checkpoint
    starts each partition at its first record stamped at or after this time."""

    timestamp: datetime

    @field_validator("timestamp", mode="before")
    @classmethod
    def _aware(cls, value: object) -> datetime:
        return aware_instant(value, "starting_offsets.timestamp")

    def option(self) -> str:
        """What the Kafka reader takes (``flow_jobs.io.kafka_source``)."""
        return f"timestamp:{epoch_ms(self.timestamp)}"


def _starting_offsets(value: Any) -> Any:
    """``"earliest"``, ``"latest"`` or ``{ timestamp = … }``, with one message for each
    wrong shape (a bare union would report every branch's complaint)."""
    shapes = '"earliest", "latest" or { timestamp = "2026-11-01T10:00:00Z" }'
    if isinstance(value, StartingTimestamp):
        return value
    if isinstance(value, str):
        if value not in ("earliest", "latest"):
            raise ValueError(f"starting_offsets = {value!r}; use {shapes}")
        return value
    if isinstance(value, Mapping):
        if set(value) != {"timestamp"}:
            raise ValueError(
                f"starting_offsets = {dict(value)!r}: a table takes one key, timestamp; "
                f"use {shapes}"
            )
        instant = aware_instant(value["timestamp"], "starting_offsets.timestamp")
        return StartingTimestamp(timestamp=instant)
    if isinstance(value, datetime | date):
        raise ValueError(f"starting_offsets = {value!r}; write {{ timestamp = ... }}: {shapes}")
    raise ValueError(f"starting_offsets = {value!r}; use {shapes}")


StartingOffsets = Annotated[
    Literal["earliest", "latest"] | StartingTimestamp, BeforeValidator(_starting_offsets)
]


class KafkaSource(SpecModel):
    """``[[sources]]`` with ``kind = "kafka"``: one topic, exposed to SQL as a view."""

    name: str
    kind: Literal["kafka"] = "kafka"
    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    format: Literal["json", "raw"] = "json"
    schema_ddl: str | None = Field(default=None, alias="schema")
    #: "auto": JSON payloads are decoded in bulk by Arrow in the reader where the
    #: schema's types allow (STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE, BOOLEAN),
    #: each record Arrow rejects by ``from_json``; "from_json": every record by Spark.
    decoder: Literal["auto", "from_json"] = "auto"
    #: Where a fresh checkpoint starts: "earliest", "latest" or a StartingTimestamp.
    starting_offsets: StartingOffsets = "earliest"
    max_offsets_per_trigger: Annotated[int, Field(gt=0)] | None = None
    fail_on_data_loss: bool = True
    #: Transient broker errors (connection lost, leader change, timeouts) tolerated in a
    #: row before the read fails, with exponential backoff from ``retry_backoff_ms``.
    retries: Annotated[int, Field(ge=0)] = 6
    retry_backoff_ms: Annotated[int, Field(gt=0)] = 250
    #: Extra librdkafka client properties (e.g. ``security.protocol``); kept secret.
    client_config: dict[str, SecretStr] = Field(default_factory=dict)

    def starting_option(self) -> str:
        """``starting_offsets`` as the Kafka reader's option string."""
        start = self.starting_offsets
        return start if isinstance(start, str) else start.option()

    def cluster_config(self) -> dict[str, str]:
        """librdkafka settings to reach this source's cluster: the bootstrap servers and
        the client config, secrets revealed (for a client, never for a log)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **{k: v.get_secret_value() for k, v in sorted(self.client_config.items())},
        }

    @model_validator(mode="after")
    def _rules(self) -> KafkaSource:
        _identifier("name", self.name)
        ddl = self.schema_ddl
        if self.format == "json" and not (ddl and ddl.strip()):
            raise key_error(
                "schema",
                'schema is required when format = "json": the Spark DDL of the payload, '
                'e.g. schema = "user_id STRING, amount DOUBLE, ts BIGINT"',
            )
        if self.format == "raw" and ddl:
            raise key_error("schema", 'schema is only for format = "json"; remove it for raw')
        for reserved in (EVENT_TS, KAFKA_COLUMN):
            if ddl and re.search(rf"(^|,)\s*`?{reserved}`?\s", ddl):
                raise key_error(
                    "schema",
                    f"schema declares a payload column named {reserved!r}, which collides "
                    "with a column every source view carries; rename it in the schema",
                )
        return self


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
        its end, ``flow_jobs.operators.reopen``)."""
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

JoinHow = Literal["inner", "left", "right", "full"]
#: Output column lists: names kept as they are, or a table of column -> new name.
OutputColumns = list[str] | dict[str, str]


class JoinSpec(SpecModel):
    """``[transform.join]``: a keyed, time-bounded stream-stream join, plus
    outer joins and asymmetric bounds."""

    kind: Literal["stream_stream_join"]
    left_source: str
    right_source: str
    left_keys: list[str]
    right_keys: list[str]
    how: JoinHow = "inner"
    #: Symmetric bound: |left time - right time| <= time_window_ms.
    time_window_ms: Annotated[int, Field(ge=0)] | None = None
    #: Asymmetric bounds: right time - left time within [lower_bound_ms, upper_bound_ms].
    lower_bound_ms: int | None = None
    upper_bound_ms: int | None = None
    event_time_column: str = EVENT_TS
    left_event_time_column: str | None = None
    right_event_time_column: str | None = None
    time_mode: Literal["event", "processing"] = "event"
    lateness_ms: Annotated[int, Field(ge=0)] = 0
    late_data: Literal["drop", "dlq", "reopen"] = "drop"
    #: late_data = "dlq": late rows go to this Kafka topic instead of the dead-letter table
    dead_letter_topic: str | None = None
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    output_left_columns: OutputColumns | None = None
    output_right_columns: OutputColumns | None = None
    #: Output columns that identify a joined row; default: join_row_id, a hash of both
    #: sides' Kafka positions.
    row_id: list[str] | None = None

    @model_validator(mode="after")
    def _rules(self) -> JoinSpec:
        if self.left_source == self.right_source:
            raise key_error(
                "right_source", f"right_source = {self.right_source!r} is also left_source"
            )
        for side in ("left_keys", "right_keys"):
            keys = getattr(self, side)
            if not keys:
                raise key_error(
                    side,
                    f"{side} is empty: a join without keys would pair every row of a "
                    "time range (a cross join); name the key columns",
                )
            for i, k in enumerate(keys):
                _identifier(f"{side}[{i}]", k)
        if len(self.left_keys) != len(self.right_keys):
            raise key_error(
                "right_keys",
                f"left_keys has {len(self.left_keys)} columns and right_keys "
                f"{len(self.right_keys)}: they pair up one to one",
            )
        symmetric = self.time_window_ms is not None
        bounds = (self.lower_bound_ms, self.upper_bound_ms)
        if symmetric and any(b is not None for b in bounds):
            raise key_error(
                "time_window_ms",
                "time_window_ms and lower_bound_ms/upper_bound_ms are both set; use one",
            )
        if not symmetric and None in bounds:
            missing = "upper_bound_ms" if self.upper_bound_ms is None else "lower_bound_ms"
            raise key_error(
                missing,
                "a join needs a time bound: time_window_ms, or both lower_bound_ms and "
                "upper_bound_ms",
            )
        lower, upper = self.bounds
        if lower > upper:
            raise key_error(
                "upper_bound_ms", f"upper_bound_ms = {upper} is below lower_bound_ms = {lower}"
            )
        for key in ("event_time_column", "left_event_time_column", "right_event_time_column"):
            if getattr(self, key) is not None:
                _identifier(key, getattr(self, key))
        if self.time_mode == "processing" and (
            self.event_time_column != EVENT_TS
            or self.left_event_time_column
            or self.right_event_time_column
        ):
            raise key_error(
                "time_mode",
                f'time_mode = "processing" joins on arrival time ({EVENT_TS}); remove the '
                "event-time columns",
            )
        if self.late_data == "reopen":  # a joined row is final once written
            raise not_supported("late_data", self.late_data, ("drop", "dlq"))
        if self.late_data == "dlq" and self.time_mode == "processing":
            raise key_error(
                "late_data",
                'late_data = "dlq" needs event time: with time_mode = "processing" every row '
                'is stamped on arrival and none is ever late; use "drop"',
            )
        dead_letter_topic_rule(self.dead_letter_topic, self.late_data)
        for side in ("output_left_columns", "output_right_columns"):
            columns = getattr(self, side)
            if columns is not None and not columns:
                raise key_error(side, f"{side} is empty: list the columns to keep")
        return self

    @property
    def bounds(self) -> tuple[int, int]:
        """right time - left time must lie within these (inclusive), in ms."""
        if self.time_window_ms is not None:
            return -self.time_window_ms, self.time_window_ms
        assert self.lower_bound_ms is not None and self.upper_bound_ms is not None
        return self.lower_bound_ms, self.upper_bound_ms

    def side_event_time(self, side: str) -> str:
        override = self.left_event_time_column if side == "left" else self.right_event_time_column
        return override or self.event_time_column


LookupKind = Literal["delta", "postgres", "csv", "parquet"]


class LookupSpec(SpecModel):
    """``[[transform.lookups]]``: a static table joined in the SQL pre-stage, refreshed."""

    name: str
    kind: LookupKind
    path: str | None = None
    url: SecretStr | None = None
    table: str | None = None
    schema_ddl: str | None = Field(default=None, alias="schema")
    options: dict[str, str] = Field(default_factory=dict)
    #: Cached, and re-read once this much time has passed (0: not cached, read by every
    #: micro-batch); micro-batches planned after a refresh see the new contents.
    refresh_interval_ms: Annotated[int, Field(ge=0)] = 60_000

    @model_validator(mode="after")
    def _rules(self) -> LookupSpec:
        _identifier("name", self.name)
        postgres = self.kind == "postgres"
        if not postgres and not self.path:
            raise key_error("path", f'path is required for kind = "{self.kind}"')
        if postgres and self.path:
            raise key_error("path", 'path is not used by kind = "postgres"; set url and table')
        for key in ("url", "table"):
            if postgres and not getattr(self, key):
                raise key_error(key, f'{key} is required for kind = "postgres"')
            if not postgres and getattr(self, key):
                raise key_error(key, f'{key} is only valid for kind = "postgres"')
        if self.table and not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$", self.table):
            raise key_error("table", f"table = {self.table!r} must be table or schema.table")
        if self.schema_ddl and self.kind != "csv":
            raise key_error("schema", 'schema is only for kind = "csv" (others carry theirs)')
        return self


class TransformSpec(SpecModel):
    """``[transform]``: a SQL pre-stage with lookups then a window, or a join (then,
    with ``chain = ["join", "window"]``, a window over the joined stream)."""

    sql: str | None = None
    lookups: list[LookupSpec] = Field(default_factory=list)
    window: WindowSpec | None = None
    join: JoinSpec | None = None
    chain: list[Literal["join", "window"]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _join_kind(cls, data: Any) -> Any:
        join = data.get("join") if isinstance(data, dict) else None
        if (
            isinstance(join, dict)
            and join.get("kind", "stream_stream_join") != "stream_stream_join"
        ):
            raise key_error("join", f'join.kind = {join["kind"]!r}: use "stream_stream_join"')
        return data

    @model_validator(mode="after")
    def _operator(self) -> TransformSpec:
        if self.chain is not None and self.chain != ["join", "window"]:
            raise key_error(
                "chain", f'chain = {self.chain!r}: the supported chain is ["join", "window"]'
            )
        if self.window is not None and self.join is not None and self.chain is None:
            raise key_error(
                "join",
                "[transform.window] and [transform.join] are both set: to aggregate the "
                'joined stream, add chain = ["join", "window"]; otherwise keep one of them',
            )
        if self.chain is not None and (self.window is None or self.join is None):
            raise key_error("chain", "chain needs both [transform.join] and [transform.window]")
        if self.chain is not None and self.window is not None and self.window.late_data != "drop":
            raise key_error(
                "window",
                f'window.late_data = "{self.window.late_data}" after a join: the window\'s '
                "input is the join's output, whose late rows the join drops; use "
                '"drop" (the default) for a window after a join',
            )
        if self.window is None and self.join is None:
            raise key_error(
                "window", "[transform.window] or [transform.join] is required: what should run?"
            )
        if self.join is not None and (self.sql or self.lookups):
            raise key_error(
                "sql",
                "[transform].sql and lookups with a join are not supported yet: the join reads "
                "the source views directly",
            )
        names: dict[str, int] = {}
        for i, lookup in enumerate(self.lookups):
            if lookup.name in names:
                raise key_error(
                    "lookups",
                    f"lookups[{i}].name = {lookup.name!r} repeats "
                    f"lookups[{names[lookup.name]}].name",
                )
            names[lookup.name] = i
        if self.lookups and not self.sql:
            raise key_error("lookups", "lookups are joined in [transform].sql, which is empty")
        return self


class DeltaTarget(SpecModel):
    """``[target]`` with ``kind = "delta"``: MERGE on the natural key, once per batch
    (Delta's application transaction)."""

    kind: Literal["delta"] = "delta"
    path: str = Field(min_length=1)
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)

    def describe(self) -> str:
        return self.path


class PostgresTarget(SpecModel):
    """``[target]`` with ``kind = "postgres"``: upsert on the natural key, in the state
    store's database, in one transaction with the batch's ledger row."""

    kind: Literal["postgres"]
    table: str
    schema_name: str = Field(default="public", alias="schema")

    @model_validator(mode="after")
    def _rules(self) -> PostgresTarget:
        _identifier("table", self.table)
        _identifier("schema", self.schema_name)
        return self

    def describe(self) -> str:
        return f"{self.schema_name}.{self.table}"


class KafkaTarget(SpecModel):
    """``[target]`` with ``kind = "kafka"``: JSON rows keyed by the natural key. Append
    only: a crash between the produce and the ledger commit can repeat a batch."""

    kind: Literal["kafka"]
    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    client_config: dict[str, SecretStr] = Field(default_factory=dict)

    def describe(self) -> str:
        return self.topic


Target = Annotated[DeltaTarget | PostgresTarget | KafkaTarget, Field(discriminator="kind")]


class DeadLetterSpec(SpecModel):
    """``[dead_letter]``: where undecodable rows go, with their bytes: a Delta table
    (``kind = "delta"``, the default) or the state store's ``dead_letters`` table."""

    kind: Literal["delta", "state_store"] = "delta"
    path: str | None = None
    #: delta-rs storage options of the table (credentials, endpoint): secrets.
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rules(self) -> DeadLetterSpec:
        if self.kind == "state_store" and self.path is not None:
            raise key_error("path", 'path is only for kind = "delta"')
        if self.kind == "state_store" and self.storage_options:
            raise key_error("storage_options", 'storage_options is only for kind = "delta"')
        return self


class StateStoreSpec(SpecModel):
    """``[state_store]``: the Postgres ledger. Without ``url`` (and without the
    ``FLOW_STATE_STORE_URL`` environment variable), an embedded PostgreSQL under
    ``embedded_dir`` (default ``$FLOW_DATA_DIR/.flow/postgres``)."""

    url: SecretStr | None = None
    #: The Postgres schema holding the ledger's tables (``FLOW_STATE_STORE_SCHEMA``).
    schema_name: str | None = Field(default=None, alias="schema")
    embedded_dir: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> StateStoreSpec:
        if self.schema_name is not None and not re.match(r"^[a-z_][a-z0-9_]*$", self.schema_name):
            raise key_error("schema", f"schema = {self.schema_name!r} must match [a-z_][a-z0-9_]*")
        return self


class CheckpointSpec(SpecModel):
    """``[checkpoint]``: Spark's checkpoint (offsets, commits, RocksDB state)."""

    location: str | None = None


class SparkSpec(SpecModel):
    """``[spark]``: where the query runs; any Spark conf can be passed through."""

    master: str | None = None
    shuffle_partitions: Annotated[int, Field(gt=0)] | None = None
    #: The executors' Python environment, packed by ``flow-jobs pack``: shipped through
    #: ``spark.archives`` (``FLOW_JOBS_SPARK_ARCHIVE`` when unset).
    archive: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf")
    @classmethod
    def _no_contract_breaking_conf(cls, conf: dict[str, str]) -> dict[str, str]:
        for key, value in conf.items():
            name = key.strip().lower()
            why = REFUSED_SPARK_CONF.get(name)
            if why is not None and value.strip().lower() != REFUSED_SPARK_CONF_SAFE.get(name):
                raise ValueError(f"spark.conf.{key} = {value!r} is refused: {why}")
        return conf


#: ``[spark] conf`` settings that would break a Spark behaviour flow-jobs relies on
#: (each pinned by ``tests/test_spark_contracts.py``), with why; keys in lower case.
REFUSED_SPARK_CONF: dict[str, str] = {
    "asyncprogresstrackingenabled": (
        "asynchronous progress tracking is a query option Spark refuses for the "
        "foreachBatch sink flow-jobs writes through, and would let Spark plan a batch "
        "before the one before it commits (the ledger and late-row stamps read each "
        "batch's own offset log entry); remove it"
    ),
    "spark.sql.streaming.nodatamicrobatches.enabled": (
        "windows with emit = final close in the batch Spark runs when only the watermark "
        "moved; without it a closed window waits for new data; remove it"
    ),
    "spark.sql.streaming.multiplewatermarkpolicy": (
        "the pipeline's watermark is the minimum over its sources (spec reference, "
        '"Watermarks over several sources"); only "min" keeps that; remove it'
    ),
}
#: The one value of a refused key that is what flow-jobs runs with anyway.
REFUSED_SPARK_CONF_SAFE: dict[str, str] = {
    "spark.sql.streaming.nodatamicrobatches.enabled": "true",
    "spark.sql.streaming.multiplewatermarkpolicy": "min",
}


class RuntimeSpec(SpecModel):
    """``[runtime]``: how often a continuous run triggers a micro-batch."""

    trigger_interval_ms: Annotated[int, Field(ge=0)] = 1_000
    #: Serve Prometheus metrics on this port during a run (else ``$FLOW_METRICS_PORT``).
    metrics_port: Annotated[int, Field(gt=0, lt=65536)] | None = None


class ChecksSpec(SpecModel):
    """``[checks]``: thresholds of the Dagster asset checks."""

    #: watermark_lag fails when now - the global watermark exceeds this.
    watermark_lag_max_s: Annotated[float, Field(gt=0)] = 900.0
    #: late_row_rate warns when late rows / input rows over recent batches exceed this.
    late_row_rate_max: Annotated[float, Field(ge=0, le=1)] = 0.01
    #: how many recent batches late_row_rate looks at.
    late_row_rate_batches: Annotated[int, Field(gt=0)] = 100
    #: window_config_valid fails when the state-size upper bound (plan.sizing) exceeds this.
    state_budget_bytes: Annotated[int, Field(gt=0)] = 1 << 30
    #: target_fresh fails when the last batch committed longer ago than this.
    target_fresh_max_s: Annotated[float, Field(gt=0)] = 3600.0


class OrchestrationSpec(SpecModel):
    """``[orchestration]``: how Dagster triggers the pipeline."""

    #: a cron expression: an available-now run on this schedule (UTC).
    schedule: str | None = None
    #: a sensor that requests an available-now run when Kafka has new offsets.
    sensor: bool = True
    sensor_interval_s: Annotated[int, Field(ge=5)] = 30
    #: a schedule that runs watermark_lag and target_fresh while a continuous run is open.
    monitor: bool = True
    monitor_schedule: str = "*/5 * * * *"

    @field_validator("schedule", "monitor_schedule")
    @classmethod
    def _cron(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not _is_cron(v):
            raise ValueError(
                f"{info.field_name} = {v!r} is not a cron expression (e.g. '*/5 * * * *')"
            )
        return v


def _is_cron(text: str) -> bool:
    """Five fields of numbers, ranges, lists, steps, * or names (Dagster checks the rest)."""
    fields = text.split()
    return len(fields) == 5 and all(re.fullmatch(r"[\w*/,\-]+", f) for f in fields)


TARGET_KINDS = ("delta", "postgres", "kafka")


class PipelineSpec(SpecModel):
    """One ``pipelines/*.toml`` file."""

    name: str
    sources: list[KafkaSource] = Field(min_length=1)
    transform: TransformSpec
    target: Target
    dead_letter: DeadLetterSpec = Field(default_factory=DeadLetterSpec)
    state_store: StateStoreSpec = Field(default_factory=StateStoreSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    checks: ChecksSpec = Field(default_factory=ChecksSpec)
    orchestration: OrchestrationSpec = Field(default_factory=OrchestrationSpec)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not PIPELINE_NAME.match(v):
            raise ValueError(f"name = {v!r} must match [a-z0-9_-]+")
        return v

    @field_validator("sources", mode="before")
    @classmethod
    def _source_kinds(cls, v: Any) -> Any:
        for i, source in enumerate(v if isinstance(v, list) else []):
            kind = source.get("kind", "kafka") if isinstance(source, dict) else "kafka"
            if kind != "kafka":
                raise ValueError(f'sources[{i}].kind = "{kind}" is not supported; use "kafka"')
        return v

    @field_validator("target", mode="before")
    @classmethod
    def _target_kind(cls, v: Any) -> Any:
        if isinstance(v, dict):
            v = {"kind": "delta", **v}
            if v["kind"] not in TARGET_KINDS:
                raise key_error(
                    "kind", f"kind = {v['kind']!r} is not a target; use one of {TARGET_KINDS}"
                )
        return v

    @model_validator(mode="after")
    def _rules(self) -> PipelineSpec:
        seen: dict[str, str] = {}
        for i, s in enumerate(self.sources):
            if s.name in seen:
                raise key_error("sources", f"sources[{i}].name = {s.name!r} repeats {seen[s.name]}")
            seen[s.name] = f"sources[{i}].name"
        for i, lookup in enumerate(self.transform.lookups):
            if lookup.name in seen:
                raise key_error(
                    "transform",
                    f"lookups[{i}].name = {lookup.name!r} is also {seen[lookup.name]}: "
                    "views need distinct names",
                )
        join = self.transform.join
        if join is not None:
            names = [src.name for src in self.sources]
            for side in ("left_source", "right_source"):
                if getattr(join, side) not in names:
                    raise key_error(
                        "transform",
                        f"join.{side} = {getattr(join, side)!r} is not a declared source "
                        f"(sources: {', '.join(names)})",
                    )
        elif len(self.sources) > 1 and not self.transform.sql:
            raise ValueError(
                f"{len(self.sources)} sources are declared but [transform].sql is empty; "
                "a SQL pre-stage must combine them (e.g. a UNION ALL of the source views)"
            )
        self._check_columns()
        if self.supersedes_sessions and self.target.kind == "kafka":
            raise key_error(
                "target.kind",
                'kind = "kafka" cannot take session windows with emit = "current": each '
                "update replaces the group's rows its bounds overlap (a session grows, or "
                "two merge), which an append-only topic cannot delete; use a delta or "
                'postgres target, or emit = "final"',
            )
        return self

    def _check_columns(self) -> None:
        """Columns a window or join reads straight from a source's declared schema must
        be in it (``spec.columns``); with a SQL pre-stage or lookups Spark checks them."""
        from flow_jobs.spec.columns import ddl_columns, unknown

        t = self.transform
        if t.sql or t.lookups:
            return
        declared = {
            s.name: [*ddl_columns(s.schema_ddl), EVENT_TS, KAFKA_COLUMN]
            for s in self.sources
            if s.format == "json" and s.schema_ddl
        }

        def refuse(key: str, source: str, names: list[str]) -> None:
            missing = unknown(names, declared[source])
            if missing:
                raise key_error(
                    key,
                    f"{missing[0]!r} is not a column of source {source!r} (its schema: "
                    f"{', '.join(declared[source][:-2])}); name one of its columns, or "
                    "compute it in [transform].sql",
                )

        join, window = t.join, t.window
        if join is not None:
            sides = {
                "left": (join.left_source, join.left_keys, join.left_event_time_column),
                "right": (join.right_source, join.right_keys, join.right_event_time_column),
            }
            for side, (source, keys, time_column) in sides.items():
                if source not in declared:
                    continue
                refuse(f"transform.join.{side}_keys", source, keys)
                if join.time_mode == "event":
                    column = time_column or join.event_time_column
                    refuse(f"transform.join.{side}_event_time_column", source, [column])
        elif window is not None and len(self.sources) == 1 and self.sources[0].name in declared:
            source = self.sources[0].name
            if window.time_mode == "event":
                refuse("transform.window.event_time_column", source, [window.event_time_column])
            refuse("transform.window.group_by", source, list(window.group_by))
            for a in window.aggregations:
                refuse(f"transform.window.aggregations.{a.as_}.column", source, [a.column])

    @property
    def supersedes_sessions(self) -> bool:
        """Session windows emitted "current": a row replaces the group's rows it overlaps."""
        w = self.transform.window
        return w is not None and w.kind == "session" and w.emit == "current"

    @property
    def window(self) -> WindowSpec:
        assert self.transform.window is not None, "this pipeline has no window"
        return self.transform.window

    @property
    def has_window(self) -> bool:
        return self.transform.window is not None

    def warnings(self) -> list[str]:
        """What is valid but deserves a word at start-up (and from ``validate``)."""
        out = []
        if self.has_window and self.window.reopens and self.target.kind == "kafka":
            out.append(
                'late_data = "reopen" re-emits a window each time late rows correct it, and '
                "a Kafka topic keeps every record: consumers see one record per revision "
                f"(the {self.window.revision_column} column) and should keep the highest "
                "per window and group"
            )
        return out

    def starting_at(self, instant: datetime) -> PipelineSpec:
        """This spec with every source starting at ``instant`` (a fresh checkpoint of a
        generation started by ``flow-jobs reset --from``)."""
        start = StartingTimestamp(timestamp=instant)
        sources = [s.model_copy(update={"starting_offsets": start}) for s in self.sources]
        return self.model_copy(update={"sources": sources})

    def checkpoint_location(self) -> str:
        return self.checkpoint.location or f"./.flow/{self.name}/checkpoint"

    def dead_letter_path(self) -> str:
        """``[dead_letter] path``; unset, next to a Delta target on object storage
        (``<target path>_dead_letters``), else ``./.flow/<name>/dead_letters``.

        Why beside such a target: its run may be a short-lived container (a Dagster run,
        a cluster driver) whose local disk goes with it, and dead letters must outlive
        the run like the windows do; the target's bucket and credentials are the ones
        the pipeline is known to write. A local target keeps the local default."""
        if self.dead_letter.path:
            return self.dead_letter.path
        if self._dead_letters_beside_target():
            assert isinstance(self.target, DeltaTarget)
            return self.target.path.rstrip("/") + "_dead_letters"
        return f"./.flow/{self.name}/dead_letters"

    def dead_letter_storage_options(self) -> dict[str, str]:
        """The dead-letter table's storage options, revealed: ``[dead_letter]
        storage_options``, else the target's when the table defaults to beside it."""
        if self.dead_letter.storage_options:
            return revealed(self.dead_letter.storage_options)
        if self._dead_letters_beside_target():
            assert isinstance(self.target, DeltaTarget)
            return revealed(self.target.storage_options)
        return {}

    def _dead_letters_beside_target(self) -> bool:
        return (
            self.dead_letter.kind == "delta"
            and not self.dead_letter.path
            and isinstance(self.target, DeltaTarget)
            and on_object_store(self.target.path)
        )

    def natural_key(self) -> list[str]:
        """A windowed pipeline's natural key (a join's depends on the sources' schemas:
        see ``flow_jobs.plan.joins``)."""
        w = self.window
        if w.is_count_based and w.emit == "current":
            # A count window's bounds move while it fills: its index names it.
            return [w.window_index_column, *w.group_by]
        index = [w.window_index_column] if w.is_count_based else []
        return [w.window_start_column, w.window_end_column, *index, *w.group_by]

    def output_columns(self) -> list[str]:
        """The one place that knows the output column order."""
        w = self.window
        index = [w.window_index_column] if w.is_count_based else []
        return [
            w.window_start_column,
            w.window_end_column,
            *index,
            *w.group_by,
            *(n for a in w.aggregations for n in a.output_names()),
            *([w.revision_column] if w.reopens else []),
        ]

    def to_document(self) -> dict[str, Any]:
        """The spec as the plain TOML-shaped dict it validates from: keys by their TOML
        names, defaults left out, secrets as their values. Edit it and ``model_validate``
        it to derive a spec."""
        return _plain(self.model_dump(by_alias=True, exclude_defaults=True))

    def to_toml(self) -> str:
        """The TOML ``load_spec`` reads back into an equal spec (secrets included)."""
        import tomli_w

        return tomli_w.dumps(self.to_document())


def _plain(value: Any) -> Any:
    """model_dump output without SecretStr wrappers (TOML needs the value itself)."""
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
