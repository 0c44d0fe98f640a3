"""Registers the append stage's spec model, compile step and inspect reading
(``"append"``), the compile step imported on first use (``flow_jobs.lazy.on_call``)."""

from typing import Any

from flow_jobs.append.spec import AppendSpec
from flow_jobs.lazy import on_call
from flow_jobs.plan.pipelines import register_pipeline
from flow_jobs.runtime.readings import register_reading
from flow_jobs.spec.stages import register_stage_spec


def _holds_nothing(given: Any) -> None:
    """``flow-jobs inspect``: the stage keeps no state; the report has its watermark and
    offsets only."""


register_stage_spec(AppendSpec)
register_pipeline(AppendSpec.STAGE, on_call("flow_jobs.append.compile:compile_append_pipeline"))
register_reading(AppendSpec.STAGE, _holds_nothing)
