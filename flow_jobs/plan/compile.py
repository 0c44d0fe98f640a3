"""Compile a spec into one streaming DataFrame, through the compile step of the stage
its ``[transform]`` starts with (``flow_jobs.plan.pipelines.PIPELINES``):

sources -> dead-letter tap -> [operators] -> [SQL pre-stage with lookups] -> window
sources -> dead-letter tap -> [operators] -> join [-> window, with chain = ["join", "window"]]
sources -> dead-letter tap -> [operators] -> temporal join
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.plan.pipelines import PIPELINES, CompiledPipeline, PipelineInput
from flow_jobs.spec.models import PipelineSpec

__all__ = ["CompiledPipeline", "compile_pipeline"]


def compile_pipeline(
    spark: SparkSession,
    spec: PipelineSpec,
    dead_letters: DeadLetterTable,
    checkpoint: str | None = None,
    per_source_watermarks: bool = True,
) -> CompiledPipeline:
    """Build the query; ``spark`` should be this pipeline's own session (temp views).
    ``checkpoint`` is the query's: the sources read each batch's watermark from it.
    ``per_source_watermarks = False`` takes the window's watermark after the SQL, as
    before them (the fastest source's): ``make bench`` measures what they cost."""
    first = spec.transform.stages()[0]
    given = PipelineInput(spark, spec, dead_letters, checkpoint, per_source_watermarks)
    return PIPELINES.get(first.STAGE)(given)
