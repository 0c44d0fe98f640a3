"""A pipeline in one line, without compiling it: ``flow-jobs validate``'s and the Dagster
asset's description. Each part says it from the object that runs it: each stage of
``[transform]`` (``Stage.summary``: a window family's kind, size and engine; a join's
spec), the target's sink."""

from __future__ import annotations

from flow_jobs.sinks import target_summary
from flow_jobs.spec.models import PipelineSpec


def pipeline_summary(spec: PipelineSpec) -> str:
    """E.g. "pipeline 'clicks': tumbling window 60000 ms on Spark's aggregation over
    clicks -> Delta MERGE (deltalake) into ./data/clicks"."""
    first, *then = spec.transform.stages()
    text = first.summary([s.name for s in spec.sources])
    text += "".join(f", then a {stage.summary(None)}" for stage in then)
    return f"pipeline {spec.name!r}: {text} -> {target_summary(spec.target)}"
