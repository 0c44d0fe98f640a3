"""A pipeline's schedules: an ``available_now`` run on ``[orchestration] schedule``, and
the monitoring schedule, which runs the checks that watch a running pipeline
(``watermark_lag``, ``target_fresh``) while one of its continuous runs is open: a
continuous run never ends, so no materialization would evaluate them."""

from typing import Any

from dagster import (
    AssetCheckKey,
    AssetSelection,
    DagsterRunStatus,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    define_asset_job,
    schedule,
)

from assets.check_rules import MONITORING_CHECKS
from assets.naming import PIPELINE_TAG, asset_name, dead_letter_key, target_key
from assets.run import run_config
from assets.sensors import active_runs
from flow_jobs.spec.models import PipelineSpec

#: The tag of a monitoring run (not PIPELINE_TAG: it must not hold back the sensor).
MONITOR_TAG = "flow-jobs/monitors"


def pipeline_schedule(spec: PipelineSpec) -> ScheduleDefinition | None:
    if spec.orchestration.schedule is None:
        return None
    name = asset_name(spec)
    job = define_asset_job(
        f"{name}_job",
        selection=[target_key(spec), dead_letter_key(spec)],
        config=run_config(name),
        tags={PIPELINE_TAG: spec.name},
    )
    return ScheduleDefinition(
        name=f"{name}_schedule",
        job=job,
        cron_schedule=spec.orchestration.schedule,
        execution_timezone="UTC",
    )


def run_mode(run: Any, name: str) -> str:
    """The mode a run of the pipeline asset ``name`` was started in."""
    ops = (run.run_config or {}).get("ops", {})
    return ops.get(name, {}).get("config", {}).get("mode", "available_now")


def monitoring_schedule(spec: PipelineSpec) -> ScheduleDefinition | None:
    if not spec.orchestration.monitor:
        return None
    name, key = asset_name(spec), target_key(spec)
    job = define_asset_job(
        f"{name}_monitor_job",
        selection=AssetSelection.checks(*(AssetCheckKey(key, c) for c in MONITORING_CHECKS)),
        tags={MONITOR_TAG: spec.name},
    )

    @schedule(
        name=f"{name}_monitor",
        job=job,
        cron_schedule=spec.orchestration.monitor_schedule,
        execution_timezone="UTC",
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"{', '.join(MONITORING_CHECKS)} of {spec.name} while a continuous run is open",
    )
    def _monitor(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        open_runs = [
            run
            for run in active_runs(context.instance, spec)
            if run.status == DagsterRunStatus.STARTED and run_mode(run, name) == "continuous"
        ]
        if not open_runs:
            return SkipReason(f"no continuous run of {spec.name} is open")
        return RunRequest(tags={MONITOR_TAG: spec.name, "flow-jobs/run": open_runs[0].run_id})

    return _monitor
