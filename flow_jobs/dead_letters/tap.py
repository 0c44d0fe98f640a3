"""The tap: how a stage diverts the rows it cannot use (``divert``, each row's first
reason) into an observation the driver reads after the batch (``DeadLetterTap``), with
the row's Kafka record as the dead letter keeps it.

A stage brings its own reasons, conditions on its rows: the sources' decoding
(``flow_jobs.plan.json_reasons``), event time (``flow_jobs.plan.time_reasons``),
duplicates (``flow_jobs.dedup``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.records import HEADERS_TYPE, RECORD_SCHEMA
from flow_jobs.spec.models import KAFKA_COLUMN

_REASON = "__flow_dead_letter_reason"
#: A Kafka record's fields, as a frame's rows carry them (``record_fields``).
RECORD_FIELDS = tuple(RECORD_SCHEMA.names)

Reason = tuple[Column, str | Column | None]  # (condition, the dead letter's reason)

#: Spark DDL of Kafka headers, as a tapped row carries them.
HEADERS_DDL = "ARRAY<STRUCT<key: STRING, value: BINARY>>"

#: The fields of each row a tap collects, in order: why, and the Kafka record (its
#: timestamp as epoch microseconds, so no time zone comes between the JVM and Arrow).
TAPPED_FIELDS = (
    "reason",
    "topic",
    "partition",
    "offset",
    "key",
    "value",
    "timestamp_us",
    "headers",
)

#: What the driver files for each bad row: where it comes from, why, and its Kafka
#: record (the reader's types; its timestamp named kafka_timestamp).
TAPPED = pa.schema(
    [
        ("pipeline", pa.string()),
        ("source", pa.string()),
        ("reason", pa.string()),
        *(RECORD_SCHEMA.field(n) for n in ("topic", "partition", "offset", "key", "value")),
        RECORD_SCHEMA.field("timestamp").with_name("kafka_timestamp"),
        RECORD_SCHEMA.field("headers"),
    ]
)

#: Names of the taps' observations (``DataFrame.observe``) start with this.
OBSERVATION_PREFIX = "flow_dead_letters:"
LATE_SUFFIX = ":late"


@dataclass(frozen=True)
class DeadLetterTap:
    """Where the plan diverts one source's bad rows: the observation that collects them,
    by name, and what the driver needs to file them."""

    pipeline: str
    source: str
    #: After ``[transform].sql`` a row may come from any source: (topic, source) pairs
    #: name its source by its topic.
    topic_sources: tuple[tuple[str, str], ...] = ()
    late: bool = False  # late rows: kept apart, for a dead_letter_topic
    #: a second tap of the source further on (its duplicates: ``flow_jobs.dedup``)
    part: str = ""

    @property
    def observation(self) -> str:
        part = f":{self.part}" if self.part else ""
        return f"{OBSERVATION_PREFIX}{self.source}{part}{LATE_SUFFIX if self.late else ''}"

    def late_rows(self) -> DeadLetterTap:
        return replace(self, late=True)

    def rows(self, collected: Sequence[Any]) -> pa.Table:
        """The rows the observation collected (``TAPPED_FIELDS`` each), as filed."""
        n = len(collected)
        columns = list(zip(*collected, strict=True)) if n else [()] * len(TAPPED_FIELDS)
        found = dict(zip(TAPPED_FIELDS, columns, strict=True))
        topics = list(found["topic"])
        by_topic = dict(self.topic_sources)
        return pa.table(
            {
                "pipeline": pa.array([self.pipeline] * n, pa.string()),
                "source": pa.array([by_topic.get(t, self.source) for t in topics], pa.string()),
                "reason": pa.array(found["reason"], pa.string()),
                "topic": pa.array(topics, pa.string()),
                "partition": pa.array(found["partition"], pa.int32()),
                "offset": pa.array(found["offset"], pa.int64()),
                "key": pa.array(found["key"], pa.binary()),
                "value": pa.array(found["value"], pa.binary()),
                "kafka_timestamp": pa.array(found["timestamp_us"], pa.int64()).cast(
                    pa.timestamp("us", tz="UTC")
                ),
                "headers": pa.array([_headers(h) for h in found["headers"]], HEADERS_TYPE),
            },
            schema=TAPPED,
        )


def _headers(headers: Sequence[Any] | None) -> list[dict[str, Any]] | None:
    if headers is None:
        return None
    return [{"key": h[0], "value": None if h[1] is None else bytes(h[1])} for h in headers]


def record_fields(frame: DataFrame) -> dict[str, Column] | None:
    """Where a frame's rows keep their Kafka bytes and position: the ``_kafka`` column
    (JSON sources), the Kafka columns (raw sources), or nowhere (None)."""
    if KAFKA_COLUMN in frame.columns:
        return {c: F.col(f"{KAFKA_COLUMN}.{c}") for c in RECORD_FIELDS}
    if all(c in frame.columns for c in RECORD_FIELDS if c != "headers"):
        # a raw source's SQL may leave the headers out: the dead letter then has none
        headers = F.col("headers") if "headers" in frame.columns else F.lit(None)
        return {**{c: F.col(c) for c in RECORD_FIELDS if c != "headers"}, "headers": headers}
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
    read by the driver after the batch ran (``flow_jobs.dead_letters.table``).

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
    fields = fields or {c: F.col(c) for c in RECORD_FIELDS}
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
