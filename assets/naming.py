"""The names the Dagster adapter gives a pipeline's pieces: asset keys, pools, run tags.

One place, so the asset, its checks, the sensor and the schedules agree on them.
"""

from __future__ import annotations

from dagster import AssetKey, DagsterRunStatus

from flow_jobs.spec.fingerprint import fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import KafkaSource, PipelineSpec

#: The run tag naming a run's pipeline (sensor and schedule runs carry it).
PIPELINE_TAG = "flow-jobs/pipeline"

#: Runs that are, or are about to be, executing (as Dagster's concurrency guide lists).
ACTIVE_RUN_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def _identifier(raw: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in raw).strip("_")


def asset_name(spec: PipelineSpec) -> str:
    """The asset key: the target's own name (a Delta folder's, a Postgres table's, a
    Kafka topic's: ``TargetSpec.short_name``)."""
    return _identifier(spec.target.short_name()) or spec.name


def target_key(spec: PipelineSpec) -> AssetKey:
    return AssetKey(asset_name(spec))


def dead_letter_key(spec: PipelineSpec) -> AssetKey:
    """The pipeline's dead-letter table, an asset of its own beside the target."""
    return AssetKey(f"{asset_name(spec)}_dead_letters")


#: The first part of a Kafka topic's asset key.
TOPIC_PREFIX = "kafka"


def topic_key(source: KafkaSource) -> AssetKey:
    """A source's Kafka topic: one external asset per topic, shared by its pipelines."""
    return AssetKey([TOPIC_PREFIX, _identifier(source.topic) or "topic"])


def pipeline_pool(spec: PipelineSpec) -> str:
    """The asset's Dagster concurrency pool: one per pipeline."""
    return f"flow-jobs/{spec.name}"


def code_version(spec: PipelineSpec) -> str:
    """The spec's fingerprint (the keys its checkpoint depends on): Dagster shows an
    asset whose code version changed since its last materialization as changed."""
    return fingerprint_of(fingerprint_fields(spec))
