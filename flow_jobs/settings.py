"""The environment flow-jobs reads: every ``FLOW_*``, ``FLOW_JOBS_*`` and ``KAFKA_*``
variable, in one place.

Read when asked (``Settings.from_env()``), never at import: a test or the demo sets
variables for one run. An empty variable counts as unset. Secrets are ``SecretStr``
(printed as ``**********``); reveal them only where they are used.

Spark's own variables (``PYSPARK_PYTHON``, ``PATH``) are not settings: the session
sets them for the processes Spark starts (``flow_jobs.runtime.session``). A spec's
``${VAR}`` references are resolved by the spec loader from any variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr


@dataclass(frozen=True)
class KafkaSettings:
    """The Kafka client of a deployment (``definitions.py``'s resource)."""

    bootstrap_servers: str | None  # KAFKA_BOOTSTRAP_SERVERS
    security_protocol: str | None  # KAFKA_SECURITY_PROTOCOL
    sasl_mechanism: str | None  # KAFKA_SASL_MECHANISM
    sasl_username: str | None  # KAFKA_SASL_USERNAME
    sasl_password: SecretStr | None  # KAFKA_SASL_PASSWORD


@dataclass(frozen=True)
class Settings:
    #: FLOW_STATE_STORE_URL: the ledger's Postgres when a spec names none (else the
    #: embedded server)
    state_store_url: SecretStr | None
    #: FLOW_STATE_STORE_SCHEMA: the ledger's schema when a spec names none
    state_store_schema: str | None
    #: FLOW_DATA_DIR: the folder the embedded Postgres (and the demo's data) live in
    data_dir: Path
    #: FLOW_METRICS_PORT: serve Prometheus metrics when a spec names no port
    metrics_port: int | None
    #: FLOW_JOBS_SPARK_MASTER: Spark's master when none is given ("local[*]")
    spark_master: str | None
    #: FLOW_JOBS_SPARK_ARCHIVE: the executors' packed environment (``flow-jobs pack``)
    spark_archive: str | None
    #: FLOW_JOBS_SPARK_LOG_LEVEL: Spark's log level
    spark_log_level: str
    #: FLOW_JOBS_CLASS_ARCHIVE: the folder of the driver's class archives, or "off"
    #: (``flow_jobs.runtime.class_archive``; None: the user's cache)
    class_archive: str | None
    #: FLOW_JOBS_PIPELINES_DIR: the specs Dagster's code location loads
    pipelines_dir: Path | None
    #: FLOW_JOBS_DEPLOYMENT: Dagster's resource set, "local" or "cluster"
    deployment: str
    #: FLOW_DELTA_ROOT: the folder relative Delta target paths are under (Dagster)
    delta_root: str | None
    kafka: KafkaSettings

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings in ``env`` (the process's environment by default), now."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            return env.get(name) or None

        def secret(name: str) -> SecretStr | None:
            value = get(name)
            return None if value is None else SecretStr(value)

        pipelines_dir = get("FLOW_JOBS_PIPELINES_DIR")
        return cls(
            state_store_url=secret("FLOW_STATE_STORE_URL"),
            state_store_schema=get("FLOW_STATE_STORE_SCHEMA"),
            data_dir=Path(get("FLOW_DATA_DIR") or "."),
            metrics_port=_port(get("FLOW_METRICS_PORT")),
            spark_master=get("FLOW_JOBS_SPARK_MASTER"),
            spark_archive=get("FLOW_JOBS_SPARK_ARCHIVE"),
            spark_log_level=get("FLOW_JOBS_SPARK_LOG_LEVEL") or "WARN",
            class_archive=get("FLOW_JOBS_CLASS_ARCHIVE"),
            pipelines_dir=None if pipelines_dir is None else Path(pipelines_dir),
            deployment=get("FLOW_JOBS_DEPLOYMENT") or "local",
            delta_root=get("FLOW_DELTA_ROOT"),
            kafka=KafkaSettings(
                bootstrap_servers=get("KAFKA_BOOTSTRAP_SERVERS"),
                security_protocol=get("KAFKA_SECURITY_PROTOCOL"),
                sasl_mechanism=get("KAFKA_SASL_MECHANISM"),
                sasl_username=get("KAFKA_SASL_USERNAME"),
                sasl_password=secret("KAFKA_SASL_PASSWORD"),
            ),
        )


def _port(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(
            f"FLOW_METRICS_PORT = {value!r} is not a port number; set it to one "
            "(0 to serve none), or unset it"
        )
    return port or None
