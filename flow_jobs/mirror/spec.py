"""``[transform.mirror]``'s keys: the mirror's spec model, a stage of ``[transform]``
(``flow_jobs.spec.stages.Stage``; ``flow_jobs.mirror.plugin`` registers it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.spec.base import SpecModel, _identifier, key_error
from flow_jobs.spec.stages import ColumnUse

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource


class MirrorSpec(SpecModel):
    """``[transform.mirror]``: the target kept equal to the source table, by ``key``
    (docs/spec-reference.md, "[transform.mirror]")."""

    STAGE: ClassVar[str] = "mirror"
    NOUN: ClassVar[str] = "a mirror"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"
    TAKES_OPERATORS: ClassVar[bool] = False
    #: a batch may take rows back: the target must delete (``flow_jobs.spec.models``)
    DELETES: ClassVar[bool] = True
    #: how it reads a Debezium source, for the refusal of the stages that cannot
    TAKES_CHANGES: ClassVar[str] = "with [transform.mirror] (the table kept by its primary key)"
    #: changes are applied in their order, not placed in windows: none is ever late
    time_mode: ClassVar[str] = "processing"
    lateness_ms: ClassVar[int] = 0
    dead_letter_topic: ClassVar[None] = None

    #: the source table's primary key: the target's natural key
    key: list[str]
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000

    @model_validator(mode="after")
    def _rules(self) -> MirrorSpec:
        if not self.key:
            raise key_error("key", "key is empty: name the source table's primary key columns")
        for i, column in enumerate(self.key):
            _identifier(f"key[{i}]", column)
        if len(set(self.key)) != len(self.key):
            raise key_error("key", f"key = {self.key!r} names a column twice")
        return self

    @property
    def watermark_delay_ms(self) -> int:
        return 0

    def summary(self, over: Sequence[str] | None) -> str:
        return f"the table of {', '.join(over or ['its source'])} mirrored by {', '.join(self.key)}"

    def key_columns(self) -> list[str]:
        return list(self.key)

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        return [("transform.mirror.key", sources[0].name, [*self.key])] if sources else []

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        return []

    def takes_changes(self, source: str) -> bool:
        return True

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """One Debezium source, read as it is (``[transform]`` refuses SQL beside it: a
        filter or a projection of changes would leave rows behind that moved out of it)."""
        if len(sources) != 1:
            raise key_error(
                "sources",
                f"{len(sources)} sources are declared; [transform.mirror] reads one, a "
                "Debezium topic of one table",
            )
        if not sources[0].changes:
            raise key_error(
                "sources[0].format",
                f"{sources[0].name!r} is format = {sources[0].format!r}: a mirror reads a "
                'table\'s changes, format = "debezium"',
            )
