"""The two keyed sides a join stage on the state API reads (the temporal join's stream
and versions, the window join's left and right), and the columns each side writes.

Each side is its source's view with its own event-time watermark
(``SourceWatermark``: the pipeline's is the lower of the two, an idle source raised by
heartbeats), its late rows taken out first (``late_data``), its key columns checked;
keys travel to the operator as one JSON string (``flow_jobs.plan.carried_rows``), NULL
when any key is NULL (SQL equality: such a row pairs with nothing)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.errors import PlanError
from flow_jobs.io.checkpoint_files import idle_file
from flow_jobs.plan.carried_rows import key_json
from flow_jobs.plan.compiled_source import CompiledSource
from flow_jobs.plan.event_time import EventTime, event_time_of
from flow_jobs.plan.frame_columns import require_column
from flow_jobs.plan.sources import SourceWatermark, compile_source
from flow_jobs.spec.base import OutputColumns
from flow_jobs.spec.models import KAFKA_COLUMN, PipelineSpec

_POSITION = ("topic", "partition", "offset")


def keyed_side(
    spark: SparkSession,
    spec: PipelineSpec,
    stage: str,
    side: str,
    source_name: str,
    keys: Sequence[str],
    event_time: EventTime,
    lateness_ms: int,
    late_data: str,
    dead_letters: DeadLetterTable,
    checkpoint: str | None,
    tombstone_keys: Sequence[str] | None = None,
) -> tuple[DataFrame, Column, CompiledSource]:
    """A side's view (late rows out, its watermark taken), its event time, its source;
    ``stage``: its ``[transform.<stage>]`` table, for errors."""
    index = next(i for i, s in enumerate(spec.sources) if s.name == source_name)
    watermark = SourceWatermark(lateness_ms, idle_file(checkpoint) if checkpoint else None)
    source = compile_source(
        spark,
        spec.sources[index],
        index,
        event_time,
        spec.name,
        dead_letters.tap(source_name),
        late_data,
        checkpoint,
        watermark,
        tombstone_keys=tombstone_keys,
    )
    view = source.frame
    for i, k in enumerate(keys):
        key_i = f"transform.{stage}.{side}_keys[{i}]"
        require_column(view, key_i, k, f"{side} source {source_name!r}")
    column = event_time.column
    require_column(view, event_time.key, column, f"source {source_name!r}")
    time = event_time_of(F.col(column), view.schema[column].dataType, event_time.key, column)
    return view, time, source


def output_pairs(
    configured: OutputColumns | None, columns: Sequence[str], stage: str, side: str
) -> list[tuple[str, str]]:
    """(view column, output name) pairs of one side, in order: ``configured`` (a list, or
    a table column -> new name), or every column prefixed ``<side>_``."""
    if configured is None:
        return [(c, f"{side}_{c}") for c in columns]
    key = f"transform.{stage}.output_{side}_columns"
    pairs = (
        list(configured.items()) if isinstance(configured, dict) else [(c, c) for c in configured]
    )
    for column, _ in pairs:
        require_column(columns, key, column, f"the {side} source")
    return pairs


def unique_outputs(names: Sequence[str], key: str) -> None:
    """The output columns are distinct; ``key``: the spec key to rename one at."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise PlanError(key, f"output column {name!r} appears twice; rename one side's column")
        seen.add(name)


def carried_key(view: DataFrame, keys: Sequence[str], key_types: Sequence[object]) -> Column:
    """The keys as one JSON string, each cast to its type (the other side's keys are
    compared in the first side's types); NULL when any key is NULL."""
    any_null = F.lit(False)
    for k in keys:
        any_null = any_null | F.col(k).isNull()
    return F.when(~any_null, key_json(view, keys, key_types))  # type: ignore[arg-type]


def kafka_position(view: DataFrame) -> Column:
    """A hash of each row's record position (topic, partition, offset)."""
    if KAFKA_COLUMN in view.columns:
        kafka = F.col(KAFKA_COLUMN)
        return F.xxhash64(*(kafka.getField(p) for p in _POSITION))
    return F.xxhash64(*(F.col(p) for p in _POSITION))  # a raw source's own columns
