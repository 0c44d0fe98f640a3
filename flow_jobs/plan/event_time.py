"""Event time: which column carries it, and how it becomes a Spark TIMESTAMP."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    TimestampNTZType,
    TimestampType,
)

from flow_jobs.plan.errors import PlanError
from flow_jobs.spec.models import JoinSpec, WindowSpec

_EPOCH_MILLIS = (LongType, IntegerType, ShortType, ByteType)


@dataclass(frozen=True)
class EventTime:
    """Where a source's rows get their event time, and how it is checked."""

    column: str
    mode: str  # "event" | "processing"
    max_skew_ms: int
    key: str  # the spec key naming the column, for errors

    @staticmethod
    def of_window(w: WindowSpec) -> EventTime:
        return EventTime(
            w.event_time_column,
            w.time_mode,
            w.max_event_time_skew_ms,
            "transform.window.event_time_column",
        )

    @staticmethod
    def of_join(j: JoinSpec, side: str) -> EventTime:
        override = f"{side}_event_time_column"
        key = override if getattr(j, override) else "event_time_column"
        return EventTime(
            j.side_event_time(side), j.time_mode, j.max_event_time_skew_ms, f"transform.join.{key}"
        )


def event_time_of(column: Column, data_type: DataType, key: str, name: str) -> Column:
    """A TIMESTAMP (UTC) from a TIMESTAMP column or one of epoch milliseconds."""
    if isinstance(data_type, TimestampType):
        return column
    if isinstance(data_type, TimestampNTZType):
        # The session time zone is UTC, so a zone-less value is read as UTC.
        return column.cast(TimestampType())
    if isinstance(data_type, _EPOCH_MILLIS):
        return F.timestamp_millis(column)
    raise PlanError(
        key,
        f"column {name} is {data_type.simpleString()}; the event time must be a "
        "TIMESTAMP or epoch milliseconds (BIGINT)",
    )
