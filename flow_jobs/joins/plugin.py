"""Registers the stream-stream join's compile step and inspect reading (``"join"``)."""

from flow_jobs.joins.compile import compile_join_pipeline
from flow_jobs.joins.inspect import read_join
from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.inspect.report import register_reading
from flow_jobs.spec.joins import JoinSpec

register_pipeline(JoinSpec.STAGE, compile_join_pipeline)
register_reading(JoinSpec.STAGE, read_join)
