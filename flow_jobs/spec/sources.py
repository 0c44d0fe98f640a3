"""``[[sources]]``: a Kafka topic, its format and where a run starts reading."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from flow_jobs.spec.base import (
    EVENT_TS,
    KAFKA_COLUMN,
    SpecModel,
    _identifier,
    aware_instant,
    epoch_ms,
    key_error,
)


class StartingTimestamp(SpecModel):
    """``starting_offsets = { timestamp = "2026-11-01T10:00:00Z" }``: a fresh checkpoint
    starts each partition at its first record stamped at or after this time."""

    timestamp: datetime

    @field_validator("timestamp", mode="before")
    @classmethod
    def _aware(cls, value: object) -> datetime:
        return aware_instant(value, "starting_offsets.timestamp")

    def option(self) -> str:
        """What the Kafka reader takes (``flow_jobs.kafka``)."""
        return f"timestamp:{epoch_ms(self.timestamp)}"


def _starting_offsets(value: Any) -> Any:
    """``"earliest"``, ``"latest"`` or ``{ timestamp = … }``, with one message for each
    wrong shape (a bare union would report every branch's complaint)."""
    shapes = '"earliest", "latest" or { timestamp = "2026-11-01T10:00:00Z" }'
    if isinstance(value, StartingTimestamp):
        return value
    if isinstance(value, str):
        if value not in ("earliest", "latest"):
            raise ValueError(f"starting_offsets = {value!r}; use {shapes}")
        return value
    if isinstance(value, Mapping):
        if set(value) != {"timestamp"}:
            raise ValueError(
                f"starting_offsets = {dict(value)!r}: a table takes one key, timestamp; "
                f"use {shapes}"
            )
        instant = aware_instant(value["timestamp"], "starting_offsets.timestamp")
        return StartingTimestamp(timestamp=instant)
    if isinstance(value, datetime | date):
        raise ValueError(f"starting_offsets = {value!r}; write {{ timestamp = ... }}: {shapes}")
    raise ValueError(f"starting_offsets = {value!r}; use {shapes}")


StartingOffsets = Annotated[
    Literal["earliest", "latest"] | StartingTimestamp, BeforeValidator(_starting_offsets)
]


class KafkaSource(SpecModel):
    """``[[sources]]`` with ``kind = "kafka"``: one topic, exposed to SQL as a view."""

    name: str
    kind: Literal["kafka"] = "kafka"
    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    format: Literal["json", "raw"] = "json"
    schema_ddl: str | None = Field(default=None, alias="schema")
    #: "auto": JSON payloads are decoded in bulk by Arrow in the reader where the
    #: schema's types allow (STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE, BOOLEAN),
    #: each record Arrow rejects by ``from_json``; "from_json": every record by Spark.
    decoder: Literal["auto", "from_json"] = "auto"
    #: Where a fresh checkpoint starts: "earliest", "latest" or a StartingTimestamp.
    starting_offsets: StartingOffsets = "earliest"
    max_offsets_per_trigger: Annotated[int, Field(gt=0)] | None = None
    fail_on_data_loss: bool = True
    #: Transient broker errors (connection lost, leader change, timeouts) tolerated in a
    #: row before the read fails, with exponential backoff from ``retry_backoff_ms``.
    retries: Annotated[int, Field(ge=0)] = 6
    retry_backoff_ms: Annotated[int, Field(gt=0)] = 250
    #: Extra librdkafka client properties (e.g. ``security.protocol``); kept secret.
    client_config: dict[str, SecretStr] = Field(default_factory=dict)

    def starting_option(self) -> str:
        """``starting_offsets`` as the Kafka reader's option string."""
        start = self.starting_offsets
        return start if isinstance(start, str) else start.option()

    def cluster_config(self) -> dict[str, str]:
        """librdkafka settings to reach this source's cluster: the bootstrap servers and
        the client config, secrets revealed (for a client, never for a log)."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **{k: v.get_secret_value() for k, v in sorted(self.client_config.items())},
        }

    @model_validator(mode="after")
    def _rules(self) -> KafkaSource:
        _identifier("name", self.name)
        ddl = self.schema_ddl
        if self.format == "json" and not (ddl and ddl.strip()):
            raise key_error(
                "schema",
                'schema is required when format = "json": the Spark DDL of the payload, '
                'e.g. schema = "user_id STRING, amount DOUBLE, ts BIGINT"',
            )
        if self.format == "raw" and ddl:
            raise key_error("schema", 'schema is only for format = "json"; remove it for raw')
        for reserved in (EVENT_TS, KAFKA_COLUMN):
            if ddl and re.search(rf"(^|,)\s*`?{reserved}`?\s", ddl):
                raise key_error(
                    "schema",
                    f"schema declares a payload column named {reserved!r}, which collides "
                    "with a column every source view carries; rename it in the schema",
                )
        return self
