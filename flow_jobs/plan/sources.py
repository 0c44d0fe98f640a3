"""Sources: Kafka → decoded payload → event-time checks → dead-letter tap → SQL view.

Each ``[[sources]]`` entry becomes a streaming DataFrame registered as a view under its
name. What the view holds:

* ``format = "json"``: the payload columns of the declared schema (decoded in bulk by
  Arrow in the reader where the schema's types allow, ``decoder = "auto"``, and by
  ``from_json`` in the JVM for every record Arrow rejects and every other schema:
  ``flow_jobs.kafka.json_decode``), ``_event_ts`` (the Kafka timestamp; the arrival time in
  processing-time mode) and ``_kafka`` (key, value, topic, partition, offset, timestamp);
* ``format = "raw"``: key, value, topic, partition, offset, timestamp, ``_event_ts``.

A record is dead-lettered here, with its original bytes, Kafka position and a reason
naming what failed (``flow_jobs.plan.json_reasons``: the field, its type and its value),
when its payload is NULL or empty, is not JSON matching the schema, or (when this source
carries the window's event-time column) its event time is NULL, outside Spark's
TIMESTAMP range, or further ahead of the micro-batch's processing time than
``max_event_time_skew_ms``.
An event time computed by ``[transform].sql`` gets the same checks after the SQL
(``flow_jobs.plan.time_reasons.divert_after_sql``), from the ``_kafka`` column the SQL keeps.

The reader's options are built in ``flow_jobs.plan.kafka_reader``, the payload schema
(declared, or a registry's) read in ``flow_jobs.plan.source_schemas``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType
from pyspark.sql.utils import AnalysisException

from flow_jobs.aggregations.partials import PARTIAL_VIEW
from flow_jobs.dead_letters import DeadLetterTap, Reason, divert, record_fields
from flow_jobs.errors import PlanError
from flow_jobs.formats.debezium import (
    CHANGE_COLUMNS,
    OP,
    envelope_ddl,
)
from flow_jobs.kafka.combine import PARTIAL, CombinePlan
from flow_jobs.kafka.json_decode import arrow_schema
from flow_jobs.kafka.schema import (
    BATCH_TIME,
    CORRUPT_RECORD,
    DECODED,
    HEARTBEAT,
    LATE_WATERMARK,
    UNDECODED,
)
from flow_jobs.plan.changelogs import CHANGE as _CHANGE
from flow_jobs.plan.changelogs import PAYLOAD as _PAYLOAD
from flow_jobs.plan.changelogs import changes, tombstones
from flow_jobs.plan.compiled_source import CompiledSource, public_options
from flow_jobs.plan.event_time import (
    EPOCH_MILLIS_TYPES,
    EventTime,
    epoch_ms_out_of_range,
    event_time_of,
)
from flow_jobs.plan.json_reasons import (
    decode_reasons,
    missing_field_reason,
)
from flow_jobs.plan.kafka_reader import load_kafka, reader_options
from flow_jobs.plan.late_rows import LATE, late_condition, late_reason
from flow_jobs.plan.source_schemas import payload_schema, registry_payload, registry_reader
from flow_jobs.plan.time_reasons import out_of_range_reason, time_reasons
from flow_jobs.records import EVENT_TS, RECORD_SCHEMA
from flow_jobs.spec.ddl import DdlError, parse_schema
from flow_jobs.spec.models import KAFKA_COLUMN, KafkaSource

if TYPE_CHECKING:
    from flow_jobs.plan.pipelines import PipelineInput

_CORRUPT = CORRUPT_RECORD  # the reader decodes into the same shape
_WATERMARKED = "__flow_source_watermark"
#: A changelog's view: TRUE for a tombstone (``tombstone_keys``).
TOMBSTONE = "__flow_tombstone"

#: ``_kafka``: the record's position and bytes, so a row can still be dead-lettered after
#: ``[transform].sql`` (value is pruned by the optimizer where nothing reads it).
KAFKA_METADATA = tuple(RECORD_SCHEMA.names)
RAW_COLUMNS = (*KAFKA_METADATA, EVENT_TS)


#: Prefix of the observable metrics each source view reports (``observedMetrics``).
OBSERVED_PREFIX = "flow_source_"


def compile_source(
    spark: SparkSession,
    source: KafkaSource,
    index: int,
    event_time: EventTime,
    pipeline: str,
    tap: DeadLetterTap,
    late_data: str | None = None,
    checkpoint: str | None = None,
    watermark: SourceWatermark | None = None,
    combine: CombinePlan | None = None,
    tombstone_keys: Sequence[str] | None = None,
) -> CompiledSource:
    """The streaming view of one source (``.frame``), bad records already diverted; with
    ``late_data`` ("drop" | "dlq"), late rows too (``flow_jobs.plan.late_rows``); with
    ``watermark``, the source's own event-time watermark (``SourceWatermark``); with
    ``combine``, partial aggregates from the reader among the rows, in the hidden column
    ``__flow_partial`` (``flow_jobs.combine.decide``); with ``tombstone_keys`` (a JSON
    changelog), a record with a NULL value is a tombstone, not a bad record: its row
    holds these key columns from its Kafka key (a JSON object), its event time from its
    Kafka timestamp, and TRUE in the hidden column ``TOMBSTONE``."""
    idle = watermark.idle_file if watermark else None
    in_reader = None
    if source.format == "json" and source.decoder == "auto":
        declared = payload_schema(source, index)
        in_reader = declared.json() if arrow_schema(declared.json()) is not None else None
    reader = registry_reader(source, index) if source.registry_format else None
    options = reader_options(
        source,
        pipeline,
        event_time.mode,
        checkpoint=checkpoint,
        idle_file=idle,
        json_schema=in_reader,
        combine=combine if in_reader or reader else None,
        reader_schema=reader,
    )
    frame = load_kafka(spark, options)
    compiled = CompiledSource(
        frame,
        source,
        public_options(options),
        registry=reader is not None and source.schema_registry is not None,
        tombstones=tombstone_keys is not None,
    )
    folds = (in_reader is not None or reader is not None) and combine is not None
    if source.format != "raw":
        # a change's envelope is decoded apart: the view's payload is its row (changes)
        decoded = _CHANGE if source.changes else _PAYLOAD
        if reader is not None:  # decoded in the reader; a failed record has a reason
            payload = registry_payload(reader, source, index)
            frame = frame.withColumn(decoded, F.col(DECODED)).drop(DECODED, UNDECODED)
            failed = F.col(f"{decoded}.{_CORRUPT}")
            reasons: list[Reason] = [(failed.isNotNull(), failed)]
        else:
            frame, payload = _decode_json(frame, source, index, in_reader is not None, decoded)
            reasons = decode_reasons(F.col("value"), F.col(decoded), payload, index)
            if tombstone_keys is not None and not source.changes:
                frame, reasons = tombstones(frame, tombstone_keys, event_time.column, reasons)
        if source.changes:
            frame, payload, reasons = changes(frame, event_time.column, reasons)
        deleted = F.col(f"{_PAYLOAD}.{OP}") == F.lit("d")
        view = [
            *(F.col(f"{_PAYLOAD}.{f.name}").alias(f.name) for f in payload.fields),
            F.col(EVENT_TS),
            F.struct(*(F.col(c) for c in KAFKA_METADATA)).alias(KAFKA_COLUMN),
            *(
                [(deleted if source.changes else F.col("value").isNull()).alias(TOMBSTONE)]
                if tombstone_keys is not None
                else []
            ),
        ]
    else:
        payload = StructType()
        view = [F.col(c) for c in RAW_COLUMNS]
        reasons = []
    json_payload = source.format == "json"
    reasons += _event_time_reasons(event_time, payload, index, json_payload)
    if folds:  # a partial holds only rows that passed every check in the reader
        reasons.insert(0, (F.col(PARTIAL).isNotNull(), None))
        view.append(F.col(PARTIAL).alias(PARTIAL_VIEW))
    if reasons:  # a heartbeat row has no record: never a dead letter
        frame = divert(frame, [(F.col(HEARTBEAT).isNotNull(), None), *reasons], tap)
    frame = frame.select(*view, F.col(LATE_WATERMARK), F.col(HEARTBEAT))
    time = source_event_time(frame, event_time)
    if time is None:  # the event time is made by [transform].sql: no per-source figures
        view = frame.where(F.col(HEARTBEAT).isNull()).drop(LATE_WATERMARK, HEARTBEAT)
        return replace(compiled, frame=view)
    if event_time.mode == "event":  # the checks above took out what it cannot place
        compiled = replace(
            compiled, checked_time=event_time.column, max_skew_ms=event_time.max_skew_ms
        )
    # Spark's observable metrics on the source's rows, reported in the batch's progress:
    # its highest event time (the ledger's per-source watermark), rows and late rows.
    frame = frame.withColumn(LATE, late_condition(time) if late_data else F.lit(False))
    frame = frame.observe(
        f"{OBSERVED_PREFIX}{source.name}",
        F.max(F.unix_millis(time)).alias("max_event_time_ms"),  # the JSON shows ms
        *_row_counts(folds),
        F.count_if(F.col(LATE)).alias("late_rows"),
    )
    if late_data == "dlq":
        reason = late_reason(time, event_time.column)
        late = tap.late_rows()  # tapped apart: a dead_letter_topic may take them
        frame = divert(frame, [(F.col(LATE), reason)], late, record_fields(frame))
    elif late_data == "drop":
        frame = frame.where(~F.col(LATE))
    frame = frame.drop(LATE, LATE_WATERMARK)
    compiled = replace(compiled, late_data=late_data)
    if watermark is None:  # no idle_file: the reader sends no heartbeat
        return replace(compiled, frame=frame.drop(HEARTBEAT))
    return replace(
        compiled,
        frame=watermark.apply(frame, time),
        watermark_ms=watermark.lateness_ms,
        heartbeats=watermark.idle_file is not None,
    )


def compile_lone_source(given: PipelineInput, key: str, max_skew_ms: int) -> CompiledSource:
    """The view of a pipeline's one source read in processing time (no window, no
    watermark: an append, a mirror), bad records diverted; ``key``: the stage's spec
    table, which the event-time checks name."""
    source = given.spec.sources[0]
    settings = EventTime(EVENT_TS, "processing", max_skew_ms, key)
    tap = given.dead_letters.tap(source.name)
    return compile_source(
        given.spark, source, 0, settings, given.spec.name, tap, checkpoint=given.checkpoint
    )


def _row_counts(folds: bool) -> list[Column]:
    """``rows``: the source's records (a partial counts the records it holds); with
    partials, ``folded_rows``: the records Spark did not see one by one (Spark's
    ``numInputRows`` counts a partial once: ``runtime.reports.input_rows`` adds these)."""
    if not folds:
        return [F.count_if(F.col(HEARTBEAT).isNull()).alias("rows")]
    held = F.col(f"{PARTIAL_VIEW}.n")
    records = F.when(F.col(HEARTBEAT).isNull(), F.coalesce(held, F.lit(1).cast("bigint")))
    return [
        F.coalesce(F.sum(records), F.lit(0).cast("bigint")).alias("rows"),
        F.coalesce(F.sum(held - 1), F.lit(0).cast("bigint")).alias("folded_rows"),
    ]


@dataclass(frozen=True)
class SourceWatermark:
    """A source's own event-time watermark, taken before ``[transform].sql``.

    Spark keeps one watermark per ``withWatermark`` node and closes windows at the lowest
    of them (``spark.sql.streaming.multipleWatermarkPolicy`` = min, its default), so a
    node per source makes the pipeline's watermark the minimum over its sources (seed
    000), whatever the SQL does with their rows afterwards. The node watermarks a hidden
    copy of the event time, dropped right after it: the user's column keeps its type, and
    the window marks it as watermarked itself (``plan.event_time.with_event_time``), since
    Spark refuses a second ``withWatermark`` downstream of these.

    A heartbeat row (an idle source, ``flow_jobs.runtime.idleness``) carries no event
    time, only the watermark its source must reach; it passes the node, which is all it
    is for, and is filtered out right after it."""

    lateness_ms: int
    idle_file: str | None = None  # set: the source may send heartbeats

    def apply(self, frame: DataFrame, time: Column) -> DataFrame:
        delay = f"{self.lateness_ms} milliseconds"
        if self.idle_file is None:  # one source: no heartbeat, nothing to filter
            marked = frame.withColumn(_WATERMARKED, time).withWatermark(_WATERMARKED, delay)
            return marked.drop(_WATERMARKED, HEARTBEAT)
        lateness = F.expr(f"INTERVAL {self.lateness_ms} MILLISECONDS")
        marked = F.coalesce(F.col(HEARTBEAT) + lateness, time)
        return (
            frame.withColumn(_WATERMARKED, marked)
            .withWatermark(_WATERMARKED, delay)
            # Non-deterministic (a partition id is never < 0), so the optimizer pushes no
            # predicate of the SQL or the window below it: a heartbeat row must reach
            # the node whatever the SQL filters, and no check meant for records (the
            # window's NULL guard) may run on it.
            .where(F.col(HEARTBEAT).isNull() | (F.spark_partition_id() < 0))
            .drop(_WATERMARKED, HEARTBEAT)
        )


def source_carries(spark: SparkSession, source: KafkaSource, column: str) -> bool:
    """Whether the source's view has the column ``column`` (read before the plan)."""
    if column == EVENT_TS:
        return True
    if source.format == "raw":
        return column in RAW_COLUMNS
    if source.registry_format:
        try:
            return column in payload_schema(source, 0).fieldNames()
        except PlanError:  # compile_source reports it with the source's index
            return False
    if source.changes and column in CHANGE_COLUMNS:
        return True
    try:
        schema = DataType.fromDDL(source.schema_ddl or "")
    except Exception:  # compile_source reports the bad schema with its key
        return False
    return isinstance(schema, StructType) and column in schema.fieldNames()


def source_event_time(view: DataFrame, event_time: EventTime) -> Column | None:
    """The event time of a source view's rows, where the view carries its column."""
    column = event_time.column
    if column not in view.columns:
        return None
    try:
        return event_time_of(F.col(column), view.schema[column].dataType, event_time.key, column)
    except PlanError:
        return None  # the operator reports the type error with its own key


def _decode_json(
    frame: DataFrame,
    source: KafkaSource,
    index: int,
    in_reader: bool = False,
    into: str = _PAYLOAD,
) -> tuple[DataFrame, StructType]:
    """The frame with the payload struct ``into``: ``from_json``'s, or the reader's
    where it decoded the record (``in_reader``: ``_undecoded`` is FALSE) and ``from_json``
    only for the rest; the CASE evaluates ``from_json`` for those rows alone. A Debezium
    source's payload is its change envelope (``flow_jobs.formats.debezium``)."""
    assert source.schema_ddl is not None
    schema = source.schema_ddl
    if source.changes:
        try:
            columns = [(c.name, c.type) for c in parse_schema(schema).columns]
        except DdlError as e:
            raise PlanError(f"sources[{index}].schema", str(e)) from None
        schema = envelope_ddl(columns)
    # on a line of its own: a schema may end in a "-- comment", which would swallow it
    ddl = f"{schema.strip().rstrip(',')}\n, {_CORRUPT} STRING"
    try:
        payload = F.from_json(
            F.col("value").cast("string"), ddl, {"columnNameOfCorruptRecord": _CORRUPT}
        )
        if in_reader:
            payload = F.when(F.col(UNDECODED), payload).otherwise(F.col(DECODED))
        decoded = frame.withColumn(into, payload).drop(*([DECODED, UNDECODED] if in_reader else []))
        fields = decoded.schema[into].dataType
    except AnalysisException as e:
        raise PlanError(
            f"sources[{index}].schema", f"not a valid Spark DDL schema: {e.getMessage()}"
        ) from None
    assert isinstance(fields, StructType)
    return decoded, StructType([f for f in fields.fields if f.name != _CORRUPT])


def _event_time_reasons(
    settings: EventTime, payload: StructType, index: int, json_payload: bool
) -> list[Reason]:
    """Event-time checks, where this source carries the event-time column; "now" is the
    micro-batch's processing time as the reader stamps it on every row (BATCH_TIME). A
    JSON payload says whether a NULL event time was absent or null."""
    if settings.mode == "processing":
        return []  # the arrival time is never NULL nor in the future
    name = settings.column
    if name == EVENT_TS:
        # The reader leaves a Kafka timestamp outside Spark's range NULL.
        return time_reasons(
            F.col(EVENT_TS), name, settings.max_skew_ms, "absent or NULL", F.col(BATCH_TIME)
        )
    if name not in payload.fieldNames():
        return []  # produced by [transform].sql; checked after it (divert_after_sql)
    raw = F.col(f"{_PAYLOAD}.{name}")
    data_type = payload[name].dataType
    event_time = event_time_of(raw, data_type, settings.key, f"{name} (sources[{index}].schema)")
    reasons = []
    if isinstance(data_type, EPOCH_MILLIS_TYPES):
        reasons.append((epoch_ms_out_of_range(raw), out_of_range_reason(name, raw)))
    missing = (
        missing_field_reason(F.col("value"), name, "missing event time")
        if json_payload
        else "absent or NULL"
    )
    return reasons + time_reasons(
        event_time, name, settings.max_skew_ms, missing, F.col(BATCH_TIME)
    )


def carried_by_sources(name: str, views: dict[str, DataFrame]) -> bool:
    """Whether a source view has the column ``name`` (already checked at the source)."""
    return any(name in view.columns for view in views.values())
