"""A pipeline in one line, without compiling it: ``flow-jobs validate``'s and the Dagster
asset's description. Each part says it from the object that runs it: the window family
(its kind, size and engine), the join's spec, the target's sink."""

from __future__ import annotations

from flow_jobs.sinks import target_summary
from flow_jobs.spec.models import PipelineSpec

#: Where a window runs (``WindowSpec.engine``), in a few words.
ENGINES = {"native": "on Spark's aggregation", "state": "on Spark's state API"}


def pipeline_summary(spec: PipelineSpec) -> str:
    """E.g. "pipeline 'clicks': tumbling window 60000 ms on Spark's aggregation over
    clicks -> Delta MERGE (deltalake) into ./data/clicks"."""
    join, temporal = spec.transform.join, spec.transform.temporal_join
    target = target_summary(spec.target)
    if temporal is not None:
        return (
            f"pipeline {spec.name!r}: {temporal.how} temporal join of {temporal.stream_source} "
            f"with the versions of {temporal.versions_source} on "
            f"{', '.join(temporal.stream_keys)} -> {target}"
        )
    window = ""
    if spec.has_window:
        w = spec.window
        window = f"{w.kind} window {w.size_text} {ENGINES[w.engine]}"
    if join is not None:
        lower, upper = join.bounds
        then = f", then a {window}" if window else ""
        return (
            f"pipeline {spec.name!r}: {join.how} join of {join.left_source} and "
            f"{join.right_source} on {', '.join(join.left_keys)} within "
            f"[{lower}, {upper}] ms{then} -> {target}"
        )
    sources = ", ".join(s.name for s in spec.sources)
    return f"pipeline {spec.name!r}: {window} over {sources} -> {target}"
