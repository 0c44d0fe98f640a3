"""Dagster resources: Spark, Kafka, the Postgres state store and Delta targets.

Each is a ``ConfigurableResource``; secrets come in as ``EnvVar``s and never reach a
log. A spec's values defer to a resource that sets one (``apply_resources``), so the
same ``pipelines/*.toml`` runs against the embedded defaults in dev and against the
production broker, database and bucket when the deployment configures the resources.
"""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from flow_jobs.ledger.location import state_store_schema, state_store_url
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.locations import on_object_store
from flow_jobs.spec.models import PipelineSpec


class SparkResource(LazyPySparkResource):
    """The SparkSession a run's pipelines share: dagster-pyspark's ``LazyPySparkResource``
    (the session starts the first time a step asks for ``spark_session`` or
    ``spark_context``, so runs that do not use it start no JVM) with flow-jobs' set-up
    (``build_spark_session``: UTC, the RocksDB state store, a quiet start, the Kafka
    Python data source registered, the executors' archive on a cluster) on ``master``.
    Spark's own ``getOrCreate`` makes it one session per process (a JVM holds one
    SparkContext): nothing is torn down between runs. Every field takes an ``EnvVar``."""

    master: str | None = Field(
        default=None, description="Spark master; default $FLOW_JOBS_SPARK_MASTER or local[*]"
    )
    archive: str | None = Field(
        default=None,
        description="the executors' environment from `flow-jobs pack`, shipped through "
        "spark.archives; default $FLOW_JOBS_SPARK_ARCHIVE (none: executors use this Python)",
    )
    # Narrower than LazyPySparkResource's dict[str, Any]: Dagster resolves an EnvVar
    # among a dict's values only when they are typed str.
    spark_config: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings for the session (static ones apply only when this "
        "resource starts it); values may be EnvVar('...')",
    )

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False  # LazyPySparkResource says True of itself; this subclass is ours

    def _init_session(self) -> None:
        """LazyPySparkResource's hook behind ``spark_session`` and ``spark_context``: the
        session built by flow-jobs rather than from ``spark_config`` alone."""
        if self._spark_session is None:
            from flow_jobs.runtime.session import build_spark_session

            self._spark_session = build_spark_session(
                self.master, self.spark_config, app_name="flow-jobs-dagster", archive=self.archive
            )


class KafkaResource(ConfigurableResource):
    """Where the sources' topics are, and how to authenticate. Unset fields keep the
    spec's values."""

    bootstrap_servers: str | None = None
    security_protocol: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = Field(default=None, description="use EnvVar('...')")

    def client_config(self) -> dict[str, str]:
        pairs = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
        }
        return {k: v for k, v in pairs.items() if v is not None}

    def end_offsets(self, spec: PipelineSpec) -> dict[str, dict[str, dict[str, int]]]:
        """Each source's topic end offsets, shaped like the ledger's ``end_offsets``,
        asked of the broker as the reader asks (``flow_jobs.kafka.offsets.source_watermarks``)."""
        from flow_jobs.kafka.offsets import source_watermarks

        out: dict[str, dict[str, dict[str, int]]] = {}
        for source in spec.sources:
            marks = source_watermarks(source, f"flow-jobs-sensor-{spec.name}")
            ends = {str(p): int(high) for p, (_low, high) in marks.items()}
            out[source.name] = {source.topic: ends}
        return out


class PostgresStateStoreResource(ConfigurableResource):
    """The ledger's database. Unset: the spec's ``[state_store]`` (or its embedded one)."""

    url: str | None = Field(default=None, description="use EnvVar('FLOW_STATE_STORE_URL')")
    schema_name: str | None = None

    def store_for(self, spec: PipelineSpec) -> LedgerStore:
        """The spec's store, migrated the first time this process asks for it (sensor
        ticks and check runs do not re-run the migration each time)."""
        url = self.url or state_store_url(spec)
        store = LedgerStore(url, self.schema_name or state_store_schema(spec))
        if (url, store.schema) not in _MIGRATED:
            store.migrate()
            _MIGRATED.add((url, store.schema))
        return store


#: (url, schema) of the stores this process has migrated.
_MIGRATED: set[tuple[str, str]] = set()


class DeltaTargetResource(ConfigurableResource):
    """Where relative Delta target paths resolve, and object-store options for the Delta
    target and a Delta dead-letter table on object storage. Option values may be
    ``EnvVar("...")``: Dagster resolves them when it initializes the resource for a run,
    sensor tick or check (measured with dagster 1.13: also inside this dict), and its
    run config keeps the variable's name, not the value."""

    root: str | None = Field(default=None, description="prefix for relative target paths")
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="delta-rs storage options, e.g. {'AWS_SECRET_ACCESS_KEY': "
        "EnvVar('AWS_SECRET_ACCESS_KEY')}; they replace the spec's",
    )


def apply_resources(
    spec: PipelineSpec,
    kafka: KafkaResource,
    state_store: PostgresStateStoreResource,
    delta: DeltaTargetResource,
) -> PipelineSpec:
    """The spec with every value a resource sets in its place (a validated copy)."""
    doc = spec.to_document()
    extra = kafka.client_config()
    for source in doc["sources"]:
        if kafka.bootstrap_servers:
            source["bootstrap_servers"] = kafka.bootstrap_servers
        if extra:
            source["client_config"] = {**source.get("client_config", {}), **extra}
    if state_store.url:
        doc.setdefault("state_store", {})["url"] = state_store.url
    if state_store.schema_name:
        doc.setdefault("state_store", {})["schema"] = state_store.schema_name
    # A target that keeps files (a Delta table) goes under the resource's root, with
    # its storage options (TargetSpec.stored_under); other kinds keep none.
    stored = spec.target.stored_under(delta.root, delta.storage_options)
    if stored is not None:
        doc["target"].update(stored)
        if delta.storage_options:
            # A dead-letter table on object storage gets them too (one left to its
            # default beside such a target takes the target's: PipelineSpec).
            dead = doc.get("dead_letter", {})
            if dead.get("kind", "delta") == "delta" and on_object_store(dead.get("path") or ""):
                dead["storage_options"] = {
                    **dead.get("storage_options", {}),
                    **delta.storage_options,
                }
    return PipelineSpec.model_validate(doc)


#: The resources a spec is resolved with (``resolve``), asked for by key.
SPEC_RESOURCES = frozenset({"kafka", "state_store", "delta"})


def resolve(spec: PipelineSpec, resources: Any) -> PipelineSpec:
    """``apply_resources`` with a Dagster context's resources (``SPEC_RESOURCES``)."""
    return apply_resources(spec, resources.kafka, resources.state_store, resources.delta)
