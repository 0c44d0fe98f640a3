"""Registers the stream-stream join's compile step and inspect reading (``"join"``),
each imported on first use (``flow_jobs.lazy.on_call``)."""

from flow_jobs.joins.spec import JoinSpec
from flow_jobs.lazy import on_call
from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.readings import register_reading
from flow_jobs.spec.stages import register_stage_spec

register_stage_spec(JoinSpec)
register_pipeline(JoinSpec.STAGE, on_call("flow_jobs.joins.compile:compile_join_pipeline"))
register_reading(JoinSpec.STAGE, on_call("flow_jobs.joins.inspect:read_join"))
