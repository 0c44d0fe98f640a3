"""The new-offsets sensor: an ``available_now`` run when Kafka holds offsets beyond the
ledger's last committed ones. Its cursor is the end offsets it requested a run for, so
one set of new offsets never yields two runs; it requests none while one of the
pipeline's runs is queued or in progress (that run would be refused)."""

import json
from typing import Any

from dagster import (
    DagsterRun,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
)

from assets.naming import (
    ACTIVE_RUN_STATUSES,
    PIPELINE_TAG,
    asset_name,
    dead_letter_key,
    target_key,
)
from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    apply_resources,
)
from assets.run import run_config
from flow_jobs.spec.models import PipelineSpec


def offsets_ahead(ends: dict[str, Any], committed: dict[str, Any] | None) -> bool:
    """Whether any partition's end offset is beyond the ledger's last end offset."""
    committed = committed or {}
    for source, topics in ends.items():
        for topic, partitions in topics.items():
            done = committed.get(source, {}).get(topic, {})
            if any(int(end) > int(done.get(p, 0)) for p, end in partitions.items()):
                return True
    return False


def active_runs(instance: Any, spec: PipelineSpec) -> list[DagsterRun]:
    """The pipeline's queued or in-progress runs: tagged with it (sensor, schedule) or
    materializing its target (launched from the UI). Check-only runs are not among them."""
    key = target_key(spec)
    return [
        record.dagster_run
        for record in instance.get_run_records(RunsFilter(statuses=ACTIVE_RUN_STATUSES))
        if record.dagster_run.tags.get(PIPELINE_TAG) == spec.name
        or key in (record.dagster_run.asset_selection or ())
    ]


def active_run(context: SensorEvaluationContext, spec: PipelineSpec) -> str | None:
    """The id of a queued or in-progress run of the pipeline, else None."""
    runs = active_runs(context.instance, spec)
    return runs[0].run_id if runs else None


def pipeline_sensor(spec: PipelineSpec) -> SensorDefinition:
    name = asset_name(spec)

    @sensor(
        name=f"{name}_new_offsets",
        asset_selection=[target_key(spec), dead_letter_key(spec)],
        minimum_interval_seconds=spec.orchestration.sensor_interval_s,
        default_status=DefaultSensorStatus.STOPPED,
        description=f"an available-now run of {spec.name} when Kafka has new offsets",
    )
    def _sensor(
        context: SensorEvaluationContext,
        kafka: KafkaResource,
        state_store: PostgresStateStoreResource,
        delta: DeltaTargetResource,
    ) -> RunRequest | SkipReason:
        resolved = apply_resources(spec, kafka, state_store, delta)
        running = active_run(context, resolved)
        if running is not None:  # its run would be refused; the next tick looks again
            return SkipReason(f"run {running} of {resolved.name} is queued or in progress")
        ends = kafka.end_offsets(resolved)
        committed = state_store.store_for(resolved).last_end_offsets(resolved.name)
        if not offsets_ahead(ends, committed):
            return SkipReason("no offsets beyond the ledger's last committed batch")
        cursor = json.dumps(ends, sort_keys=True)
        if cursor == context.cursor:
            return SkipReason("a run for these offsets was already requested")
        context.update_cursor(cursor)
        return RunRequest(
            run_key=f"{resolved.name}:{cursor}",
            run_config=run_config(name),
            tags={PIPELINE_TAG: resolved.name},
        )

    return _sensor
