"""Registers the top-N batch step (``"top_n"``), imported on first use
(``flow_jobs.lazy.on_call``)."""

from flow_jobs.lazy import on_call
from flow_jobs.runtime.batch_steps import register_batch_step

register_batch_step("top_n", on_call("flow_jobs.top_n.step:TopNStep.plan"))
