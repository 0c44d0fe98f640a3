"""A pipeline as Dagster assets: its target and its dead-letter table, written by one
step (the pipeline's run), downstream of its Kafka topics (external assets).

The target's code version is the spec's fingerprint, so the UI shows a pipeline whose
spec changed since its last materialization. Each asset is in a concurrency pool of its
own (``flow-jobs/<name>``): an instance with ``concurrency: pools: default_limit: 1``
queues a second run's step instead of starting it.
"""

from collections.abc import Iterator
from pathlib import Path

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    MaterializeResult,
    multi_asset,
)

from assets.metadata import run_metadata
from assets.naming import (
    asset_name,
    code_version,
    dead_letter_key,
    pipeline_pool,
    target_key,
    topic_key,
)
from assets.resources import SPEC_RESOURCES, resolve
from assets.run import PipelineRunConfig, refuse_incompatible_spec, run_pipeline
from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.ledger.location import state_store_schema
from flow_jobs.one_line import pipeline_summary
from flow_jobs.spec.models import PipelineSpec


def topic_spec(key: AssetKey, readers: list[str]) -> AssetSpec:
    """A Kafka topic as an external asset: Kafka holds it, nothing here writes it."""
    return AssetSpec(
        key,
        description=f"Kafka topic {key.path[-1]}, read by {', '.join(readers)}",
        group_name="kafka",
        kinds={"kafka"},
    )


def pipeline_asset(spec: PipelineSpec, spec_path: Path) -> AssetsDefinition:
    topics = [topic_key(s) for s in spec.sources]
    version = code_version(spec)
    meta = {"spec": str(spec_path), "pipeline": spec.name, "fingerprint": version}
    dead_kind = "delta" if spec.dead_letter.kind == "delta" else "postgres"
    dead_letters = DeadLetterTable.of(spec, state_store_schema(spec)).description
    target, dead = target_key(spec), dead_letter_key(spec)

    @multi_asset(
        name=asset_name(spec),
        specs=[
            AssetSpec(
                target,
                deps=topics,
                group_name="pipelines",
                description=f"{pipeline_summary(spec)} ({spec_path.name})",
                kinds={"spark", spec.target.kind},
                metadata=meta,
                code_version=version,
            ),
            AssetSpec(
                dead,
                deps=topics,
                group_name="pipelines",
                description=f"{spec.name}: the records it could not use, with their "
                f"bytes, reason and position, in {dead_letters}",
                kinds={dead_kind},
                metadata=meta,
                code_version=version,
            ),
        ],
        pool=pipeline_pool(spec),
        required_resource_keys={"spark", *SPEC_RESOURCES},
    )
    def _pipeline(
        context: AssetExecutionContext, config: PipelineRunConfig
    ) -> Iterator[MaterializeResult]:
        resolved = resolve(spec, context.resources)
        refuse_incompatible_spec(resolved, spec_path)  # before Spark starts
        spark = context.resources.spark.spark_session
        runner, summary = run_pipeline(context, resolved, config.mode, spark, spec_path)
        yield MaterializeResult(asset_key=target, metadata=run_metadata(runner, resolved, summary))
        yield MaterializeResult(  # where the run's dead-letter table filed them
            asset_key=dead,
            metadata={
                "dead_lettered_rows": summary.dead_lettered,
                "table": runner.dead_letters.description,
            },
        )

    return _pipeline
