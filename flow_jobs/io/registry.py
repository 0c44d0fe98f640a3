"""The schema registry an Avro source reads its schemas from, through confluent-kafka's
``SchemaRegistryClient`` (basic auth, TLS, retries with backoff, a cache).

The driver reads the reader schema (the source's subject at its version) when it plans
the query; each executor's reader fetches a record's writer schema by the id the record
carries, once per id and process (``writer_schemas``). An id the registry does not have
is that record's fault (a dead letter, ``flow_jobs.io.avro_decode``); a registry that
cannot be reached fails the read after the client's retries, never dropping a record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any


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


def safe_url(url: str) -> str:
    return re.sub(r"//[^/@]*@", "//", url)


def reader_schema(config: dict[str, str], subject: str, version: str | int) -> dict[str, Any]:
    """The subject's schema at ``version`` ("latest" or a number), parsed."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = client_for(config)
    try:
        if version == "latest":
            registered = client.get_latest_version(subject)
        else:
            registered = client.get_version(subject, int(version))
    except SchemaRegistryError as e:
        if e.http_status_code == 404:
            raise SubjectNotFound(
                f"the registry has no subject {subject!r} at version {version}"
            ) from None
        raise RegistryUnreachable(
            f"the schema registry at {safe_url(config['url'])} answered: {e.error_message}"
        ) from None
    except Exception as e:  # connection refused, DNS, TLS: the client's own errors
        raise RegistryUnreachable(
            f"cannot reach the schema registry at {safe_url(config['url'])}: "
            f"{type(e).__name__}: {_without_secrets(str(e), config)}"
        ) from None
    if (registered.schema.schema_type or "AVRO") != "AVRO":
        raise SubjectNotFound(
            f"subject {subject!r} holds a {registered.schema.schema_type} schema, not Avro"
        )
    return json.loads(registered.schema.schema_str)


def writer_schemas(config: dict[str, str]) -> Callable[[int], Any]:
    """A record's writer schema by its id (``LookupError`` for an id the registry does
    not have, ``RegistryUnreachable`` when it cannot be asked)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = client_for(config)

    def fetch(schema_id: int) -> Any:
        try:
            schema = client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code == 404:
                raise LookupError(e.error_message) from None
            raise RegistryUnreachable(
                f"the schema registry at {safe_url(config['url'])} answered: {e.error_message}"
            ) from None
        except Exception as e:
            raise RegistryUnreachable(
                f"cannot reach the schema registry at {safe_url(config['url'])}: "
                f"{type(e).__name__}: {_without_secrets(str(e), config)}"
            ) from None
        if (schema.schema_type or "AVRO") != "AVRO":
            raise LookupError(f"schema id {schema_id} is {schema.schema_type}, not Avro")
        return json.loads(schema.schema_str)

    return fetch


def _without_secrets(text: str, config: dict[str, str]) -> str:
    secret = config.get("basic.auth.user.info")
    if secret:
        text = text.replace(secret, "***")
    return safe_url(text)
