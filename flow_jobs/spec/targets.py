"""``[target]`` (Delta, Postgres, Kafka) and ``[dead_letter]``."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    SecretStr,
    model_validator,
)

from flow_jobs.spec.base import SpecModel, _identifier, key_error
from flow_jobs.spec.sources import SchemaRegistrySpec


class DeltaTarget(SpecModel):
    """``[target]`` with ``kind = "delta"``: MERGE on the natural key, once per batch
    (Delta's application transaction)."""

    kind: Literal["delta"] = "delta"
    path: str = Field(min_length=1)
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)

    def describe(self) -> str:
        return self.path


class PostgresTarget(SpecModel):
    """``[target]`` with ``kind = "postgres"``: upsert on the natural key, in the state
    store's database, in one transaction with the batch's ledger row."""

    kind: Literal["postgres"]
    table: str
    schema_name: str = Field(default="public", alias="schema")

    @model_validator(mode="after")
    def _rules(self) -> PostgresTarget:
        _identifier("table", self.table)
        _identifier("schema", self.schema_name)
        return self

    def describe(self) -> str:
        return f"{self.schema_name}.{self.table}"


class KafkaTarget(SpecModel):
    """``[target]`` with ``kind = "kafka"``: rows keyed by the natural key (a JSON
    array). Append only: a crash between the produce and the ledger commit can repeat a
    batch."""

    kind: Literal["kafka"]
    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    client_config: dict[str, SecretStr] = Field(default_factory=dict)
    #: "json": each row a JSON object; "avro" / "protobuf" / "json_schema": Confluent-
    #: framed records of the window rows' schema, registered under ``subject`` (default
    #: ``<topic>-value``) in ``schema_registry`` when the run starts
    format: Literal["json", "avro", "protobuf", "json_schema"] = "json"
    schema_registry: SchemaRegistrySpec | None = None
    subject: str | None = None

    @property
    def value_subject(self) -> str:
        """The subject the records' schema is registered under."""
        return self.subject or f"{self.topic}-value"

    @model_validator(mode="after")
    def _rules(self) -> KafkaTarget:
        if self.format != "json" and self.schema_registry is None:
            raise key_error(
                "schema_registry",
                f'format = "{self.format}" needs [target.schema_registry] url: the records '
                "carry their schema's id in the registry",
            )
        for key in ("schema_registry", "subject"):
            if self.format == "json" and getattr(self, key) is not None:
                raise key_error(key, f'{key} is only for format = "avro", "protobuf" or '
                                '"json_schema"')  # fmt: skip
        return self

    def describe(self) -> str:
        return self.topic


Target = Annotated[DeltaTarget | PostgresTarget | KafkaTarget, Field(discriminator="kind")]


class DeadLetterSpec(SpecModel):
    """``[dead_letter]``: where undecodable rows go, with their bytes: a Delta table
    (``kind = "delta"``, the default) or the state store's ``dead_letters`` table."""

    kind: Literal["delta", "state_store"] = "delta"
    path: str | None = None
    #: delta-rs storage options of the table (credentials, endpoint): secrets.
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rules(self) -> DeadLetterSpec:
        if self.kind == "state_store" and self.path is not None:
            raise key_error("path", 'path is only for kind = "delta"')
        if self.kind == "state_store" and self.storage_options:
            raise key_error("storage_options", 'storage_options is only for kind = "delta"')
        return self
