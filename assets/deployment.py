"""One resource set per deployment, chosen by ``FLOW_JOBS_DEPLOYMENT`` (as in Dagster's
``project_fully_featured``): ``local`` (the default) runs Spark in this process and takes
the master and archive from the environment when set; ``cluster`` requires both.
Secrets are ``EnvVar``s: resolved when a run starts, never logged, and Dagster's run
config keeps their names, not their values."""

from __future__ import annotations

import os
from typing import Any

from dagster import EnvVar

from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    SparkResource,
)

DEPLOYMENTS = ("local", "cluster")


def _env(name: str) -> EnvVar | None:
    """An ``EnvVar`` when the variable is set (resolved at run time, never logged)."""
    return EnvVar(name) if os.environ.get(name) else None


def _spark(deployment: str) -> SparkResource:
    if deployment == "cluster":
        return SparkResource(
            master=EnvVar("FLOW_JOBS_SPARK_MASTER"), archive=EnvVar("FLOW_JOBS_SPARK_ARCHIVE")
        )
    return SparkResource(
        master=os.environ.get("FLOW_JOBS_SPARK_MASTER"),
        archive=os.environ.get("FLOW_JOBS_SPARK_ARCHIVE"),
    )


def deployment_resources(deployment: str | None = None) -> dict[str, Any]:
    """The resources of ``deployment`` (default ``$FLOW_JOBS_DEPLOYMENT`` or ``local``)."""
    deployment = deployment or os.environ.get("FLOW_JOBS_DEPLOYMENT", "local")
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"FLOW_JOBS_DEPLOYMENT={deployment!r}: expected one of {DEPLOYMENTS}")
    return {
        "spark": _spark(deployment),
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
