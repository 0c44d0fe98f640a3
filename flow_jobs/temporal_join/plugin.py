"""Registers the temporal join's compile step and inspect reading (``"temporal_join"``)."""

from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.inspect.report import register_reading
from flow_jobs.spec.joins import TemporalJoinSpec
from flow_jobs.temporal_join.compile import compile_temporal_pipeline
from flow_jobs.temporal_join.inspect import read_temporal_join

register_pipeline(TemporalJoinSpec.STAGE, compile_temporal_pipeline)
register_reading(TemporalJoinSpec.STAGE, read_temporal_join)
