"""Registers the mirror's spec model, compile step, inspect reading and batch step
(``"mirror"``), the compile step and the batch step imported on first use
(``flow_jobs.lazy.on_call``)."""

from typing import Any

from flow_jobs.lazy import on_call
from flow_jobs.mirror.spec import MirrorSpec
from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.batch_steps import register_batch_step
from flow_jobs.runtime.readings import register_reading
from flow_jobs.spec.stages import register_stage_spec


def _holds_nothing(given: Any) -> None:
    """``flow-jobs inspect``: the mirror keeps no state; the report has its offsets only."""


register_stage_spec(MirrorSpec)
register_pipeline(MirrorSpec.STAGE, on_call("flow_jobs.mirror.compile:compile_mirror_pipeline"))
register_reading(MirrorSpec.STAGE, _holds_nothing)
register_batch_step(MirrorSpec.STAGE, on_call("flow_jobs.mirror.step:MirrorStep.plan"))
