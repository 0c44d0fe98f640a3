"""One resource set per deployment, chosen by ``FLOW_JOBS_DEPLOYMENT`` (as in Dagster's
``project_fully_featured``): ``local`` (the default) runs Spark in this process and takes
the master and archive from the environment when set; ``cluster`` requires both.
Secrets are ``EnvVar``s: resolved when a run starts, never logged, and Dagster's run
config keeps their names, not their values."""

from __future__ import annotations

from typing import Any

from dagster import EnvVar

from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    SparkResource,
)
from flow_jobs.settings import Settings

DEPLOYMENTS = ("local", "cluster")


def _secret(name: str, value: object | None) -> EnvVar | None:
    """An ``EnvVar`` when the variable is set: resolved at run time, never logged."""
    return EnvVar(name) if value is not None else None


def _spark(deployment: str, env: Settings) -> SparkResource:
    if deployment == "cluster":
        return SparkResource(
            master=EnvVar("FLOW_JOBS_SPARK_MASTER"), archive=EnvVar("FLOW_JOBS_SPARK_ARCHIVE")
        )
    return SparkResource(master=env.spark_master, archive=env.spark_archive)


def deployment_resources(deployment: str | None = None) -> dict[str, Any]:
    """The resources of ``deployment`` (default ``$FLOW_JOBS_DEPLOYMENT`` or ``local``),
    from the environment as ``flow_jobs.settings`` reads it."""
    env = Settings.from_env()
    deployment = deployment or env.deployment
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"FLOW_JOBS_DEPLOYMENT={deployment!r}: expected one of {DEPLOYMENTS}")
    kafka = env.kafka
    return {
        "spark": _spark(deployment, env),
        "kafka": KafkaResource(
            bootstrap_servers=kafka.bootstrap_servers,
            security_protocol=kafka.security_protocol,
            sasl_mechanism=kafka.sasl_mechanism,
            sasl_username=kafka.sasl_username,
            sasl_password=_secret("KAFKA_SASL_PASSWORD", kafka.sasl_password),
        ),
        "state_store": PostgresStateStoreResource(
            url=_secret("FLOW_STATE_STORE_URL", env.state_store_url)
        ),
        "delta": DeltaTargetResource(root=env.delta_root),
    }
