"""``[transform.mirror]``: each change of the source table as a row of the target, the
target's natural key its primary key.

The rules: docs/spec-reference.md, "[transform.mirror]". The source's view (a Debezium
source: ``flow_jobs.formats.debezium``) holds a row per change; a change without its
key is dead-lettered; the output is the row's columns, a delete flagged in
``flow_jobs.io.batch.DELETE`` (the sinks delete its key's row instead of writing it)
and the change's order in hidden columns, by which each batch keeps the last change of
each key (``flow_jobs.mirror.step``). No state and no
watermark: a change is never late, and a replayed batch or a fresh checkpoint applies
the same changes in the same order, which leaves the same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flow_jobs.dead_letters import divert, record_fields
from flow_jobs.formats.debezium import OP, SOURCE_TS
from flow_jobs.io.batch import DELETE
from flow_jobs.mirror.spec import MirrorSpec
from flow_jobs.plan.compiled_source import CompiledSource
from flow_jobs.plan.frame_columns import require_column, user_columns
from flow_jobs.plan.pipelines import CompiledPipeline, PipelineInput
from flow_jobs.plan.sources import compile_lone_source
from flow_jobs.plan_lines import PlanLine
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.models import KAFKA_COLUMN

#: A change's place, latest last: the database's time, then the record's Kafka position.
ORDER = ("__flow_change_ts", "__flow_change_partition", "__flow_change_offset")


@dataclass(frozen=True)
class CompiledMirror:
    frame: DataFrame
    natural_key: tuple[str, ...]
    mirror: MirrorSpec
    sources: tuple[CompiledSource, ...]

    def describe(self) -> list[PlanLine]:
        key = ", ".join(self.mirror.key)
        return [
            *(line for s in self.sources for line in s.describe()),
            PlanLine(
                f"mirror the table by ({key})",
                "each change's row (its after-image; a delete's before-image, flagged), no "
                "state and no watermark; each batch keeps the last change of a key (by "
                f"{SOURCE_TS}, then Kafka position): a create, snapshot read or update "
                "upserted, a delete deleted, in the target's one write of the batch",
            ),
        ]


def compile_mirror(given: PipelineInput) -> CompiledMirror:
    spec = given.spec
    mirror = spec.transform.mirror
    assert mirror is not None
    source = spec.sources[0]
    compiled = compile_lone_source(given, "transform.mirror", mirror.max_event_time_skew_ms)
    view = compiled.frame
    row = [c for c in user_columns(view.columns) if c not in (OP, SOURCE_TS, EVENT_TS)]
    for i, column in enumerate(mirror.key):
        require_column(row, f"transform.mirror.key[{i}]", column, f"source {source.name!r}")
    # a change without its key names no row of the table: a dead letter, not a row
    # every later change would miss (a NULL key matches nothing in the target)
    null_key = reduce(lambda a, b: a | b, (F.col(k).isNull() for k in mirror.key))
    reason = f"Debezium change without its key: {', '.join(mirror.key)} must not be NULL"
    tap = given.dead_letters.tap(source.name, part="key")
    view = divert(view, [(null_key, reason)], tap, record_fields(view))
    position = F.col(KAFKA_COLUMN)
    frame = view.select(
        *(F.col(c) for c in row),
        (F.col(OP) == F.lit("d")).alias(DELETE),
        F.unix_micros(F.col(SOURCE_TS)).alias(ORDER[0]),
        position.getField("partition").alias(ORDER[1]),
        position.getField("offset").alias(ORDER[2]),
    )
    return CompiledMirror(frame, tuple(mirror.key), mirror, (compiled,))


def compile_mirror_pipeline(given: PipelineInput) -> CompiledPipeline:
    """The source table's changes, each batch's last per key applied to the target."""
    compiled = compile_mirror(given)
    return CompiledPipeline(
        given.spec, compiled.frame, "append", (compiled,), compiled.natural_key, ()
    )
