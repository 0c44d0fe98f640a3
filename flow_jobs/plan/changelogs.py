"""A changelog source's rows, apart from the rest of its view (``flow_jobs.plan.sources``):
a JSON changelog's tombstones as rows (a temporal join's versions), and a Debezium
source's change envelopes as the rows of its table (``flow_jobs.formats.debezium``)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

from flow_jobs.dead_letters import Reason
from flow_jobs.formats.debezium import OP, OPERATIONS, SOURCE_TS
from flow_jobs.formats.debezium import PAYLOAD as ENVELOPE_PAYLOAD
from flow_jobs.kafka.schema import HEARTBEAT
from flow_jobs.plan.event_time import EPOCH_MILLIS_TYPES
from flow_jobs.plan.json_reasons import NULL_PAYLOAD, shown

#: A source view's decoded payload, before its columns are taken out of it.
PAYLOAD = "__flow_payload"
#: A Debezium source's decoded envelope, from which ``PAYLOAD`` is made.
CHANGE = "__flow_change"


def tombstones(
    frame: DataFrame, keys: Sequence[str], time: str, reasons: list[Reason]
) -> tuple[DataFrame, list[Reason]]:
    """A changelog's tombstones (NULL values) as rows: the key columns from the Kafka
    key's JSON object, the event-time column from the Kafka timestamp, the rest NULL.
    One without its keys there is a bad record."""
    payload = frame.schema[PAYLOAD].dataType
    assert isinstance(payload, StructType)
    key_fields = StructType([payload[k] for k in keys if k in payload.fieldNames()])
    from_key = F.from_json(F.col("key").cast("string"), key_fields)

    def field(name: str, data_type: DataType) -> Column:
        if name in key_fields.fieldNames():
            return from_key.getField(name)
        if name == time and isinstance(data_type, EPOCH_MILLIS_TYPES):
            return F.unix_millis(F.col("timestamp")).cast(data_type)
        if name == time:
            return F.col("timestamp").cast(data_type)
        return F.lit(None).cast(data_type)

    tombstone = F.struct(*(field(f.name, f.dataType).alias(f.name) for f in payload.fields))
    null = F.col("value").isNull()
    frame = frame.withColumn(PAYLOAD, F.when(null, tombstone).otherwise(F.col(PAYLOAD)))
    missing = (from_key.getField(k).isNull() for k in key_fields.names)
    keyless = null & reduce(lambda a, b: a | b, missing, F.lit(len(key_fields) < len(keys)))
    reason = "tombstone without its keys: the Kafka key must be a JSON object with " + ", ".join(
        keys
    )
    # the null-payload reason is the tombstone's now
    return frame, [(keyless, reason), *(r for r in reasons if r[1] is not NULL_PAYLOAD)]


def changes(
    frame: DataFrame, time: str, reasons: list[Reason]
) -> tuple[DataFrame, StructType, list[Reason]]:
    """A Debezium source's rows: ``PAYLOAD`` made from the decoded envelope (``CHANGE``,
    either JSON envelope, or Avro's) as the view holds it (``flow_jobs.formats.debezium``):
    the after-image, or the before-image of a delete; its operation; the database's time.
    A delete's event-time column, where the row has it, is that time: the row's own
    value is the before-image's, from before the delete. Its reasons: the envelope's, then
    an operation the view does not hold (a truncate, none), or a change without its image.
    Debezium's tombstones (a NULL value after each delete, for log compaction) carry
    nothing the delete did not: they are not rows (docs/spec-reference.md)."""
    envelope = frame.schema[CHANGE].dataType
    assert isinstance(envelope, StructType)
    names = envelope.fieldNames()
    change = F.col(CHANGE)
    if ENVELOPE_PAYLOAD in names:  # JSON: either envelope, the same fields
        wrapped = change.getField(ENVELOPE_PAYLOAD)
        fields = envelope[ENVELOPE_PAYLOAD].dataType.names
        top = F.struct(*(change.getField(f) for f in fields))
        change = F.when(wrapped.isNotNull(), wrapped).otherwise(top)
    row_type = envelope["after"].dataType
    assert isinstance(row_type, StructType)
    op = change.getField("op")
    row = F.when(op == F.lit("d"), change.getField("before")).otherwise(change.getField("after"))
    source_type = envelope["source"].dataType if "source" in names else None
    times = []
    if isinstance(source_type, StructType) and "ts_ms" in source_type.names:
        times.append(change.getField("source").getField("ts_ms"))
    if "ts_ms" in names:
        times.append(change.getField("ts_ms"))
    source_ts = F.timestamp_millis(F.coalesce(*times)) if times else F.lit(None)

    def column(field: StructField) -> Column:
        value = row.getField(field.name)
        if field.name != time:
            return value
        at = (
            F.unix_millis(source_ts)
            if isinstance(field.dataType, EPOCH_MILLIS_TYPES)
            else source_ts
        )
        return F.when(op == F.lit("d"), at.cast(field.dataType)).otherwise(value)

    flat = F.struct(
        *(column(f).alias(f.name) for f in row_type.fields),
        op.alias(OP),
        source_ts.cast("timestamp").alias(SOURCE_TS),
    )
    frame = frame.where(F.col(HEARTBEAT).isNotNull() | F.col("value").isNotNull())
    frame = frame.withColumn(PAYLOAD, flat)
    payload = frame.schema[PAYLOAD].dataType
    assert isinstance(payload, StructType)
    image = F.when(op == F.lit("d"), "before").otherwise("after")
    operations = ", ".join(OPERATIONS)
    reasons = [
        *(r for r in reasons if r[1] is not NULL_PAYLOAD),
        (
            op.isNull() | ~op.isin(*OPERATIONS),
            F.concat(
                F.lit("Debezium op "),
                F.coalesce(F.concat(F.lit("'"), shown(op), F.lit("'")), F.lit("absent")),
                F.lit(f": a row change is one of {operations} (a truncate is not read)"),
            ),
        ),
        (
            row.isNull(),
            F.concat(F.lit("Debezium op '"), op, F.lit("' without its "), image, F.lit(" image")),
        ),
    ]
    return frame, payload, reasons
