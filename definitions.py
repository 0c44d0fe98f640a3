"""Dagster entry point: ``dagster dev -w workspace.yaml``. It only assembles.

One asset per ``pipelines/*.toml`` (``FLOW_JOBS_PIPELINES_DIR`` picks another folder),
its checks, a new-offsets sensor per spec and a schedule where the spec has one.
Resources default to what the specs say (the embedded state store when they name
none); a deployment sets them from the environment:

* ``FLOW_JOBS_SPARK_MASTER``: the Spark master (default ``local[*]``);
* ``FLOW_JOBS_SPARK_ARCHIVE``: on a cluster, the executors' environment (``flow-jobs pack``);
* ``FLOW_JOBS_DEPLOYMENT``: ``local`` (default) or ``cluster`` (master and archive required);
* ``KAFKA_BOOTSTRAP_SERVERS`` and ``KAFKA_SASL_PASSWORD`` (secret, via ``EnvVar``);
* ``FLOW_STATE_STORE_URL`` (secret, via ``EnvVar``);
* ``FLOW_DELTA_ROOT``: where relative Delta target paths resolve.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import AssetSelection, Definitions, EnvVar, define_asset_job

from assets.pipelines import (
    build_pipeline_assets,
    build_pipeline_checks,
    build_pipeline_schedules,
    build_pipeline_sensors,
)
from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    SparkResource,
)

PIPELINES_DIR = Path(os.environ.get("FLOW_JOBS_PIPELINES_DIR", Path(__file__).parent / "pipelines"))


def _env(name: str) -> EnvVar | None:
    """An ``EnvVar`` (resolved at run time, never logged) when the variable is set."""
    return EnvVar(name) if os.environ.get(name) else None


#: One resource set per deployment, chosen by ``FLOW_JOBS_DEPLOYMENT`` (as in Dagster's
#: project_fully_featured): ``local`` (the default) runs Spark in this process and takes
#: the master and archive from the environment when set; ``cluster`` requires both.
DEPLOYMENT = os.environ.get("FLOW_JOBS_DEPLOYMENT", "local")
SPARK = {
    "local": lambda: SparkResource(
        master=os.environ.get("FLOW_JOBS_SPARK_MASTER"),
        archive=os.environ.get("FLOW_JOBS_SPARK_ARCHIVE"),
    ),
    "cluster": lambda: SparkResource(
        master=EnvVar("FLOW_JOBS_SPARK_MASTER"), archive=EnvVar("FLOW_JOBS_SPARK_ARCHIVE")
    ),
}
if DEPLOYMENT not in SPARK:
    raise ValueError(f"FLOW_JOBS_DEPLOYMENT={DEPLOYMENT!r}: expected one of {sorted(SPARK)}")

resources = {
    "spark": SPARK[DEPLOYMENT](),
    "kafka": KafkaResource(
        bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        security_protocol=os.environ.get("KAFKA_SECURITY_PROTOCOL"),
        sasl_mechanism=os.environ.get("KAFKA_SASL_MECHANISM"),
        sasl_username=os.environ.get("KAFKA_SASL_USERNAME"),
        sasl_password=_env("KAFKA_SASL_PASSWORD"),
    ),
    "state_store": PostgresStateStoreResource(url=_env("FLOW_STATE_STORE_URL")),
    "delta": DeltaTargetResource(root=os.environ.get("FLOW_DELTA_ROOT")),
}

checks = build_pipeline_checks(PIPELINES_DIR)

defs = Definitions(
    assets=build_pipeline_assets(PIPELINES_DIR),
    asset_checks=checks,
    jobs=[
        # Every check alone, without materializing: `dagster job execute -j flow_jobs_checks`
        define_asset_job("flow_jobs_checks", selection=AssetSelection.checks(*checks)),
    ],
    sensors=build_pipeline_sensors(PIPELINES_DIR),
    schedules=build_pipeline_schedules(PIPELINES_DIR),
    resources=resources,
)
