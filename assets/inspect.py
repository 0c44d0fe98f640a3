"""``flow-jobs inspect`` in Dagster: a job per pipeline (``<asset>_inspect``) that reads
the open windows (or a join's buffered rows) from the pipeline's checkpoint, with their
partial aggregates and what each waits for, and records them as an observation of the
target asset, so the asset's page shows why a window has not closed yet."""

from typing import Any

from dagster import (
    AssetObservation,
    Config,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    job,
    op,
)

from assets.metadata import markdown_table
from assets.naming import asset_name, target_key
from assets.resources import SPEC_RESOURCES, resolve
from flow_jobs.spec.models import PipelineSpec


class InspectConfig(Config):
    limit: int = 20  # the open windows shown, first to close first


def inspect_job(spec: PipelineSpec) -> JobDefinition:
    name = asset_name(spec)

    @op(name=f"{name}_inspect_state", required_resource_keys={"spark", *SPEC_RESOURCES})
    def _inspect(context: OpExecutionContext, config: InspectConfig) -> None:
        from flow_jobs.runtime.inspect import inspect_state

        resolved = resolve(spec, context.resources)
        store = context.resources.state_store.store_for(resolved)
        spark = context.resources.spark.spark_session
        report = inspect_state(spark, resolved, store=store, limit=config.limit)
        metadata: dict[str, Any] = {
            "state_batch": report.batch_id if report.batch_id is not None else "none yet",
            "watermark": str(report.watermark or ""),
            "held_back_by": ", ".join(report.held_back_by),
            "open_windows": report.open_windows if report.open_windows is not None else -1,
            "buffered_join_rows": report.buffered_join_rows,
            "report": MetadataValue.json(report.to_json()),
        }
        rows = [
            {"window_start": w.start, "window_end": w.end, **w.group, **w.aggregates,
             "closes when / waiting for": w.closes_when}
            for w in report.windows
        ]  # fmt: skip
        if rows:
            metadata["open"] = MetadataValue.md(markdown_table(rows))
        if report.note:
            metadata["note"] = report.note
        context.log.info(
            f"{spec.name}: {report.open_windows} open windows, "
            f"{report.buffered_join_rows} buffered join rows, watermark {report.watermark}"
        )
        context.log_event(AssetObservation(asset_key=target_key(spec), metadata=metadata))

    @job(
        name=f"{name}_inspect",
        description=f"the open windows of {spec.name} and why they have not closed "
        "(flow-jobs inspect), recorded on its asset",
    )
    def _job() -> None:
        _inspect()

    return _job
