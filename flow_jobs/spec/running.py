"""How a pipeline runs: ``[state_store]``, ``[checkpoint]``, ``[spark]``, ``[runtime]``,
``[checks]`` and ``[orchestration]``."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from flow_jobs.spec.base import SpecModel, key_error


class StateStoreSpec(SpecModel):
    """``[state_store]``: the Postgres ledger. Without ``url`` (and without the
    ``FLOW_STATE_STORE_URL`` environment variable), an embedded PostgreSQL under
    ``embedded_dir`` (default ``$FLOW_DATA_DIR/.flow/postgres``)."""

    url: SecretStr | None = None
    #: The Postgres schema holding the ledger's tables (``FLOW_STATE_STORE_SCHEMA``).
    schema_name: str | None = Field(default=None, alias="schema")
    embedded_dir: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> StateStoreSpec:
        if self.schema_name is not None and not re.match(r"^[a-z_][a-z0-9_]*$", self.schema_name):
            raise key_error("schema", f"schema = {self.schema_name!r} must match [a-z_][a-z0-9_]*")
        return self


class CheckpointSpec(SpecModel):
    """``[checkpoint]``: Spark's checkpoint (offsets, commits, RocksDB state)."""

    location: str | None = None


class SparkSpec(SpecModel):
    """``[spark]``: where the query runs; any Spark conf can be passed through."""

    master: str | None = None
    shuffle_partitions: Annotated[int, Field(gt=0)] | None = None
    #: The executors' Python environment, packed by ``flow-jobs pack``: shipped through
    #: ``spark.archives`` (``FLOW_JOBS_SPARK_ARCHIVE`` when unset).
    archive: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf")
    @classmethod
    def _no_contract_breaking_conf(cls, conf: dict[str, str]) -> dict[str, str]:
        for key, value in conf.items():
            name = key.strip().lower()
            why = REFUSED_SPARK_CONF.get(name)
            if why is not None and value.strip().lower() != REFUSED_SPARK_CONF_SAFE.get(name):
                raise ValueError(f"spark.conf.{key} = {value!r} is refused: {why}")
        return conf


#: ``[spark] conf`` settings that would break a Spark behaviour flow-jobs relies on
#: (each pinned by ``tests/test_spark_contracts.py``), with why; keys in lower case.
REFUSED_SPARK_CONF: dict[str, str] = {
    "asyncprogresstrackingenabled": (
        "asynchronous progress tracking is a query option Spark refuses for the "
        "foreachBatch sink flow-jobs writes through, and would let Spark plan a batch "
        "before the one before it commits (the ledger and late-row stamps read each "
        "batch's own offset log entry); remove it"
    ),
    "spark.sql.streaming.nodatamicrobatches.enabled": (
        "windows with emit = final close in the batch Spark runs when only the watermark "
        "moved; without it a closed window waits for new data; remove it"
    ),
    "spark.sql.streaming.multiplewatermarkpolicy": (
        "the pipeline's watermark is the minimum over its sources (spec reference, "
        '"Watermarks over several sources"); only "min" keeps that; remove it'
    ),
}
#: The one value of a refused key that is what flow-jobs runs with anyway.
REFUSED_SPARK_CONF_SAFE: dict[str, str] = {
    "spark.sql.streaming.nodatamicrobatches.enabled": "true",
    "spark.sql.streaming.multiplewatermarkpolicy": "min",
}


class RuntimeSpec(SpecModel):
    """``[runtime]``: how often a continuous run triggers a micro-batch, its metrics port,
    how long it waits for a store that is away."""

    trigger_interval_ms: Annotated[int, Field(ge=0)] = 1_000
    #: Serve Prometheus metrics on this port during a run (else ``$FLOW_METRICS_PORT``).
    metrics_port: Annotated[int, Field(gt=0, lt=65536)] | None = None
    #: How long a run waits for the state store or the target's object store while it
    #: is away (a restart, a network cut), trying each write again, before it fails
    #: naming this key (``flow_jobs.io.waits``).
    retry_for_ms: Annotated[int, Field(gt=0)] = 120_000
    #: A continuous run with nothing new to read logs a line this often (for how long,
    #: the watermark, how far behind the topics' ends: ``runtime.progress.IdleHeartbeat``).
    idle_note_ms: Annotated[int, Field(gt=0)] = 60_000


class ChecksSpec(SpecModel):
    """``[checks]``: thresholds of the Dagster asset checks."""

    #: watermark_lag fails when now - the global watermark exceeds this.
    watermark_lag_max_s: Annotated[float, Field(gt=0)] = 900.0
    #: late_row_rate warns when late rows / input rows over recent batches exceed this.
    late_row_rate_max: Annotated[float, Field(ge=0, le=1)] = 0.01
    #: how many recent batches late_row_rate looks at.
    late_row_rate_batches: Annotated[int, Field(gt=0)] = 100
    #: window_config_valid fails when the state-size upper bound (plan.sizing) exceeds
    #: this; a run warns when the state its operators report passes it (runtime.caps).
    state_budget_bytes: Annotated[int, Field(gt=0)] = 1 << 30
    #: target_fresh fails when the last batch committed longer ago than this.
    target_fresh_max_s: Annotated[float, Field(gt=0)] = 3600.0


class OrchestrationSpec(SpecModel):
    """``[orchestration]``: how Dagster triggers the pipeline."""

    #: a cron expression: an available-now run on this schedule (UTC).
    schedule: str | None = None
    #: a sensor that requests an available-now run when Kafka has new offsets.
    sensor: bool = True
    sensor_interval_s: Annotated[int, Field(ge=5)] = 30
    #: a schedule that runs watermark_lag and target_fresh while a continuous run is open.
    monitor: bool = True
    monitor_schedule: str = "*/5 * * * *"

    @field_validator("schedule", "monitor_schedule")
    @classmethod
    def _cron(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not _is_cron(v):
            raise ValueError(
                f"{info.field_name} = {v!r} is not a cron expression (e.g. '*/5 * * * *')"
            )
        return v


def _is_cron(text: str) -> bool:
    """Five fields of numbers, ranges, lists, steps, * or names (Dagster checks the rest)."""
    fields = text.split()
    return len(fields) == 5 and all(re.fullmatch(r"[\w*/,\-]+", f) for f in fields)
