"""``[transform.temporal_join]``: each stream record with the version valid at its time.

The rules: docs/spec-reference.md, "[transform.temporal_join]"; the operator:
``flow_jobs.temporal_join.processor``.

Both sources are read with their own event-time watermark (``SourceWatermark``: the
pipeline's is the lower of the two), their late rows taken out first (counted, dropped
or dead-lettered: ``late_data``), and the idle one raised by heartbeats after
``source_idleness_ms`` (``flow_jobs.runtime.idleness``): a versions topic that has not
changed for a while does not hold the stream back for ever. Their rows meet in one
``transformWithState`` over hash buckets of the keys, each carried as a JSON string
(as the dedup operator's: ``flow_jobs.plan.carried_rows``), keys compared as SQL equality
compares them (a NULL key joins nothing; the version's keys cast to the stream's types).

Output: the stream's columns prefixed ``stream_`` and the version's ``version_`` (or
the configured ``output_*_columns``), then ``join_row_id``, a hash of the stream
record's Kafka position: a record gives at most one row, so a replay or a fresh
checkpoint MERGEs it onto itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.io.checkpoint_files import idle_file
from flow_jobs.plan.carried_rows import JSON_OPTIONS
from flow_jobs.plan.compiled_source import CompiledSource
from flow_jobs.plan.deferred import deferred
from flow_jobs.plan.event_time import EventTime
from flow_jobs.plan.frame_columns import user_columns
from flow_jobs.plan.keyed_sides import (
    carried_key,
    kafka_position,
    keyed_side,
    output_pairs,
    unique_outputs,
)
from flow_jobs.plan.ordering import tie_break
from flow_jobs.plan.pipelines import CompiledPipeline, PipelineInput
from flow_jobs.plan.sources import TOMBSTONE as TOMBSTONE_VIEW
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.temporal_join.processor import (
    BUCKET,
    BUCKETS,
    KEY,
    LANE,
    POSITION,
    RELEASED_TIME,
    ROW,
    SIDE,
    STREAM_ROW,
    TIME,
    TOMBSTONE,
    VERSION_ROW,
    TemporalJoinProcessor,
)
from flow_jobs.temporal_join.spec import TemporalJoinSpec

ROW_ID = "join_row_id"
SIDES = ("stream", "version")


@dataclass(frozen=True)
class CompiledTemporalJoin:
    frame: DataFrame  # the output columns, in order
    natural_key: tuple[str, ...]
    idle_file: str | None
    join: TemporalJoinSpec
    sources: tuple[CompiledSource, ...]  # stream, versions

    def describe(self) -> list[PlanLine]:
        """Its sources' lines and its own."""
        j = self.join
        retention = (
            f"a current version leaves once older than the watermark - {j.retention_ms} ms"
            if j.retention_ms is not None
            else "a current version stays until a later one or a tombstone ends it"
        )
        return [
            *(line for s in self.sources for line in s.describe()),
            PlanLine(
                f"{j.how} temporal join of {j.stream_source} on {', '.join(j.stream_keys)} "
                f"with the versions of {j.versions_source}",
                f"transformWithStateInPandas (event-time timers) over {BUCKETS} hash buckets "
                "of the keys, one state value and one timer per bucket, rows carried as JSON "
                "strings: the versions kept per key; each stream record held until the "
                "watermark (the lower of both sources'; an idle one raised after "
                f"{j.source_idleness_ms} ms) reaches it, then joined with the last version at "
                "or before its time (a tombstone ends one); a superseded version leaves once "
                f"the watermark passes its successor; {retention}; {ROW_ID}: a hash of the "
                "stream record's Kafka position",
            ),
        ]


def _side(
    spark: SparkSession,
    spec: PipelineSpec,
    side: str,
    dead_letters: DeadLetterTable,
    checkpoint: str | None,
) -> tuple[DataFrame, Column, CompiledSource]:
    """A side's view (late rows out, its watermark taken), its event time, its source."""
    join = spec.transform.temporal_join
    assert join is not None
    key = join.event_time_key(side)
    settings = EventTime(join.side_event_time(side), "event", join.max_event_time_skew_ms, key)
    return keyed_side(
        spark, spec, "temporal_join", side, join.side_source(side), join.side_keys(side),
        settings, join.lateness_ms, join.late_data, dead_letters, checkpoint,
        tombstone_keys=join.version_keys if side == "version" else None,
    )  # fmt: skip


def _prepared(
    view: DataFrame,
    side: str,
    keys: Sequence[str],
    key_types: Sequence[object],
    time: Column,
    carried: Sequence[str],
    topics: Sequence[str],
) -> DataFrame:
    """A side's rows as the operator takes them (``flow_jobs.temporal_join.processor``)."""
    lane, position = tie_break(view, topics)
    # a NULL key joins nothing: a stream record's key is NULL (no version has it)
    key = carried_key(view, keys, key_types)
    tombstone = F.col(TOMBSTONE_VIEW) if TOMBSTONE_VIEW in view.columns else F.lit(False)
    prepared = view.select(
        F.pmod(F.xxhash64(key), F.lit(BUCKETS)).alias(BUCKET),
        F.lit(1 if side == "stream" else 0).alias(SIDE),
        tombstone.alias(TOMBSTONE),
        F.unix_micros(time).alias(TIME),
        lane.alias(LANE),
        position.alias(POSITION),
        key.alias(KEY),
        F.to_json(F.struct(*(F.col(c) for c in carried)), JSON_OPTIONS).alias(ROW),
    )
    # a version with a NULL key can never be joined: it is not kept
    return prepared if side == "stream" else prepared.where(F.col(KEY).isNotNull())


def compile_temporal_join(
    spark: SparkSession,
    spec: PipelineSpec,
    dead_letters: DeadLetterTable,
    checkpoint: str | None = None,
) -> CompiledTemporalJoin:
    """``checkpoint``: the query's, where the sources read each batch's watermark and
    the run publishes idle sources."""
    join = spec.transform.temporal_join
    assert join is not None
    stream, stream_time, stream_source = _side(spark, spec, "stream", dead_letters, checkpoint)
    versions, version_time, versions_source = _side(
        spark, spec, "version", dead_letters, checkpoint
    )
    key_types = [stream.schema[k].dataType for k in join.stream_keys]
    # the stream record's Kafka position names its joined row
    stream = stream.withColumn(ROW_ID, kafka_position(stream))
    stream_columns = user_columns(stream.columns)
    version_columns = user_columns(versions.columns)
    stream_pairs = output_pairs(
        join.output_stream_columns,
        [c for c in stream_columns if c != ROW_ID],
        "temporal_join",
        "stream",
    )
    version_pairs = output_pairs(
        join.output_version_columns, version_columns, "temporal_join", "version"
    )
    outputs = [n for _, n in stream_pairs + version_pairs] + [ROW_ID]
    unique_outputs(outputs, "transform.temporal_join.output_stream_columns")
    topics = [s.topic for s in spec.sources]
    both = _prepared(
        stream, "stream", join.stream_keys, key_types, stream_time, stream_columns, topics
    ).unionByName(
        _prepared(
            versions, "version", join.version_keys, key_types, version_time, version_columns,
            topics,
        )
    )  # fmt: skip
    schema = StructType(
        [
            StructField(STREAM_ROW, StringType()),
            StructField(VERSION_ROW, StringType()),
            StructField(RELEASED_TIME, TimestampType()),
        ]
    )
    joined = both.groupBy(BUCKET).transformWithStateInPandas(
        deferred(TemporalJoinProcessor(join.retention_ms)),
        schema,
        "Append",
        "EventTime",
        eventTimeColumnName=RELEASED_TIME,
    )
    if join.how == "inner":
        joined = joined.where(F.col(VERSION_ROW).isNotNull())
    stream_schema = StructType([stream.schema[c] for c in stream_columns])
    version_schema = StructType([versions.schema[c] for c in version_columns])
    parsed = joined.select(
        F.from_json(F.col(STREAM_ROW), stream_schema, JSON_OPTIONS).alias("s"),
        F.from_json(F.col(VERSION_ROW), version_schema, JSON_OPTIONS).alias("v"),
    )
    frame = parsed.select(
        *(F.col(f"s.{c}").alias(n) for c, n in stream_pairs),
        *(F.col(f"v.{c}").alias(n) for c, n in version_pairs),
        F.col(f"s.{ROW_ID}").alias(ROW_ID),
    )
    return CompiledTemporalJoin(
        frame,
        (ROW_ID,),
        idle_file(checkpoint) if checkpoint else None,
        join,
        (stream_source, versions_source),
    )


def compile_temporal_pipeline(given: PipelineInput) -> CompiledPipeline:
    """The temporal join over its two sources: its rows are the output."""
    joined = compile_temporal_join(given.spark, given.spec, given.dead_letters, given.checkpoint)
    return CompiledPipeline(
        given.spec,
        joined.frame,
        "append",
        (joined,),
        joined.natural_key,
        (),
        idle_file=joined.idle_file,
        writes_new_rows=True,  # each joined row once, when the watermark reaches it
    )
