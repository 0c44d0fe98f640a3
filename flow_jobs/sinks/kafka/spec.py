"""``[target]`` with ``kind = "kafka"``: its keys."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from flow_jobs.spec.base import key_error
from flow_jobs.spec.sources import SchemaRegistrySpec
from flow_jobs.spec.targets import TargetSpec


class KafkaTarget(TargetSpec):
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

    append_only = "an append-only topic"

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
