"""``[transform.window]``: the keys and rules every window kind shares.

Each window family is one module of ``flow_jobs.windows`` holding its spec model (a
subclass of ``WindowSpec`` with its size keys and rules: ``fixed`` for tumbling and
hopping, ``cumulate``, ``session``, ``sliding``, ``count``), its engine choice, its native
compile, its descriptions, its state-size bound and its state-API logic.
``flow_jobs.windows`` joins the models into the union ``[transform.window]`` is read with,
discriminated on ``kind``.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    Field,
    model_validator,
)

from flow_jobs.spec.aggregation import Aggregation
from flow_jobs.spec.base import (
    EVENT_TS,
    SpecModel,
    _identifier,
    dead_letter_topic_rule,
    key_error,
    not_supported,
)

if TYPE_CHECKING:
    from pyspark.sql import Column

    from flow_jobs.windows.family import Shape, StateFamily


class TopNSpec(SpecModel):
    """``[transform.window.top_n]``: only the top ``n`` rows of each window (and
    ``partition_by`` values), ranked by ``order_by`` (docs/spec-reference.md, "Top N")."""

    n: Annotated[int, Field(gt=0)]
    #: aggregation aliases, each with its direction: "clicks DESC", "amount_sum ASC"
    order_by: list[str] = Field(min_length=1)
    partition_by: list[str] = Field(default_factory=list)

    def ordering(self) -> list[tuple[str, Literal["ascending", "descending"]]]:
        """``order_by`` as (alias, direction) pairs (checked by ``WindowSpec``)."""
        out: list[tuple[str, Literal["ascending", "descending"]]] = []
        for item in self.order_by:
            alias, _, direction = item.strip().rpartition(" ")
            out.append(
                (alias.strip(), "descending" if direction.upper() == "DESC" else "ascending")
            )
        return out


#: Kinds whose windows share their bounds across groups (each window closes for every
#: group at once), which top_n ranks within.
TOP_N_KINDS = ("tumbling", "hopping", "cumulate")

#: Every window kind, in the order its family's model registered it (``flow_jobs.windows``
#: imports the families: fixed, session, sliding, count).
KINDS: dict[str, type[WindowSpec]] = {}
#: What a state-API window compiles to, in ``validate --plan``.
ON_STATE_API = "transformWithStateInPandas (event-time timers)"
#: Why a kind Spark has no operator for runs on the state API (``state_reason``).
NO_SPARK_OPERATOR = "Spark has no operator for it"


class WindowSpec(SpecModel):
    """``[transform.window]``: the keys every kind shares (docs/spec-reference.md).

    A family's model (``flow_jobs.windows``) narrows ``kind`` to its kinds, adds its size
    keys (``SIZE_KEYS``) and rules, and answers what the rest of the engine asks of a
    window kind: where it runs (``runs_natively``), Spark's window column
    (``native_window``), what ``--plan`` and the CLI say (``native_text``,
    ``state_reason``, ``size_text``), how many windows a group holds at once
    (``active_windows``), its parameters as its state-API family reads them (``shape``)
    and that family (``STATE_FAMILY``)."""

    kind: str
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
    #: only the top N rows of each window (and partition)
    top_n: TopNSpec | None = None

    #: Each kind of the family, with its size keys (all required for that kind, and
    #: valid for no other).
    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: Why the family's windows cannot reopen (late_data = "reopen"); None: they can.
    REOPEN_REFUSED: ClassVar[str | None] = ""
    #: Count windows: numbered by event, keyed by their index.
    COUNTS_EVENTS: ClassVar[bool] = False
    #: ``native_window`` is a list of windows (of different lengths) per row, which the
    #: aggregation groups on one by one (cumulating windows).
    EXPLODES: ClassVar[bool] = False
    #: The family's state-API logic (``flow_jobs.windows.family``).
    STATE_FAMILY: ClassVar[type[StateFamily]]

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for kind in cls.SIZE_KEYS:
            KINDS[kind] = cls

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """On ``WindowSpec`` itself: the model of ``obj``'s kind (``flow_jobs.windows``)."""
        if cls is WindowSpec:
            from flow_jobs.windows import window_adapter

            return window_adapter().validate_python(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)

    @staticmethod
    def size_keys() -> tuple[str, ...]:
        """Every family's size keys, in the order the families registered them."""
        keys = (k for model in KINDS.values() for ks in model.SIZE_KEYS.values() for k in ks)
        return tuple(dict.fromkeys(keys))

    # -- what each family answers ---------------------------------------------------

    @property
    @abstractmethod
    def runs_natively(self) -> bool:
        """Spark's own aggregation can run the window (``engine`` adds the rules that
        move any kind to the state API)."""

    @abstractmethod
    def native_window(self, event_time: Column) -> Column | None:
        """Spark's window column over ``event_time`` (None: the kind has no native form)."""

    @property
    @abstractmethod
    def native_text(self) -> str | None:
        """Spark's window column in words, with its parameters, as ``validate --plan``
        says it, e.g. "window(event_time, 60000 ms)" (None: no native form)."""

    @property
    def state_reason(self) -> str:
        """Why the window runs on the state API, as ``validate --plan`` says it (the
        rules of ``engine``; a family adds its own)."""
        if self.reopens:
            return "its windows reopen: Spark's aggregation emits a window once"
        if self.exact_distinct:
            return "an exact count_distinct, its set capped while a window is open"
        return NO_SPARK_OPERATOR

    @property
    @abstractmethod
    def size_text(self) -> str:
        """The window's size in the CLI's one-line description, e.g. "60000 ms"."""

    @abstractmethod
    def active_windows(self) -> int:
        """How many windows of a group can be open at once (``flow_jobs.plan.sizing``)."""

    @abstractmethod
    def shape(self) -> Shape:
        """The window's parameters as its state-API family reads them."""

    def state_family(self) -> StateFamily:
        return self.STATE_FAMILY.of(self.shape())

    # -- rules ----------------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def _size_keys_of_other_kinds(cls, data: Any) -> Any:
        if not isinstance(data, dict) or cls is WindowSpec:
            return data
        kind = data.get("kind")
        own = cls.SIZE_KEYS.get(kind, ()) if isinstance(kind, str) else ()
        for key in WindowSpec.size_keys():
            if data.get(key) is not None and key not in own:  # None: not set
                valid = [k for k, model in KINDS.items() if key in model.SIZE_KEYS[k]]
                raise key_error(
                    key,
                    f"{key} is only valid for kind = "
                    + " or ".join(f'"{k}"' for k in valid)
                    + f', not "{kind}"',
                )
        return data

    @model_validator(mode="after")
    def _rules(self) -> WindowSpec:
        for key in self.SIZE_KEYS[self.kind]:
            if getattr(self, key) is None:
                raise key_error(key, f'{key} is required when kind = "{self.kind}"')
        self._family_rules()
        self._time_rules()
        self._late_data_rules()
        if self.crash_recovery != "at_least_once":
            raise not_supported("crash_recovery", self.crash_recovery, ("at_least_once",))
        if self.on_state_cap != "fail":
            raise not_supported("on_state_cap", self.on_state_cap, ("fail",))
        self._output_rules()
        self._top_n_rules()
        return self

    def _top_n_rules(self) -> None:
        top = self.top_n
        if top is None:
            return
        if self.kind not in TOP_N_KINDS:
            raise key_error(
                "top_n",
                f'top_n ranks the groups of one window; kind = "{self.kind}" gives each group '
                f"windows of its own bounds: use one of {', '.join(TOP_N_KINDS)}",
            )
        if self.reopens:
            raise key_error("top_n", 'top_n with late_data = "reopen" is not supported')
        ranked = {
            name: a.agg
            for a in self.aggregations
            for name in a.output_names()
            if not name.endswith("_sketch")
        }
        for i, item in enumerate(top.order_by):
            words = item.split()
            if len(words) != 2 or words[1].upper() not in ("ASC", "DESC"):
                raise key_error(
                    f"top_n.order_by[{i}]",
                    f"{item!r}: give an aggregation alias and its direction, e.g. "
                    f"'{words[0] if words else 'clicks'} DESC'",
                )
            if words[0] not in ranked:
                raise key_error(
                    f"top_n.order_by[{i}]",
                    f"{words[0]!r} is not an aggregation alias ({', '.join(ranked)})",
                )
            if ranked[words[0]] in ("collect", "reduce"):
                raise key_error(
                    f"top_n.order_by[{i}]", f"{words[0]!r} is a {ranked[words[0]]}: not ordered"
                )
        for i, column in enumerate(top.partition_by):
            if column not in self.group_by:
                raise key_error(
                    f"top_n.partition_by[{i}]",
                    f"{column!r} is not a group_by column ({', '.join(self.group_by) or 'none'})",
                )

    def _family_rules(self) -> None:
        """A family's rules between its size keys (e.g. ``hop_ms <= duration_ms``)."""

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
        if self.REOPEN_REFUSED is not None:
            why = self.REOPEN_REFUSED
            reopening = [k for k, model in KINDS.items() if model.REOPEN_REFUSED is None]
            raise key_error(
                "late_data",
                f'late_data = "reopen" is not supported for kind = "{self.kind}": {why}; '
                f'use "drop" or "dlq" (reopen works for {", ".join(reopening)})',
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

    # -- derived --------------------------------------------------------------------

    @property
    def is_count_based(self) -> bool:
        return self.COUNTS_EVENTS

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
        if self.exact_distinct:
            # Spark's aggregation keeps the set in its own state, where no check can see
            # it before the window is emitted; the state API caps it while open.
            return "state"
        return "native" if self.runs_natively else "state"

    def _shape_fields(self) -> dict[str, Any]:
        """The keys of ``Shape`` every family shares."""
        return {
            "allowed_lateness_ms": (self.allowed_lateness_ms or 0) if self.reopens else 0,
            "revision": self.reopens,
            "event_time": self.time_mode == "event",
        }


class StateApiWindow(WindowSpec):
    """A kind Spark has no operator for (sliding and count windows): always on the state
    API, a group's state its events, sized per row rather than per window."""

    @property
    def runs_natively(self) -> bool:
        return False

    def native_window(self, event_time: Column) -> None:
        return None

    @property
    def native_text(self) -> None:
        return None

    def active_windows(self) -> int:
        return 1  # per-group state, sized per row


def milliseconds(value: int | None) -> str:
    """A duration as Spark's interval strings take it."""
    return f"{value} milliseconds"
