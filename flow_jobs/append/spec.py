"""``[transform.append]``'s keys: the stateless stage's spec model, a stage of
``[transform]`` (``flow_jobs.spec.stages.Stage``; ``flow_jobs.append.plugin``
registers it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from flow_jobs.spec.base import SpecModel, _identifier, key_error
from flow_jobs.spec.stages import ColumnUse

if TYPE_CHECKING:
    from flow_jobs.spec.sources import KafkaSource

#: The output column naming a row by default: a hash of its record's Kafka position.
ROW_ID = "row_id"


class AppendSpec(SpecModel):
    """``[transform.append]``: every row of ``[transform].sql`` over one source (or of the
    source itself) written to the target once (docs/spec-reference.md,
    "[transform.append]")."""

    STAGE: ClassVar[str] = "append"
    NOUN: ClassVar[str] = "an append"
    HOLDS: ClassVar[Literal["windows", "rows"]] = "rows"
    TAKES_OPERATORS: ClassVar[bool] = False
    #: rows are not placed in time: none is ever late
    time_mode: ClassVar[str] = "processing"
    lateness_ms: ClassVar[int] = 0
    dead_letter_topic: ClassVar[None] = None

    #: output columns that name a row; default: ``row_id``, a hash of the record's
    #: Kafka position, added to the SQL's columns
    row_id: list[str] | None = None
    max_event_time_skew_ms: Annotated[int, Field(gt=0)] = 300_000

    @model_validator(mode="after")
    def _rules(self) -> AppendSpec:
        if self.row_id is not None:
            if not self.row_id:
                raise key_error("row_id", "row_id is empty: name the columns, or leave it out")
            for i, column in enumerate(self.row_id):
                _identifier(f"row_id[{i}]", column)
        return self

    @property
    def watermark_delay_ms(self) -> int:
        return 0

    def summary(self, over: Sequence[str] | None) -> str:
        return f"each row of {', '.join(over or ['its source'])} appended once"

    def key_columns(self) -> list[str]:
        return list(self.row_id or [ROW_ID])

    def columns_read(self, sources: Sequence[KafkaSource]) -> list[ColumnUse]:
        return []

    def event_time_columns(self, sources: Sequence[KafkaSource]) -> list[tuple[str, str, str]]:
        return []

    def check_sources(self, sources: Sequence[KafkaSource], sql: str | None) -> None:
        """One source: a row's name is its record's Kafka position."""
        if len(sources) != 1:
            raise key_error(
                "sources",
                f"{len(sources)} sources are declared; [transform.append] reads one (a union "
                "of several is not supported yet)",
            )
