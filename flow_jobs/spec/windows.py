"""``[transform.window]``: the keys and rules every window kind shares, and the registry
of the window families.

A window family is one module (``flow_jobs.windows`` holds the built-in ones; a plug-in
may add its own, ``flow_jobs.plugins``) that defines a subclass of ``WindowSpec`` with
its kinds, size keys and rules, and registers it (``register_window_family``). The
subclass answers everything the engine asks of a window kind: where it runs, Spark's
window column, what ``--plan``, the CLI and ``inspect`` say, its state-size bound, how
the Kafka reader may pre-aggregate for it and its state-API logic (a
``flow_jobs.windows.family.StateFamily``). The core reads ``[transform.window]`` with
the model its ``kind`` names in ``WINDOW_FAMILIES`` when it validates, and never names a
kind itself.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from flow_jobs.plugins import Registry
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.aggregation import Aggregation
from flow_jobs.spec.base import (
    SpecModel,
    _identifier,
    dead_letter_topic_rule,
    key_error,
    not_supported,
)
from flow_jobs.spec.stages import ColumnUse
from flow_jobs.spec.top_n import TopNSpec
from flow_jobs.spec.window_columns import (
    check_output_columns,
    window_columns_read,
    window_event_times,
)

if TYPE_CHECKING:
    from pyspark.sql import Column

    from flow_jobs.spec.sources import KafkaSource
    from flow_jobs.windows.family import StateFamily

__all__ = ["WINDOW_FAMILIES", "PaneFolding", "TopNSpec", "WindowSpec", "register_window_family"]

#: Every window kind's model, in the order the families registered them.
WINDOW_FAMILIES: Registry[type[WindowSpec]] = Registry("window kind")
#: What a state-API window compiles to, in ``validate --plan``.
ON_STATE_API = "transformWithStateInPandas (event-time timers)"
#: Why a kind Spark has no operator for runs on the state API (``state_reason``).
NO_SPARK_OPERATOR = "Spark has no operator for it"

Model = TypeVar("Model", bound="type[WindowSpec]")


def register_window_family(model: Model) -> Model:
    """Register a family's model under each of its kinds (``SIZE_KEYS``); a class
    decorator, run when the family's module is imported."""
    for kind in model.SIZE_KEYS:
        WINDOW_FAMILIES.register(kind, model)
    return model


@dataclass(frozen=True)
class PaneFolding:
    """How the Kafka reader may fold a window's rows into partials before Spark
    (``flow_jobs.combine.decide``): per pane of ``pane_ms`` (every window a whole number of
    panes aligned to the epoch), or, with ``gap_ms``, per run of rows at most the gap
    apart (what a session merges)."""

    pane_ms: int = 0
    gap_ms: int = 0


#: Where a window runs (``WindowSpec.engine``), in a few words.
ENGINES = {"native": "on Spark's aggregation", "state": "on Spark's state API"}


class WindowSpec(SpecModel):
    """``[transform.window]``: the keys every kind shares (docs/spec-reference.md).

    A family's model narrows ``kind`` to its kinds, adds its size keys (``SIZE_KEYS``)
    and rules, and answers what the rest of the engine asks of a window kind: where it
    runs (``runs_natively``), Spark's window column (``native_window``), what ``--plan``
    and the CLI say (``native_text``, ``state_reason``, ``size_text``), how many windows
    a group holds at once (``active_windows``), how the reader pre-aggregates for it
    (``pane_folding``) and its state-API logic (``state_family``); the class variables
    below say the rest.

    ``WindowSpec.model_validate`` gives the model of the data's ``kind``, looked up in
    ``WINDOW_FAMILIES`` then."""

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
    #: Windows that count events (``COUNTS_EVENTS``) only: their bounds need not be unique.
    window_index_column: str = "window_index"
    #: late_data = "reopen": 1 for a window's first emit, +1 for each correction
    revision_column: str = "revision"
    #: "current" on every kind: an update per trigger supersedes the window's earlier
    #: row, by its natural key, its index (``COUNTS_EVENTS``), or every row of the group
    #: its bounds overlap (``supersedes_overlapping``).
    emit: Literal["final", "current"] = "final"
    #: Rows whose event time is further ahead of the micro-batch's processing time are
    #: dead-lettered: one far-future row would otherwise push the watermark ahead and
    #: make every following on-time row late.
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    #: Windows with a ``pane_folding`` over one JSON source: the Kafka reader folds
    #: records into partial aggregates before Spark (flow_jobs.combine.decide). A
    #: throughput knob.
    pre_aggregate: bool = True
    aggregations: list[Aggregation] = Field(min_length=1)
    #: only the top N rows of each window (and partition)
    top_n: TopNSpec | None = None

    #: Its stage of ``[transform]`` (``flow_jobs.spec.stages.Stage``).
    STAGE: ClassVar[str] = "window"
    NOUN: ClassVar[str] = "a window"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "windows"
    TAKES_OPERATORS: ClassVar[bool] = True
    #: Each kind of the family, with its size keys (all required for that kind, and
    #: valid for no other).
    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: Why the family's windows cannot reopen (late_data = "reopen"); None: they can.
    REOPEN_REFUSED: ClassVar[str | None] = ""
    #: Windows numbered by event, keyed by their index (``window_index_column``).
    COUNTS_EVENTS: ClassVar[bool] = False
    #: ``native_window`` is a list of windows (of different lengths) per row, which the
    #: aggregation groups on one by one (``flow_jobs.plan.windows``).
    EXPLODES: ClassVar[bool] = False
    #: Every group's windows have the same bounds, so a window closes for every group at
    #: once: top_n ranks the groups within it, and Spark's aggregation state is keyed by
    #: (window, group), the window in the key.
    SHARED_BOUNDS: ClassVar[bool] = False
    #: Native windows whose bounds are each group's own: the field of Spark's
    #: aggregation state value that holds them (``runtime.caps``, ``inspect``).
    NATIVE_STATE_BOUNDS: ClassVar[str | None] = None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """On ``WindowSpec`` itself: the model of ``obj``'s kind (``WINDOW_FAMILIES``)."""
        if cls is WindowSpec and isinstance(obj, dict):
            return _family_of(obj).model_validate(obj, *args, **kwargs)
        return super().model_validate(obj, *args, **kwargs)

    @staticmethod
    def size_keys() -> tuple[str, ...]:
        """Every family's size keys, in the order the families registered them."""
        models = (model for _, model in WINDOW_FAMILIES.items())
        keys = (k for model in models for ks in model.SIZE_KEYS.values() for k in ks)
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
    def has_native_form(self) -> bool:
        """Spark's aggregation has a form of the kind, whether this window runs there."""
        return self.native_text is not None

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

    def summary(self, over: Sequence[str] | None) -> str:
        """E.g. "tumbling window 60000 ms on Spark's aggregation over clicks"."""
        text = f"{self.kind} window {self.size_text} {ENGINES[self.engine]}"
        return f"{text} over {', '.join(over)}" if over else text

    def key_columns(self) -> list[str]:
        return list(self.group_by)

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """Over several sources, the SQL combines them."""
        if len(sources) > 1 and not sql:
            raise ValueError(
                f"{len(sources)} sources are declared but [transform].sql is empty; "
                "a SQL pre-stage must combine them (e.g. a UNION ALL of the source views)"
            )

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        return window_columns_read(self, sources)

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        return window_event_times(self, sources)

    @abstractmethod
    def active_windows(self) -> int:
        """How many windows of a group can be open at once (``flow_jobs.plan.sizing``)."""

    @abstractmethod
    def state_family(self) -> StateFamily:
        """The family's state-API logic with this window's parameters, built on the
        driver and pickled with the operator (``flow_jobs.windows.processor``)."""

    def pane_folding(self) -> PaneFolding | None:
        """How the Kafka reader may fold rows for this window (None: it may not)."""
        return None

    @property
    def supersedes_overlapping(self) -> bool:
        """An emitted row replaces the group's rows whose bounds it overlaps (bounds that
        move and merge while open): the target deletes them (``Supersede``)."""
        return False

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
                valid = [k for k, model in WINDOW_FAMILIES.items() if key in model.SIZE_KEYS[k]]
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
        check_output_columns(self)
        if self.top_n is not None:
            shared = [k for k, model in WINDOW_FAMILIES.items() if model.SHARED_BOUNDS]
            self.top_n.check_window(self, shared)
        return self

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
            reopening = [k for k, m in WINDOW_FAMILIES.items() if m.REOPEN_REFUSED is None]
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
        return self.lateness_ms + self.reopen_lateness_ms

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

    @property
    def reopen_lateness_ms(self) -> int:
        """How long after its end a window still takes late rows (0: it does not reopen)."""
        return (self.allowed_lateness_ms or 0) if self.reopens else 0


def _family_of(data: dict[str, Any]) -> type[WindowSpec]:
    """The model of ``data``'s kind, or a validation error on ``kind`` (a nested
    ``ValidationError`` keeps its key: ``transform.window.kind``)."""
    kind = data.get("kind")
    if kind is None:
        raise _kind_error(data, "required key is missing")
    if not isinstance(kind, str) or kind not in WINDOW_FAMILIES:
        names = [repr(k) for k in WINDOW_FAMILIES.names()]
        expected = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        raise _kind_error(data, f"Input should be {expected} (got {kind!r})")
    return WINDOW_FAMILIES.get(kind)


def _kind_error(data: dict[str, Any], message: str) -> ValidationError:
    error = InitErrorDetails(type=key_error("kind", message), loc=(), input=data)
    return ValidationError.from_exception_data("WindowSpec", [error])


def milliseconds(value: int | None) -> str:
    """A duration as Spark's interval strings take it."""
    return f"{value} milliseconds"
