"""``[[sources]]``: a Kafka topic, its format and where a run starts reading."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from flow_jobs.formats.debezium import CHANGE_COLUMNS
from flow_jobs.instants import epoch_ms
from flow_jobs.records import EVENT_TS
from flow_jobs.secrets import redact
from flow_jobs.spec.base import (
    KAFKA_COLUMN,
    SpecModel,
    _identifier,
    aware_instant,
    key_error,
)
from flow_jobs.spec.ddl import DdlError, parse_schema


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


class SchemaRegistrySpec(SpecModel):
    """``[sources.schema_registry]``: a Confluent-compatible schema registry (the REST API
    confluent-kafka's ``SchemaRegistryClient`` speaks)."""

    url: str = Field(min_length=1)
    #: HTTP basic auth, ``"user:password"`` (e.g. ``"${REGISTRY_USER_INFO}"``).
    basic_auth_user_info: SecretStr | None = None
    #: Bearer auth with a static token (e.g. ``"${REGISTRY_TOKEN}"``), or OAuth client
    #: credentials fetched from ``oauth_token_endpoint_url``; confluent-kafka's client
    #: sends the logical cluster (and identity pool) beside the token, as Confluent Cloud
    #: requires.
    bearer_auth_token: SecretStr | None = None
    oauth_client_id: str | None = None
    oauth_client_secret: SecretStr | None = None
    oauth_token_endpoint_url: str | None = None
    oauth_scope: str | None = None
    bearer_auth_logical_cluster: str | None = None
    bearer_auth_identity_pool_id: str | None = None
    #: TLS: the CA bundle to verify the registry with, and a client certificate and key.
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None

    @model_validator(mode="after")
    def _rules(self) -> SchemaRegistrySpec:
        if not re.match(r"^https?://", self.url):
            raise key_error("url", f"url = {redact(self.url)!r}: use http(s)://host:port")
        if "@" in self.url.split("//", 1)[-1].split("/", 1)[0]:
            raise key_error(
                "url", "url holds credentials: give them as basic_auth_user_info instead"
            )
        oauth = (
            self.oauth_client_id,
            self.oauth_client_secret,
            self.oauth_token_endpoint_url,
            self.oauth_scope,
        )
        ways = [self.basic_auth_user_info is not None, self.bearer_auth_token is not None,
                any(v is not None for v in oauth)]  # fmt: skip
        if sum(ways) > 1:
            raise key_error(
                "basic_auth_user_info",
                "give one way to authenticate: basic_auth_user_info, bearer_auth_token or "
                "oauth_client_id / oauth_client_secret / oauth_token_endpoint_url / oauth_scope",
            )
        if ways[2] and any(v is None for v in oauth):
            raise key_error(
                "oauth_client_id",
                "OAuth needs oauth_client_id, oauth_client_secret, oauth_token_endpoint_url "
                "and oauth_scope",
            )
        if (ways[1] or ways[2]) and not self.bearer_auth_logical_cluster:
            raise key_error(
                "bearer_auth_logical_cluster",
                "bearer auth needs bearer_auth_logical_cluster (the registry's logical "
                "cluster id, e.g. lsrc-abc123), which confluent-kafka's client sends with it",
            )
        return self

    def client_config(self) -> dict[str, str]:
        """confluent-kafka's ``SchemaRegistryClient`` configuration, secrets revealed (for
        a client, never for a log)."""
        config = {"url": self.url}
        if self.basic_auth_user_info is not None:
            config["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        if self.bearer_auth_token is not None:
            config["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            config["bearer.auth.token"] = self.bearer_auth_token.get_secret_value()
        if self.oauth_client_secret is not None:
            config["bearer.auth.credentials.source"] = "OAUTHBEARER"
            config["bearer.auth.client.secret"] = self.oauth_client_secret.get_secret_value()
        for key, option in _BEARER_OPTIONS.items():
            value = getattr(self, key)
            if value is not None:
                config[option] = value
        for key in ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location"):
            value = getattr(self, key)
            if value is not None:
                config[key.replace("_", ".")] = value
        return config


_BEARER_OPTIONS = {
    "oauth_client_id": "bearer.auth.client.id",
    "oauth_token_endpoint_url": "bearer.auth.issuer.endpoint.url",
    "oauth_scope": "bearer.auth.scope",
    "bearer_auth_logical_cluster": "bearer.auth.logical.cluster",
    "bearer_auth_identity_pool_id": "bearer.auth.identity.pool.id",
}


class KafkaSource(SpecModel):
    """``[[sources]]`` with ``kind = "kafka"``: one topic, exposed to SQL as a view."""

    name: str
    kind: Literal["kafka"] = "kafka"
    topic: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    #: "avro" / "protobuf" / "json_schema": Confluent-framed records (magic byte 0, the
    #: writer schema's id, the body), each read with its writer schema from
    #: ``schema_registry`` and resolved to the reader schema (``subject`` at ``version``),
    #: which is the view's schema too; "avro" also as bare bodies of ``avro_schema``.
    #: "debezium": Debezium change events, JSON (``schema`` is the table row's) or, with
    #: ``schema_registry``, Confluent-framed Avro (``flow_jobs.formats.debezium``).
    format: Literal["json", "raw", "avro", "protobuf", "json_schema", "debezium"] = "json"
    schema_ddl: str | None = Field(default=None, alias="schema")
    schema_registry: SchemaRegistrySpec | None = None
    #: a registry format: the subject of the reader schema (default ``<topic>-value``)
    subject: str | None = None
    #: a registry format: the subject's version to read with: "latest" or a number
    version: Literal["latest"] | Annotated[int, Field(gt=0)] = "latest"
    #: format = "protobuf": the reader message's full name (default: the subject's
    #: first top-level message)
    message: str | None = None
    #: format = "avro" without a registry: the schema every record is written with, inline
    #: (Avro's JSON) or a ``.avsc`` file (relative to the spec's folder); records are
    #: bare Avro bodies (no Confluent header)
    avro_schema: str | None = None
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
    #: How long a run waits, before it starts, for the brokers to answer; a broker that
    #: goes away after that is an outage, waited out by ``retries``.
    connect_timeout_ms: Annotated[int, Field(gt=0)] = 15_000
    #: How long one question to the brokers (the topic's metadata, a partition's
    #: offsets) may wait for its answer; one that does not come is a failed try of
    #: ``retries``.
    request_timeout_ms: Annotated[int, Field(gt=0)] = 30_000
    #: Extra librdkafka client properties (e.g. ``security.protocol``); kept secret.
    client_config: dict[str, SecretStr] = Field(default_factory=dict)

    @property
    def reader_subject(self) -> str:
        """A registry format: the subject the reader schema is read from."""
        return self.subject or f"{self.topic}-value"

    @property
    def registry_format(self) -> bool:
        """Whether the payloads are read through ``flow_jobs.formats``."""
        return self.format in REGISTRY_FORMATS or (
            self.format == "debezium" and self.schema_registry is not None
        )

    @property
    def payload_format(self) -> str:
        """The format of a registry source's payloads (a Debezium envelope is Avro)."""
        return "avro" if self.format == "debezium" else self.format

    @property
    def changes(self) -> bool:
        """Whether each record is a change of a table's row (Debezium), not an event."""
        return self.format == "debezium"

    @field_validator("avro_schema", mode="after")
    @classmethod
    def _avro_schema(cls, value: str | None, info: ValidationInfo) -> str | None:
        """An ``.avsc`` file's text, read relative to the spec's folder; either way, an
        Avro schema with a Spark type."""
        if value is None:
            return None
        text = value
        if not value.lstrip().startswith(("{", "[", '"')):
            base = (info.context or {}).get("spec_dir") or Path.cwd()
            path = Path(base) / value
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as e:
                raise ValueError(f"cannot read {path}: {e.strerror}") from None
        from flow_jobs.formats import PayloadSchemaError, format_module

        try:
            format_module("avro").payload_schema(text)
        except PayloadSchemaError as e:
            raise ValueError(str(e)) from None
        return text

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
        if self.changes and not self.registry_format and not (ddl and ddl.strip()):
            raise key_error(
                "schema",
                'schema is required when format = "debezium" has no schema_registry: the '
                "Spark DDL of the table's row (the fields of before and after), e.g. "
                'schema = "id BIGINT, name STRING, updated_at BIGINT"',
            )
        if self.format == "json" and not (ddl and ddl.strip()):
            raise key_error(
                "schema",
                'schema is required when format = "json": the Spark DDL of the payload, '
                'e.g. schema = "user_id STRING, amount DOUBLE, ts BIGINT"',
            )
        if self.format == "raw" and ddl:
            raise key_error("schema", 'format = "raw" has no schema; remove it')
        self._registry_rules()
        if ddl:
            self._schema_rules(ddl)
        return self

    def _schema_rules(self, ddl: str) -> None:
        """The schema is Spark DDL Spark's JSON decoder takes (``flow_jobs.spec.ddl``:
        read without Spark; the run's parse stays the final word), without the columns
        every view adds."""
        try:
            schema = parse_schema(ddl)
        except DdlError as e:
            raise key_error("schema", str(e)) from None
        if self.format in ("json", "debezium") and schema.not_json:
            raise key_error("schema", schema.not_json[0])
        reserved = (EVENT_TS, KAFKA_COLUMN, *(CHANGE_COLUMNS if self.changes else ()))
        for column in schema.columns:
            if column.name in reserved:
                raise key_error(
                    "schema",
                    f"schema declares a payload column named {column.name!r}, which "
                    "collides with a column every source view carries; rename it in the schema",
                )

    def _registry_rules(self) -> None:
        fmt = self.format
        if self.avro_schema is not None and fmt != "avro":
            raise key_error("avro_schema", 'avro_schema is only for format = "avro"')
        if self.avro_schema is not None and self.schema_registry is not None:
            raise key_error(
                "avro_schema",
                "give avro_schema (bare Avro bodies) or [sources.schema_registry] "
                "(Confluent-framed records), not both",
            )
        if self.avro_schema is not None and self.schema_ddl:
            raise key_error("schema", "avro_schema is the schema; remove schema")
        if fmt in REGISTRY_FORMATS and self.avro_schema is None and not self.schema_registry:
            more = " (or avro_schema for bare Avro bodies)" if fmt == "avro" else ""
            raise key_error(
                "schema_registry",
                f'format = "{fmt}" needs [sources.schema_registry] url{more}: the records '
                "carry their writer schema's id in the registry",
            )
        keys: tuple[tuple[str, Any], ...] = (
            ("schema_registry", None), ("subject", None), ("version", "latest"))  # fmt: skip
        registry = fmt in REGISTRY_FORMATS or fmt == "debezium"
        for key, unset in keys:
            if (not registry or self.avro_schema) and getattr(self, key) != unset:
                raise key_error(key, f"{key} is only for a format read through a registry")
        if fmt == "debezium" and self.schema_registry is None:
            for key, unset in keys[1:]:
                if getattr(self, key) != unset:
                    raise key_error(
                        key, f"{key} is only for Debezium's Avro, read through a schema_registry"
                    )
        if self.message is not None and fmt != "protobuf":
            raise key_error("message", 'message is only for format = "protobuf"')


#: The formats read through ``flow_jobs.formats`` (Confluent-framed, a registry).
REGISTRY_FORMATS = ("avro", "protobuf", "json_schema")
