"""The Kafka reader's options, as Spark hands them to the data source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flow_jobs.kafka.schema import (
    _CLIENT_PREFIX,
    _CONSUMER_DEFAULTS,
    _TIMESTAMP_OPTION,
    SOURCE_FORMAT,
)

#: Options naming the schema registry client's settings (a registry format); a secret one
#: also carries ``secret.`` in its name, so Spark redacts its value wherever it shows the
#: source's options (its default ``spark.redaction.regex`` matches "secret").
REGISTRY_PREFIX = "registry."
SECRET_PREFIX = "secret."


class KafkaDataLossError(RuntimeError):
    """A planned offset range is no longer (or not yet) readable from Kafka."""


@dataclass(frozen=True)
class KafkaSourceOptions:
    """The parsed options of one Kafka source (strings, as Spark passes them)."""

    bootstrap_servers: str
    topic: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    processing_time: bool = False
    fail_on_data_loss: bool = True
    read_timeout_ms: int = 120_000
    retries: int = 6
    retry_backoff_ms: int = 250
    request_timeout_ms: int = 30_000
    group_id: str = "flow-jobs"
    client_config: tuple[tuple[str, str], ...] = ()
    checkpoint_location: str | None = None  # the query's, to read its offset log
    #: where the driver publishes which sources are idle (None: this source never is)
    idle_file: str | None = None
    source_name: str = ""  # the source's name in the idle file
    #: the payload's Spark schema (``StructType.json()``) to decode with Arrow, or None
    json_schema: str | None = None
    #: what to pre-aggregate in the reader (``flow_jobs.kafka.combine.CombinePlan`` as JSON)
    combine: str | None = None
    #: a registry format ("avro", "protobuf", "json_schema": ``flow_jobs.formats``),
    #: the reader schema records are resolved to (in that format's ``reader`` form), and
    #: the schema registry's client configuration (options ``registry.<key>``; none:
    #: bare Avro bodies written with the reader schema)
    payload_format: str | None = None
    reader_schema: str | None = None
    registry_config: tuple[tuple[str, str], ...] = ()

    @property
    def request_timeout_s(self) -> float:
        """``request_timeout_ms`` as confluent-kafka's calls take it (seconds)."""
        return self.request_timeout_ms / 1000

    @classmethod
    def from_options(cls, options: dict[str, str]) -> KafkaSourceOptions:
        def required(key: str) -> str:
            value = options.get(key)
            if not value:
                raise ValueError(f"{SOURCE_FORMAT}: option {key!r} is required")
            return value

        starting = options.get("starting_offsets", "earliest")
        if starting not in ("earliest", "latest") and not _TIMESTAMP_OPTION.match(starting):
            raise ValueError(
                f"{SOURCE_FORMAT}: starting_offsets={starting!r}; use 'earliest', 'latest' "
                "or 'timestamp:<epoch ms>'"
            )
        max_offsets = options.get("max_offsets_per_trigger")
        return cls(
            bootstrap_servers=required("bootstrap_servers"),
            topic=required("topic"),
            starting_offsets=starting,
            max_offsets_per_trigger=int(max_offsets) if max_offsets else None,
            processing_time=options.get("time_mode", "event") == "processing",
            fail_on_data_loss=options.get("fail_on_data_loss", "true").lower() == "true",
            read_timeout_ms=int(options.get("read_timeout_ms", "120000")),
            retries=int(options.get("retries", "6")),
            retry_backoff_ms=int(options.get("retry_backoff_ms", "250")),
            request_timeout_ms=int(options.get("request_timeout_ms", "30000")),
            group_id=options.get("group_id", "flow-jobs"),
            checkpoint_location=options.get("checkpoint_location") or None,
            idle_file=options.get("idle_file") or None,
            source_name=options.get("source_name", ""),
            json_schema=options.get("json_schema") or None,
            combine=options.get("combine") or None,
            payload_format=options.get("payload_format") or None,
            reader_schema=options.get("reader_schema") or None,
            registry_config=tuple(
                sorted(
                    (k[len(REGISTRY_PREFIX) :].removeprefix(SECRET_PREFIX), v)
                    for k, v in options.items()
                    if k.startswith(REGISTRY_PREFIX)
                )
            ),
            client_config=tuple(
                sorted(
                    (k[len(_CLIENT_PREFIX) :], v)
                    for k, v in options.items()
                    if k.startswith(_CLIENT_PREFIX)
                )
            ),
        )

    @property
    def starting_timestamp_ms(self) -> int | None:
        """The time a fresh checkpoint starts at (``timestamp:<epoch ms>``), else None."""
        found = _TIMESTAMP_OPTION.match(self.starting_offsets)
        return int(found.group(1)) if found else None

    @property
    def retries_setting(self) -> str:
        """The setting a failure after the last retry names (``flow_jobs.kafka.retries``)."""
        from flow_jobs.secrets import redact

        name = self.source_name or self.topic
        return (
            f"retries (now {self.retries}) on source {name!r}, brokers "
            f"{redact(self.bootstrap_servers)},"
        )

    def consumer_config(self) -> dict[str, Any]:
        from flow_jobs.librdkafka_logs import librdkafka_logger

        return {
            **_CONSUMER_DEFAULTS,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            **dict(self.client_config),
            # its own log lines through Python's logging (flow_jobs.librdkafka_logs)
            "logger": librdkafka_logger(),
        }
