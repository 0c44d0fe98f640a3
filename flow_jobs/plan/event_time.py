"""Event time: which column carries it, and how it becomes a Spark TIMESTAMP."""

from __future__ import annotations

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

_EPOCH_MILLIS = (LongType, IntegerType, ShortType, ByteType)


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
