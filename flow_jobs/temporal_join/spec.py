"""``[transform.temporal_join]``'s keys: the temporal join's spec model, a stage of
``[transform]`` (``flow_jobs.spec.stages.Stage``; ``flow_jobs.temporal_join.plugin``
registers it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.records import EVENT_TS
from flow_jobs.spec.base import OutputColumns, SpecModel, _identifier, key_error
from flow_jobs.spec.stages import ColumnUse

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource


class TemporalJoinSpec(SpecModel):
    """``[transform.temporal_join]``: each record of a stream joined with the version of
    a versioned side (a changelog topic) valid at the record's event time
    (docs/spec-reference.md, "[transform.temporal_join]")."""

    STAGE: ClassVar[str] = "temporal_join"
    NOUN: ClassVar[str] = "a temporal join"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"
    #: the sources' operators (a dedup) cannot run before it yet
    TAKES_OPERATORS: ClassVar[bool] = False
    #: versions are placed by event time only
    time_mode: ClassVar[str] = "event"
    #: late rows go to the dead-letter table only
    dead_letter_topic: ClassVar[None] = None
    #: how it reads a Debezium source, for the refusal of the stages that cannot
    TAKES_CHANGES: ClassVar[str] = (
        "as the versions_source of [transform.temporal_join] (an update a new version)"
    )

    stream_source: str
    #: the changelog: a JSON source whose records are versions of its keys; a record
    #: with a NULL value (a tombstone) ends its key's version, its keys read from the
    #: Kafka key (a JSON object), its time from the Kafka timestamp; or a Debezium
    #: source, whose update is a new version and whose delete ends one
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

    def event_time_key(self, side: str) -> str:
        """The spec key naming a side's event time: its override where set."""
        override = f"{side}_event_time_column"
        key = override if getattr(self, override) else "event_time_column"
        return f"transform.temporal_join.{key}"

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        uses: list[ColumnUse] = []
        for side in ("stream", "version"):
            source, key = self.side_source(side), f"transform.temporal_join.{side}"
            uses.append((f"{key}_keys", source, [*self.side_keys(side)]))
            uses.append((f"{key}_event_time_column", source, [self.side_event_time(side)]))
        return uses

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        return [
            (self.event_time_key(side), self.side_source(side), self.side_event_time(side))
            for side in ("stream", "version")
        ]

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
        stream = by_name[self.stream_source]
        if stream.changes:
            raise key_error(
                "transform.temporal_join.stream_source",
                f'{stream.name!r} is format = "debezium": a change event joins as the '
                "versions_source only (an update is a new version, a delete ends one); the "
                "stream's rows are events",
            )
        if not versions.changes and (versions.format != "json" or versions.schema_ddl is None):
            raise key_error(
                "transform.temporal_join.versions_source",
                f"{versions.name!r} is format = {versions.format!r}: the versions are read as "
                "JSON with a declared schema (a tombstone's keys from its Kafka key), or as "
                'Debezium changes (format = "debezium")',
            )

    def takes_changes(self, source: str) -> bool:
        """A Debezium source may be the versions (a change is a new version)."""
        return source == self.versions_source
