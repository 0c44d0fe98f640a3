"""The Kafka reader of a source view: its options, and the streaming frame it loads.

The options carry everything the executors' reader (``flow_jobs.kafka``) needs, as the
strings Spark passes a Python data source: the topic, where to start, retries, the
checkpoint for the batch's watermarks, the idle-sources file, a payload decoded in the
reader (``json_schema``, or a registry format's reader schema with the registry's client
settings, secrets marked), the partials to fold, and the consumer's own settings. They
are apart from ``flow_jobs.plan.sources`` (what the view does with the rows) because
they are the contract with the reader, and benchmarks read a source through them alone.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from flow_jobs.formats.registry import SECRET_KEYS
from flow_jobs.kafka.combine import CombinePlan
from flow_jobs.kafka.options import REGISTRY_PREFIX, SECRET_PREFIX
from flow_jobs.kafka.schema import SOURCE_FORMAT
from flow_jobs.spec.models import KafkaSource

#: The registry client settings that are secrets (``SchemaRegistrySpec.client_config``).
REGISTRY_SECRETS = SECRET_KEYS


def read_kafka(
    spark: SparkSession,
    source: KafkaSource,
    pipeline: str,
    time_mode: str,
    **options: Any,
) -> DataFrame:
    """The source's Kafka records, read with ``reader_options`` (its keywords)."""
    return load_kafka(spark, reader_options(source, pipeline, time_mode, **options))


def load_kafka(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    """The streaming frame of the Kafka reader given ``options``."""
    return spark.readStream.format(SOURCE_FORMAT).options(**options).load()


def reader_options(
    source: KafkaSource,
    pipeline: str,
    time_mode: str,
    *,
    checkpoint: str | None = None,
    idle_file: str | None = None,
    json_schema: str | None = None,
    combine: CombinePlan | None = None,
    reader_schema: str | None = None,
) -> dict[str, str]:
    """The options of the source's reader; with ``json_schema`` (a payload
    ``StructType.json()`` Arrow decodes), its payloads decoded in the reader too; with
    ``combine``, the rows the window would aggregate folded into partials there
    (``flow_jobs.kafka.combine``); with ``reader_schema`` (a registry format's,
    ``reader_schema``), the payloads decoded there (``flow_jobs.formats``)."""
    options = {
        "bootstrap_servers": source.bootstrap_servers,
        "topic": source.topic,
        "starting_offsets": source.starting_option(),
        "fail_on_data_loss": str(source.fail_on_data_loss).lower(),
        "retries": str(source.retries),
        "retry_backoff_ms": str(source.retry_backoff_ms),
        "request_timeout_ms": str(source.request_timeout_ms),
        "time_mode": time_mode,
        "group_id": f"flow-jobs-{pipeline}",
        "source_name": source.name,
    }
    if checkpoint:  # the reader stamps each row with its batch's watermarks from it
        options["checkpoint_location"] = checkpoint
    if idle_file:  # the source may send heartbeats (flow_jobs.runtime.idleness)
        options["idle_file"] = idle_file
    if json_schema:
        options["json_schema"] = json_schema
    if (json_schema or reader_schema) and combine is not None:
        options["combine"] = combine.to_json()
    if reader_schema is not None:
        options["payload_format"] = source.payload_format
        options["reader_schema"] = reader_schema
    if reader_schema is not None and source.schema_registry is not None:
        for key, value in source.schema_registry.client_config().items():
            secret = SECRET_PREFIX if key in REGISTRY_SECRETS else ""
            options[f"{REGISTRY_PREFIX}{secret}{key}"] = value
    if source.max_offsets_per_trigger:
        options["max_offsets_per_trigger"] = str(source.max_offsets_per_trigger)
    for key, secret_value in source.client_config.items():
        options[f"kafka.{key}"] = secret_value.get_secret_value()
    return options
