"""Registers the temporal join's compile step and inspect reading (``"temporal_join"``),
each imported on first use (``flow_jobs.lazy.on_call``)."""

from flow_jobs.lazy import on_call
from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.readings import register_reading
from flow_jobs.spec.stages import register_stage_spec
from flow_jobs.temporal_join.spec import TemporalJoinSpec

compile_step = on_call("flow_jobs.temporal_join.compile:compile_temporal_pipeline")
register_stage_spec(TemporalJoinSpec)
register_pipeline(TemporalJoinSpec.STAGE, compile_step)
register_reading(
    TemporalJoinSpec.STAGE, on_call("flow_jobs.temporal_join.inspect:read_temporal_join")
)
