"""``[transform.window_join]``: two sources' rows with equal keys in the same window.

The rules: docs/spec-reference.md, "[transform.window_join]"; the operator:
``flow_jobs.window_join.processor``.

Both sources are read with their own event-time watermark (``SourceWatermark``: the
pipeline's is the lower of the two), their late rows taken out first (counted, dropped
or dead-lettered: ``late_data``), and the idle one raised by heartbeats after
``source_idleness_ms`` (``flow_jobs.runtime.idleness``). Each row goes once into each
of its windows (a hopping or cumulate row is in several), and the rows meet in one
``transformWithState`` over hash buckets of the keys, each carried as a JSON string
(``flow_jobs.plan.carried_rows``), keys compared as SQL equality compares them (a NULL
key pairs with nothing; the right keys cast to the left's types).

Output: the window's bounds, the left columns prefixed ``left_`` and the right ``right_``
(or the configured ``output_*_columns``; a semi or anti join has the left's only), then
``join_row_id``, a hash of the window and both rows' Kafka positions: a replay or a
fresh checkpoint MERGEs each joined row onto itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.io.checkpoint_files import idle_file
from flow_jobs.operators.buckets import BUCKETS
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
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.window_join.processor import (
    BUCKET,
    END,
    KEY,
    LANE,
    LEFT_ROW,
    OUT_END,
    OUT_START,
    POSITION,
    RELEASED_TIME,
    RIGHT_ROW,
    ROW,
    SIDE,
    START,
    TIME,
    WindowJoinProcessor,
)
from flow_jobs.window_join.spec import WindowJoinSpec

ROW_ID = "join_row_id"
SIDES = ("left", "right")
#: a carried row's Kafka position (hashed), for the row id
_POSITION = "__flow_wj_position"


@dataclass(frozen=True)
class CompiledWindowJoin:
    frame: DataFrame  # the output columns, in order
    natural_key: tuple[str, ...]
    idle_file: str | None
    join: WindowJoinSpec
    sources: tuple[CompiledSource, ...]  # left, right

    def describe(self) -> list[PlanLine]:
        """Its sources' lines and its own."""
        j = self.join
        fate = "dead-lettered with their bytes" if j.late_data == "dlq" else "dropped"
        return [
            *(line for s in self.sources for line in s.describe()),
            PlanLine(
                f"{j.how} window join of {j.left_source} and {j.right_source} on "
                f"{', '.join(j.left_keys)} = {', '.join(j.right_keys)} in {j.size_text} windows",
                "each row put in each of its windows (epoch-aligned), then "
                f"transformWithStateInPandas (event-time timers) over {BUCKETS} hash buckets "
                "of the keys, one state value and one timer per bucket, rows carried as JSON "
                "strings: a window's rows held until the watermark (the lower of both "
                f"sources'; an idle one raised after {j.source_idleness_ms} ms) reaches its "
                "end, then joined once and dropped from the state; a NULL key pairs with "
                f"nothing; late rows taken out at each source, then {fate}; {ROW_ID}: a hash "
                "of the window and both rows' Kafka positions",
            ),
        ]


def window_bounds(join: WindowJoinSpec, time: Column) -> Column:
    """Every window holding a row at ``time``: an array of (start, end) in epoch µs,
    windows aligned to the epoch as the window families' are."""
    t = F.unix_micros(time)
    if join.kind == "cumulate":
        step, most = join.hop * 1000, join.max_duration * 1000
        start = t - F.pmod(t, F.lit(most))
        first = start + (F.floor((t - start) / F.lit(step)) + 1) * F.lit(step)
        ends = F.sequence(first.cast("bigint"), start + F.lit(most), F.lit(step).cast("bigint"))
        return F.transform(ends, lambda end: F.struct(start.alias("s"), end.alias("e")))
    hop, size = join.hop * 1000, join.duration * 1000
    last = t - F.pmod(t, F.lit(hop))  # the latest window start at or before t
    # the starts s in (t - size, t], every hop
    first = last - F.lit(((size - 1) // hop) * hop)
    starts = F.filter(
        F.sequence(first, last, F.lit(hop).cast("bigint")), lambda s: s + F.lit(size) > t
    )
    return F.transform(starts, lambda s: F.struct(s.alias("s"), (s + F.lit(size)).alias("e")))


def _side(
    spark: SparkSession,
    spec: PipelineSpec,
    side: str,
    dead_letters: DeadLetterTable,
    checkpoint: str | None,
) -> tuple[DataFrame, Column, CompiledSource]:
    join = spec.transform.window_join
    assert join is not None
    key = join.event_time_key(side)
    settings = EventTime(join.side_event_time(side), "event", join.max_event_time_skew_ms, key)
    return keyed_side(
        spark, spec, "window_join", side, join.side_source(side), join.side_keys(side),
        settings, join.lateness_ms, join.late_data, dead_letters, checkpoint,
    )  # fmt: skip


def _prepared(
    join: WindowJoinSpec,
    view: DataFrame,
    side: str,
    key_types: Sequence[object],
    time: Column,
    carried: Sequence[str],
    topics: Sequence[str],
) -> DataFrame:
    """A side's rows as the operator takes them, once per window
    (``flow_jobs.window_join.processor``)."""
    lane, position = tie_break(view, topics)
    key = carried_key(view, join.side_keys(side), key_types)
    row = F.to_json(
        F.struct(*(F.col(c) for c in carried), kafka_position(view).alias(_POSITION)),
        JSON_OPTIONS,
    )
    prepared = view.select(
        F.explode(window_bounds(join, time)).alias("w"),
        F.lit(0 if side == "left" else 1).alias(SIDE),
        F.unix_micros(time).alias(TIME),
        lane.alias(LANE),
        position.alias(POSITION),
        key.alias(KEY),
        row.alias(ROW),
    )
    # a NULL key pairs with nothing: a row that no output keeps is not held
    keeps_unpaired = {"left": ("left", "full", "anti"), "right": ("right", "full")}[side]
    if join.how not in keeps_unpaired:
        prepared = prepared.where(F.col(KEY).isNotNull())
    return prepared.select(
        F.pmod(F.xxhash64(F.col(KEY)), F.lit(BUCKETS)).alias(BUCKET),
        F.col(SIDE),
        F.col("w.s").alias(START),
        F.col("w.e").alias(END),
        TIME, LANE, POSITION, KEY, ROW,
    )  # fmt: skip


def compile_window_join(
    spark: SparkSession,
    spec: PipelineSpec,
    dead_letters: DeadLetterTable,
    checkpoint: str | None = None,
) -> CompiledWindowJoin:
    """``checkpoint``: the query's, where the sources read each batch's watermark and
    the run publishes idle sources."""
    join = spec.transform.window_join
    assert join is not None
    left, left_time, left_source = _side(spark, spec, "left", dead_letters, checkpoint)
    right, right_time, right_source = _side(spark, spec, "right", dead_letters, checkpoint)
    key_types = [left.schema[k].dataType for k in join.left_keys]
    left_columns, right_columns = user_columns(left.columns), user_columns(right.columns)
    left_pairs = output_pairs(join.output_left_columns, left_columns, "window_join", "left")
    right_pairs = (
        output_pairs(join.output_right_columns, right_columns, "window_join", "right")
        if join.keeps_right
        else []
    )
    window = [join.window_start_column, join.window_end_column]
    outputs = [*window, *(n for _, n in left_pairs + right_pairs), ROW_ID]
    unique_outputs(outputs, "transform.window_join.output_left_columns")
    topics = [s.topic for s in spec.sources]
    both = _prepared(join, left, "left", key_types, left_time, left_columns, topics).unionByName(
        _prepared(join, right, "right", key_types, right_time, right_columns, topics)
    )
    schema = StructType(
        [
            StructField(OUT_START, TimestampType()),
            StructField(OUT_END, TimestampType()),
            StructField(LEFT_ROW, StringType()),
            StructField(RIGHT_ROW, StringType()),
            StructField(RELEASED_TIME, TimestampType()),
        ]
    )
    joined = both.groupBy(BUCKET).transformWithStateInPandas(
        deferred(WindowJoinProcessor(join.how)),
        schema,
        "Append",
        "EventTime",
        eventTimeColumnName=RELEASED_TIME,
    )
    position = StructField(_POSITION, LongType())
    left_schema = StructType([*(left.schema[c] for c in left_columns), position])
    right_schema = StructType([*(right.schema[c] for c in right_columns), position])
    parsed = joined.select(
        F.col(OUT_START),
        F.col(OUT_END),
        F.from_json(F.col(LEFT_ROW), left_schema, JSON_OPTIONS).alias("l"),
        F.from_json(F.col(RIGHT_ROW), right_schema, JSON_OPTIONS).alias("r"),
    )
    row_id = F.xxhash64(
        F.unix_micros(F.col(OUT_START)),
        F.unix_micros(F.col(OUT_END)),  # cumulate windows share their starts
        F.lit("L"),
        F.col(f"l.{_POSITION}"),
        F.lit("R"),
        F.col(f"r.{_POSITION}"),
    )
    frame = parsed.select(
        F.col(OUT_START).alias(join.window_start_column),
        F.col(OUT_END).alias(join.window_end_column),
        *(F.col(f"l.{c}").alias(n) for c, n in left_pairs),
        *(F.col(f"r.{c}").alias(n) for c, n in right_pairs),
        row_id.alias(ROW_ID),
    )
    return CompiledWindowJoin(
        frame,
        (join.window_start_column, ROW_ID),
        idle_file(checkpoint) if checkpoint else None,
        join,
        (left_source, right_source),
    )


def compile_window_join_pipeline(given: PipelineInput) -> CompiledPipeline:
    """The window join over its two sources: its rows are the output."""
    joined = compile_window_join(given.spark, given.spec, given.dead_letters, given.checkpoint)
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
