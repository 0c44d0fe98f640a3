"""One Dagster asset per ``pipelines/*.toml`` spec.

A materialization runs the pipeline in available-now mode: everything in Kafka is
processed, the windows the watermark closes are merged into the target, and the run
ends. (Resources, sensors, schedules, checks and continuous runs come with the
orchestration work; this is the minimal wiring.)
"""

from __future__ import annotations

from pathlib import Path

from dagster import AssetsDefinition, MaterializeResult, asset

from flow_jobs.spec import load_spec


def asset_name(pipeline: str) -> str:
    return pipeline.replace("-", "_")


def pipeline_asset(spec_path: Path) -> AssetsDefinition:
    spec = load_spec(spec_path)  # an invalid spec fails loading the code location, loudly

    operator = (
        f"{spec.transform.join.how} join" if spec.transform.join else f"{spec.window.kind} window"
    )

    @asset(
        name=asset_name(spec.name),
        group_name="pipelines",
        description=f"{operator} over {', '.join(s.topic for s in spec.sources)} -> "
        f"{spec.target.kind} {spec.target.describe()} ({spec_path.name})",
        kinds={"spark", spec.target.kind},
    )
    def _pipeline() -> MaterializeResult:
        from flow_jobs.runtime.runner import PipelineRunner

        summary = PipelineRunner(load_spec(spec_path)).run(available_now=True)
        return MaterializeResult(
            metadata={
                "input_rows": summary.input_rows,
                "windows_inserted": summary.windows_inserted,
                "windows_updated": summary.windows_updated,
                "dead_lettered": summary.dead_lettered,
                "late_rows_dropped": summary.late_rows_dropped,
                "watermark": summary.watermark or "",
                "batches": summary.batches,
                "target_version": summary.target_version or "",
                "target": f"{spec.target.kind} {spec.target.describe()}",
            }
        )

    return _pipeline


def build_pipeline_assets(folder: Path) -> list[AssetsDefinition]:
    return [pipeline_asset(p) for p in sorted(folder.glob("*.toml"))]
