"""``[transform]``: the SQL, the stream-stream join, the temporal join, the lookups and
the per-source operators (the deduplication among them)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    SerializeAsAny,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from flow_jobs.records import EVENT_TS
from flow_jobs.spec.base import (
    SpecModel,
    _identifier,
    dead_letter_topic_rule,
    key_error,
    not_supported,
)
from flow_jobs.spec.dedup import DedupSpec
from flow_jobs.spec.operators import OperatorSpec
from flow_jobs.spec.windows import WindowSpec

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource

JoinHow = Literal["inner", "left", "right", "full"]


class Stage(Protocol):
    """What the core asks of a stage of ``[transform]`` (a window, a join, a temporal
    join) without naming its kind: ``TransformSpec.stages()`` lists them in order, and
    the compile step and the inspect reading of each are found by its ``STAGE``
    (``flow_jobs.plan.pipelines.PIPELINES``, ``flow_jobs.runtime.inspect.READINGS``)."""

    #: the stage's name: its ``[transform.<name>]`` table, its registries' key
    STAGE: ClassVar[str]
    #: what its state holds for ``flow-jobs inspect`` (``StateReport``): open windows,
    #: or buffered rows
    HOLDS: ClassVar[Literal["windows", "rows"]]
    lateness_ms: int

    @property
    def watermark_delay_ms(self) -> int:
        """How far the watermark it runs on lags the highest event time."""
        ...

    @property
    def dead_letter_topic(self) -> str | None:
        """Where its late rows go as Kafka records (None: not to a topic)."""
        ...

    def summary(self, over: Sequence[str] | None) -> str:
        """It in a few words, for the pipeline's one line (``flow_jobs.one_line``);
        ``over``: the sources it reads, when it is the first stage."""
        ...

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """As the first stage: the declared sources are what it reads (``sql``: the
        pre-stage over them, if any); a ``ValueError`` (``key_error``) says why not."""
        ...

    def key_columns(self) -> list[str]:
        """The columns ``flow-jobs inspect --group KEY=VALUE`` may filter its state on."""
        ...


#: Output column lists: names kept as they are, or a table of column -> new name.
OutputColumns = list[str] | dict[str, str]


class JoinSpec(SpecModel):
    """``[transform.join]``: a keyed, time-bounded stream-stream join, plus
    outer joins and asymmetric bounds."""

    STAGE: ClassVar[str] = "join"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"

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

    @property
    def watermark_delay_ms(self) -> int:
        """How far each side's watermark (``withWatermark``) lags its highest event time."""
        return self.lateness_ms

    def summary(self, over: Sequence[str] | None) -> str:
        lower, upper = self.bounds
        return (
            f"{self.how} join of {self.left_source} and {self.right_source} on "
            f"{', '.join(self.left_keys)} within [{lower}, {upper}] ms"
        )

    def key_columns(self) -> list[str]:
        return list(dict.fromkeys([*self.left_keys, *self.right_keys]))

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """Both sides are declared sources."""
        names = [src.name for src in sources]
        for side in ("left_source", "right_source"):
            if getattr(self, side) not in names:
                raise key_error(
                    "transform",
                    f"join.{side} = {getattr(self, side)!r} is not a declared source "
                    f"(sources: {', '.join(names)})",
                )


class TemporalJoinSpec(SpecModel):
    """``[transform.temporal_join]``: each record of a stream joined with the version of
    a versioned side (a changelog topic) valid at the record's event time
    (docs/spec-reference.md, "[transform.temporal_join]")."""

    STAGE: ClassVar[str] = "temporal_join"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"
    #: late rows go to the dead-letter table only
    dead_letter_topic: ClassVar[None] = None

    stream_source: str
    #: the changelog: a JSON source whose records are versions of its keys; a record
    #: with a NULL value (a tombstone) ends its key's version, its keys read from the
    #: Kafka key (a JSON object), its time from the Kafka timestamp
    versions_source: str
    stream_keys: list[str]
    version_keys: list[str]
    how: Literal["inner", "left"] = "inner"
    event_time_column: str = EVENT_TS
    stream_event_time_column: str | None = None
    version_event_time_column: str | None = None
    lateness_ms: Annotated[int, Field(ge=0)] = 0
    late_data: Literal["drop", "dlq"] = "drop"
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000
    #: a source with no new record for this long stops holding the watermark back
    #: (docs/spec-reference.md, "Watermarks over several sources")
    source_idleness_ms: Annotated[int, Field(gt=0)] = 60_000
    #: a key's version older than the watermark minus this leaves the state (unset: it
    #: stays until a later version or a tombstone ends it)
    retention_ms: Annotated[int, Field(gt=0)] | None = None
    output_stream_columns: OutputColumns | None = None
    output_version_columns: OutputColumns | None = None

    @model_validator(mode="after")
    def _rules(self) -> TemporalJoinSpec:
        if self.stream_source == self.versions_source:
            raise key_error(
                "versions_source", f"versions_source = {self.versions_source!r} is also "
                "stream_source"
            )  # fmt: skip
        for side in ("stream_keys", "version_keys"):
            keys = getattr(self, side)
            if not keys:
                raise key_error(side, f"{side} is empty: name the key columns")
            for i, k in enumerate(keys):
                _identifier(f"{side}[{i}]", k)
        if len(self.stream_keys) != len(self.version_keys):
            raise key_error(
                "version_keys",
                f"stream_keys has {len(self.stream_keys)} columns and version_keys "
                f"{len(self.version_keys)}: they pair up one to one",
            )
        for key in ("event_time_column", "stream_event_time_column", "version_event_time_column"):
            if getattr(self, key) is not None:
                _identifier(key, getattr(self, key))
        for side in ("output_stream_columns", "output_version_columns"):
            columns = getattr(self, side)
            if columns is not None and not columns:
                raise key_error(side, f"{side} is empty: list the columns to keep")
        return self

    @property
    def watermark_delay_ms(self) -> int:
        """How far each source's watermark runs behind its highest event time."""
        return self.lateness_ms

    def summary(self, over: Sequence[str] | None) -> str:
        return (
            f"{self.how} temporal join of {self.stream_source} with the versions of "
            f"{self.versions_source} on {', '.join(self.stream_keys)}"
        )

    def key_columns(self) -> list[str]:
        return list(dict.fromkeys([*self.stream_keys, *self.version_keys]))

    def side_source(self, side: str) -> str:
        return self.stream_source if side == "stream" else self.versions_source

    def side_keys(self, side: str) -> list[str]:
        return self.stream_keys if side == "stream" else self.version_keys

    def side_event_time(self, side: str) -> str:
        override = getattr(self, f"{side}_event_time_column")
        return override or self.event_time_column

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """Both sides are declared sources; the versions are JSON (a tombstone's keys
        are read from its Kafka key as JSON)."""
        by_name = {s.name: s for s in sources}
        for side in ("stream_source", "versions_source"):
            if getattr(self, side) not in by_name:
                raise key_error(
                    f"transform.temporal_join.{side}",
                    f"{getattr(self, side)!r} is not a declared source "
                    f"(sources: {', '.join(by_name)})",
                )
        if len(sources) != 2:
            raise key_error(
                "sources",
                f"{len(sources)} sources are declared; a temporal join reads two, its "
                "stream_source and its versions_source",
            )
        versions = by_name[self.versions_source]
        if versions.format != "json" or versions.schema_ddl is None:
            raise key_error(
                "transform.temporal_join.versions_source",
                f"{versions.name!r} is format = {versions.format!r}: the versions are read as "
                "JSON with a declared schema (a tombstone's keys from its Kafka key)",
            )


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


def _operator_kind(v: Any, info: ValidationInfo) -> Any:
    """One ``[[transform.operators]]`` table: the model of its kind, registered now
    (``OPERATOR_SPECS``: the built-ins, the plug-ins)."""
    return OperatorSpec.model_validate(v, context=info.context) if isinstance(v, dict) else v


class TransformSpec(SpecModel):
    """``[transform]``: a SQL pre-stage with lookups then a window, or a join (then,
    with ``chain = ["join", "window"]``, a window over the joined stream)."""

    sql: str | None = None
    lookups: list[LookupSpec] = Field(default_factory=list)
    dedup: list[DedupSpec] = Field(default_factory=list)
    #: each the model of its kind (``OperatorSpec.model_validate``); dumped as that model
    operators: list[Annotated[SerializeAsAny[OperatorSpec], BeforeValidator(_operator_kind)]] = (
        Field(default_factory=list)
    )
    #: the model of its kind (``WindowSpec.model_validate``); dumped as that model
    window: SerializeAsAny[WindowSpec] | None = None
    join: JoinSpec | None = None
    temporal_join: TemporalJoinSpec | None = None
    chain: list[Literal["join", "window"]] | None = None

    def stages(self) -> list[Stage]:
        """Its stages in the order rows flow through them: the first reads the sources
        (after their operators and the SQL), e.g. ``[join, window]`` with a chain."""
        ordered = [self.join, self.temporal_join, self.window]
        return [stage for stage in ordered if stage is not None]

    @field_validator("window", mode="before")
    @classmethod
    def _window_kind(cls, v: Any, info: ValidationInfo) -> Any:
        # the kinds registered now (``WINDOW_FAMILIES``: the built-ins, the plug-ins)
        return WindowSpec.model_validate(v, context=info.context) if isinstance(v, dict) else v

    @field_serializer("operators", mode="wrap")
    def _operators_with_kind(self, v: list[OperatorSpec], handler: Any) -> Any:
        # ``kind`` names the model to read a table back with, default or not
        return [{"kind": o.kind, **d} for o, d in zip(v, handler(v), strict=True)]

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
        if self.temporal_join is not None:
            others = [k for k in ("window", "join", "sql", "lookups") if getattr(self, k)]
            if others:
                raise key_error(
                    "temporal_join",
                    f"[transform.temporal_join] with {others[0]} is not supported yet: the "
                    "temporal join reads the source views and writes the target itself",
                )
        elif self.window is None and self.join is None:
            raise key_error(
                "window",
                "[transform.window], [transform.join] or [transform.temporal_join] is "
                "required: what should run?",
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
