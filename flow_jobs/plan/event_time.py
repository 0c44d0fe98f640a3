"""Event time: which column carries it, and how it becomes a Spark TIMESTAMP."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
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

from flow_jobs.errors import PlanError
from flow_jobs.plan.frame_columns import require_column
from flow_jobs.spec.models import WindowSpec

#: The watermarked event-time column a window groups on.
EVENT_TIME = "__flow_event_time"
#: The column metadata ``withWatermark`` sets (Spark's ``EventTimeWatermark.delayKey``).
_DELAY_KEY = "spark.watermarkDelayMs"

EPOCH_MILLIS_TYPES = (LongType, IntegerType, ShortType, ByteType)

#: Spark's TIMESTAMP range (0001-01-01 .. 9999-12-31 UTC) in epoch milliseconds. An
#: epoch-ms event time outside it (e.g. 9e18, a nanosecond value) would overflow
#: ``timestamp_millis`` and fail the whole query on every replay: it is NULL instead, and
#: the row a dead letter ("out of range").
MIN_EPOCH_MS = -62_135_596_800_000
MAX_EPOCH_MS = 253_402_300_799_999

#: How a reason shows an event time (``date_format``: UTC, the session's time zone).
ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


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


def with_event_time(
    frame: DataFrame,
    window: WindowSpec,
    watermark: bool = True,
    watermarked_time: str | None = None,
    source_watermarks: bool = False,
) -> DataFrame:
    """Add the (watermarked) event-time column the window groups on.

    After a join, Spark refuses a second watermark: the window then groups on one side's
    time, already watermarked (``watermarked_time``). Where each source has its own
    (``source_watermarks``, ``plan.sources.SourceWatermark``), so does it: the column only
    carries the mark ``withWatermark`` gives its column (the delay in its metadata), which
    is what Spark's window operators look for to evict state and close windows."""
    if watermarked_time is not None:
        return frame.withColumn(EVENT_TIME, F.col(watermarked_time))
    key = "transform.window.event_time_column"
    name = window.event_time_column
    require_column(frame, key, name, "the window's input", "; select it in [transform].sql")
    event_time = event_time_of(F.col(name), frame.schema[name].dataType, key, name)
    # Rows without an event time are dead-lettered at the source, and an event time
    # computed by [transform].sql is checked after it (plan.sources.divert_after_sql).
    # A NULL can still come from SQL that replaces a source column of the same name;
    # a silent NULL window would never be emitted, so this fails, saying how to fix it.
    guarded = F.when(
        event_time.isNull(),
        F.raise_error(
            F.lit(
                f"event time column {name!r} is NULL after [transform].sql although the "
                f"source rows had one: give the computed column its own name (and select "
                f"_kafka) so such rows are dead-lettered"
            )
        ),
    ).otherwise(event_time)
    if watermark and source_watermarks:
        return replace_event_time(frame, window, guarded)
    timed = frame.withColumn(EVENT_TIME, guarded)
    delay = f"{window.watermark_delay_ms} milliseconds"
    return timed.withWatermark(EVENT_TIME, delay) if watermark else timed


def replace_event_time(
    frame: DataFrame, window: WindowSpec, time: Column, name: str = EVENT_TIME
) -> DataFrame:
    """The window's event-time column (or ``name``) set to ``time`` with the watermark's
    mark, the delay in its metadata; the watermark itself is taken upstream (a source's
    node, or ``with_event_time``'s on the values before)."""
    marked = time.alias(name, metadata={_DELAY_KEY: window.watermark_delay_ms})
    return frame.withColumn(name, marked)
