"""Registers the window join's spec model, compile step and inspect reading
(``"window_join"``), the last two imported on first use (``flow_jobs.lazy.on_call``)."""

from flow_jobs.lazy import on_call
from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.readings import register_reading
from flow_jobs.spec.stages import register_stage_spec
from flow_jobs.window_join.spec import WindowJoinSpec

register_stage_spec(WindowJoinSpec)
register_pipeline(
    WindowJoinSpec.STAGE, on_call("flow_jobs.window_join.compile:compile_window_join_pipeline")
)
register_reading(WindowJoinSpec.STAGE, on_call("flow_jobs.window_join.inspect:read_window_join"))
