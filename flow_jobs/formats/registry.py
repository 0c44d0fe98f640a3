"""The schema registry a source of a registry format (Avro, Protobuf, JSON Schema) reads
its schemas from, through confluent-kafka's ``SchemaRegistryClient`` (basic auth, TLS,
retries with backoff, a cache).

The driver reads the reader schema (the source's subject at its version) when it plans
the query; each executor's reader fetches a record's writer schema by the id the record
carries, once per id and process (``writer_schemas``). An id the registry does not have
is that record's fault (a dead letter, ``flow_jobs.formats.framing``); a registry that
cannot be reached fails the read after the client's retries, never dropping a record.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from flow_jobs.formats import format_module
from flow_jobs.secrets import MASK, redact

#: The client settings that are secrets (``SchemaRegistrySpec.client_config``).
SECRET_KEYS = frozenset({"basic.auth.user.info", "bearer.auth.token", "bearer.auth.client.secret"})


class RegistryUnreachable(RuntimeError):
    """The registry did not answer (the message names the URL, without credentials)."""


class SubjectNotFound(LookupError):
    """The registry has no such subject or version."""


def _client(config: tuple[tuple[str, str], ...]) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(dict(config))


_clients = cache(_client)


def client_for(config: dict[str, str]) -> Any:
    """One client per registry configuration and process (its cache holds the schemas)."""
    return _clients(tuple(sorted(config.items())))


def reader_schema(
    config: dict[str, str],
    subject: str,
    version: str | int,
    payload_format: str,
    message: str | None = None,
) -> str:
    """The subject's schema at ``version`` ("latest" or a number), as the reader of
    ``payload_format`` takes it (``flow_jobs.formats``; ``PayloadSchemaError`` when it
    has no Spark type)."""
    module = format_module(payload_format)
    client = client_for(config)
    fmt = getattr(module, "FETCH_FORMAT", None)
    if version == "latest":
        registered = _ask(config, lambda: client.get_latest_version(subject, fmt=fmt))
    else:
        registered = _ask(config, lambda: client.get_version(subject, int(version), fmt=fmt))
    if registered is None:
        raise SubjectNotFound(f"the registry has no subject {subject!r} at version {version}")
    schema = registered.schema
    kind = schema.schema_type or "AVRO"
    if kind != module.SCHEMA_TYPE:
        raise SubjectNotFound(f"subject {subject!r} holds a {kind} schema, not {module.TITLE}")
    return module.reader(schema.schema_str, _references(config, schema, fmt), message)


def writer_schemas(config: dict[str, str], payload_format: str) -> Callable[[int], Any]:
    """A record's writer schema by its id, as the decoder of ``payload_format`` takes it
    (``LookupError`` for an id the registry does not have, ``RegistryUnreachable`` when
    it cannot be asked)."""
    module = format_module(payload_format)
    client = client_for(config)
    fmt = getattr(module, "FETCH_FORMAT", None)

    def fetch(schema_id: int) -> Any:
        schema = _ask(config, lambda: client.get_schema(schema_id, fmt=fmt))
        if schema is None:
            raise LookupError(f"the registry has no schema {schema_id}")
        kind = schema.schema_type or "AVRO"
        if kind != module.SCHEMA_TYPE:
            raise LookupError(f"schema id {schema_id} is {kind}, not {module.TITLE}")
        return module.writer(schema.schema_str, _references(config, schema, fmt))

    return fetch


def register(config: dict[str, str], subject: str, text: str, payload_format: str) -> int:
    """Registers ``text`` (a schema of ``payload_format``) under ``subject``, or finds it
    there: its id. A registry that refuses it (an incompatible change) is
    ``RegistryUnreachable`` with the registry's words."""
    from confluent_kafka.schema_registry import Schema

    module = format_module(payload_format)
    client = client_for(config)
    schema = Schema(text, module.SCHEMA_TYPE)
    registered = _ask(config, lambda: client.register_schema(subject, schema))
    if registered is None:
        raise RegistryUnreachable(f"the schema registry at {redact(config['url'])} has no "
                                  f"subject {subject!r} to register in")  # fmt: skip
    return int(registered)


def _references(config: dict[str, str], schema: Any, fmt: str | None) -> list[tuple[str, str]]:
    """The schemas ``schema`` references, each with its own references before it."""
    client = client_for(config)
    found: list[tuple[str, str]] = []
    seen: set[str] = set()

    def visit(current: Any) -> None:
        for ref in current.references or []:
            if ref.name in seen or ref.name.startswith("google/protobuf/"):
                continue  # Protobuf's well-known types: every pool has them
            seen.add(ref.name)
            registered = _ask(
                config, lambda r=ref: client.get_version(r.subject, r.version, fmt=fmt)
            )
            if registered is None:
                raise LookupError(f"reference {ref.name} ({ref.subject} v{ref.version}) is gone")
            visit(registered.schema)
            found.append((ref.name, registered.schema.schema_str))

    visit(schema)
    return found


def _ask(config: dict[str, str], call: Callable[[], Any]) -> Any:
    """``call``'s answer, None where the registry answers that it has no such thing
    (HTTP 404), ``RegistryUnreachable`` for any other failure (after the client's own
    retries), its message naming the URL without credentials."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    url = redact(config["url"])
    try:
        return call()
    except SchemaRegistryError as e:
        if e.http_status_code == 404:
            return None
        raise RegistryUnreachable(
            f"the schema registry at {url} answered: {e.error_message}"
        ) from None
    except Exception as e:  # connection refused, DNS, TLS: the client's own errors
        text = str(e)
        for key in SECRET_KEYS:
            secret = config.get(key)
            if secret:
                text = text.replace(secret, MASK)
        raise RegistryUnreachable(
            f"cannot reach the schema registry at {url}: {type(e).__name__}: {redact(text)}"
        ) from None
