"""``[transform.join]`` and ``[transform.temporal_join]``: the join stages' spec models
(``flow_jobs.spec.stages.Stage``; their compile steps: ``flow_jobs.joins``,
``flow_jobs.temporal_join``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.records import EVENT_TS
from flow_jobs.spec.base import (
    SpecModel,
    _identifier,
    dead_letter_topic_rule,
    key_error,
    not_supported,
)

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource

JoinHow = Literal["inner", "left", "right", "full"]

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
