"""Why a row's event time sends it to the dead letters: NULL, out of Spark's range, or
too far ahead of processing time. The source views check the column they read
(``flow_jobs.plan.sources``); an event time computed by ``[transform].sql`` gets the
same checks after the SQL (``divert_after_sql``). The tap itself is
``flow_jobs.dead_letters``."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.dead_letters import DeadLetterTap, Reason, divert, record_fields
from flow_jobs.errors import PlanError
from flow_jobs.kafka.schema import BATCH_TIME
from flow_jobs.plan.event_time import (
    EPOCH_MILLIS_TYPES,
    ISO_MILLIS,
    EventTime,
    epoch_ms_out_of_range,
    event_time_of,
)
from flow_jobs.spec.models import KAFKA_COLUMN


def out_of_range_reason(name: str, value: Column) -> Column:
    """The reason of an epoch-ms event time ``value`` outside Spark's TIMESTAMP range."""
    return F.concat(
        F.lit(f"event time {name} = "),
        value.cast("string"),
        F.lit(
            " is out of range: epoch milliseconds outside years 1-9999 "
            "(a value in micro- or nanoseconds?)"
        ),
    )


def time_reasons(
    event_time: Column, name: str, skew: int, missing: str | Column, now: Column
) -> list[Reason]:
    """A NULL event time (``missing``: why it is, or the whole reason as a Column), and
    one too far ahead of the micro-batch's processing time ``now`` (the reader's
    ``BATCH_TIME``, or ``current_timestamp()`` after the SQL), named with its value."""
    if isinstance(missing, str):
        missing = F.lit(f"missing event time: {name} is {missing}")
    ahead = F.concat(
        F.lit(f"event time {name} = "),
        F.date_format(event_time, ISO_MILLIS),
        F.lit(f" is more than max_event_time_skew_ms={skew} ahead of processing time"),
    )
    return [
        (event_time.isNull(), missing),
        (F.unix_millis(event_time) > F.unix_millis(now) + F.lit(skew), ahead),
    ]


def divert_after_sql(frame: DataFrame, settings: EventTime, tap: DeadLetterTap) -> DataFrame:
    """Dead-letter the rows whose event time, computed by ``[transform].sql``, is NULL
    (absent, unparsable, out of range) or too far in the future: with their bytes and
    position from the ``_kafka`` column the SQL must keep (raw sources: the Kafka
    columns). Without them a bad row could only fail the query (on every replay) or
    vanish, so such a spec is refused."""
    name = settings.column
    if name not in frame.columns:
        return frame  # with_event_time names the missing column
    fields = record_fields(frame)
    if fields is None:
        raise PlanError(
            "transform.sql",
            f"the event time {name!r} is computed in the SQL, so a row whose value comes out "
            f"NULL, unparsable or far in the future must be dead-lettered with its Kafka "
            f'position: select {KAFKA_COLUMN} too (format = "raw": topic, partition, '
            "offset, key, value, timestamp)",
        )
    data_type = frame.schema[name].dataType
    event_time = event_time_of(F.col(name), data_type, settings.key, name)
    reasons = []
    if isinstance(data_type, EPOCH_MILLIS_TYPES):
        out_of_range = out_of_range_reason(name, F.col(name))
        reasons.append((epoch_ms_out_of_range(F.col(name)), out_of_range))
    # The SQL's rows keep no reader column: current_timestamp(), the same instant.
    now = F.col(BATCH_TIME) if BATCH_TIME in frame.columns else F.current_timestamp()
    reasons += time_reasons(
        event_time,
        name,
        settings.max_skew_ms,
        "NULL after [transform].sql (absent or unparsable)",
        now,
    )
    return divert(frame, reasons, tap, fields)
