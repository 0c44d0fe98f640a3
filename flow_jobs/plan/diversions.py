"""Where the plan dead-letters a record: each reason a condition on the row, and the tap
that collects the rows with one (``divert``: an observation read by the driver after
the batch, ``flow_jobs.io.dead_letters``). The source views divert what they cannot
decode or place in time (``flow_jobs.plan.sources``); an event time computed by
``[transform].sql`` gets the same checks after the SQL (``divert_after_sql``)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.errors import PlanError
from flow_jobs.io.dead_letters import HEADERS_DDL, TAPPED_FIELDS, DeadLetterTap
from flow_jobs.kafka.schema import BATCH_TIME
from flow_jobs.plan.event_time import (
    EPOCH_MILLIS_TYPES,
    ISO_MILLIS,
    EventTime,
    epoch_ms_out_of_range,
    event_time_of,
)
from flow_jobs.spec.models import KAFKA_COLUMN

_REASON = "__flow_dead_letter_reason"
_RECORD_FIELDS = ("topic", "partition", "offset", "key", "value", "timestamp", "headers")

Reason = tuple[Column, str | Column | None]  # (condition, the dead letter's reason)


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


def record_fields(frame: DataFrame) -> dict[str, Column] | None:
    """Where a frame's rows keep their Kafka bytes and position: the ``_kafka`` column
    (JSON sources), the Kafka columns (raw sources), or nowhere (None)."""
    if KAFKA_COLUMN in frame.columns:
        return {c: F.col(f"{KAFKA_COLUMN}.{c}") for c in _RECORD_FIELDS}
    if all(c in frame.columns for c in _RECORD_FIELDS if c != "headers"):
        # a raw source's SQL may leave the headers out: the dead letter then has none
        headers = F.col("headers") if "headers" in frame.columns else F.lit(None)
        return {**{c: F.col(c) for c in _RECORD_FIELDS if c != "headers"}, "headers": headers}
    return None


def divert(
    frame: DataFrame,
    reasons: list[Reason],
    tap: DeadLetterTap,
    fields: dict[str, Column] | None = None,
) -> DataFrame:
    """The frame without the rows that have a reason (the first of ``reasons`` whose
    condition holds; a reason of None keeps the row), which ``tap`` collects: an
    observation (``DataFrame.observe``) of each such row's reason and Kafka record,
    read by the driver after the batch ran (``flow_jobs.io.dead_letters``).

    Each row gets only the number of its reason, a CASE of cheap conditions that stays in
    Spark's generated code; the reason's words are made in the observation, for the rows
    it collects alone: a reason that parses the payload again
    (``flow_jobs.plan.json_reasons``) would take the whole projection out of it."""
    which: Column = F.lit(None).cast("int")
    for number, (condition, text) in reversed(list(enumerate(reasons))):
        which = F.when(condition, F.lit(None if text is None else number)).otherwise(which)
    reason: Column = F.lit(None).cast("string")
    for number, (_, text) in enumerate(reasons):
        if text is not None:
            words = F.lit(text) if isinstance(text, str) else text
            reason = F.when(F.col(_REASON) == number, words.cast("string")).otherwise(reason)
    fields = fields or {c: F.col(c) for c in _RECORD_FIELDS}
    collected = {
        "reason": reason,
        "topic": fields["topic"].cast("string"),
        "partition": fields["partition"].cast("int"),
        "offset": fields["offset"].cast("bigint"),
        "key": fields["key"].cast("binary"),
        "value": fields["value"].cast("binary"),
        "timestamp_us": F.unix_micros(fields["timestamp"].cast("timestamp")),
        "headers": fields["headers"].cast(HEADERS_DDL),
    }
    record = F.struct(*(collected[name].alias(name) for name in TAPPED_FIELDS))
    bad = F.col(_REASON).isNotNull()
    return (
        frame.withColumn(_REASON, which.cast("int"))
        # collect_list skips the NULL of every row kept: only bad rows are collected.
        # Spark's optimizer pushes no filter below an observation (a [transform].sql
        # WHERE on a column a bad row lacks would lose it without a dead letter):
        # tests/test_spark_contracts.py pins it.
        .observe(tap.observation, F.collect_list(F.when(bad, record)).alias("rows"))
        .where(~bad)
        .drop(_REASON)
    )
