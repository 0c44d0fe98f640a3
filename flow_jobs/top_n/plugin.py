"""Registers the top-N batch step (``"top_n"``)."""

from flow_jobs.runtime.batch_steps import register_batch_step
from flow_jobs.top_n.step import TopNStep

register_batch_step("top_n", TopNStep.plan)
