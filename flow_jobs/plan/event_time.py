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

EPOCH_MILLIS_TYPES = (LongType, IntegerType, ShortType, ByteType)

#: Spark's TIMESTAMP range (0001-01-01 .. 9999-12-31 UTC) in epoch milliseconds. An
#: epoch-ms event time outside it (e.g. 9e18, a nanosecond value) would overflow
#: ``timestamp_millis`` and fail the whole query on every replay: it is NULL instead, and
#: the row a dead letter ("out of range").
MIN_EPOCH_MS = -62_135_596_800_000
MAX_EPOCH_MS = 253_402_300_799_999


def epoch_ms_out_of_range(column: Column) -> Column:
    """True where an epoch-milliseconds value is present but not a valid TIMESTAMP."""
    return column.isNotNull() & ~column.between(MIN_EPOCH_MS, MAX_EPOCH_MS)


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
    if isinstance(data_type, EPOCH_MILLIS_TYPES):
        in_range = column.between(MIN_EPOCH_MS, MAX_EPOCH_MS)
        return F.when(in_range, F.timestamp_millis(column.cast("bigint")))
    raise PlanError(
        key,
        f"column {name} is {data_type.simpleString()}; the event time must be a "
        "TIMESTAMP or epoch milliseconds (BIGINT)",
    )
