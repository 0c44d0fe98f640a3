"""flow_jobs_dev's schema registry, proven with confluent-kafka's own client and Avro
serializers (the code users' producers and consumers run): ids, versions, lookups,
compatibility, errors, and Confluent's wire format (magic byte 0, a 4-byte schema id)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from flow_jobs_dev.schema_registry import EmbeddedSchemaRegistry, avro_can_read


def _record(*fields: dict) -> dict:
    return {"type": "record", "name": "Click", "namespace": "shop", "fields": list(fields)}


V1 = _record({"name": "user_id", "type": "string"}, {"name": "amount", "type": "int"})
#: v2: a field added with a default, amount promoted int -> long
V2 = _record(
    {"name": "user_id", "type": "string"},
    {"name": "amount", "type": "long"},
    {"name": "page", "type": ["null", "string"], "default": None},
)


ENUM_A = {"type": "enum", "name": "E", "symbols": ["A"]}
ENUM_AB = {"type": "enum", "name": "E", "symbols": ["A", "B"]}


@pytest.fixture
def registry() -> Iterator[EmbeddedSchemaRegistry]:
    with EmbeddedSchemaRegistry() as server:
        yield server


@pytest.fixture
def client(registry: EmbeddedSchemaRegistry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def _avro(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def test_the_client_registers_looks_up_and_fetches_schemas(
    client: SchemaRegistryClient, registry: EmbeddedSchemaRegistry
) -> None:
    first = client.register_schema("clicks-value", _avro(V1))  # the schema's id
    again = client.register_schema("clicks-value", _avro(V1))
    second = client.register_schema("clicks-value", _avro(V2))
    assert first == again != second
    assert client.get_subjects() == ["clicks-value"]
    assert client.get_versions("clicks-value") == [1, 2]
    latest = client.get_latest_version("clicks-value")
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(client.get_version("clicks-value", 1).schema.schema_str) == V1
    # a fresh client (no cache) reads the schema by its id, as a consumer does
    fresh = SchemaRegistryClient({"url": registry.url})
    assert json.loads(fresh.get_schema(first).schema_str) == V1
    found = fresh.lookup_schema("clicks-value", _avro(V2))
    assert (found.version, found.schema_id) == (2, second)
    # the same schema under another subject keeps its id
    other = client.register_schema("orders-value", _avro(V1))
    assert other == first


def test_errors_are_confluents(client: SchemaRegistryClient) -> None:
    with pytest.raises(SchemaRegistryError) as unknown_subject:
        client.get_latest_version("nothing-value")
    assert unknown_subject.value.error_code == 40401
    with pytest.raises(SchemaRegistryError) as unknown_id:
        client.get_schema(999)
    assert unknown_id.value.error_code == 40403
    client.register_schema("clicks-value", _avro(V1))
    with pytest.raises(SchemaRegistryError) as not_there:
        SchemaRegistryClient({"url": client._rest_client.base_urls[0]}).lookup_schema(
            "clicks-value", _avro(V2)
        )
    assert not_there.value.error_code == 40403


def test_compatibility_follows_avro_resolution(client: SchemaRegistryClient) -> None:
    client.register_schema("clicks-value", _avro(V1))
    assert client.get_compatibility("clicks-value") == "BACKWARD"
    # a new required field cannot read the old records: refused (HTTP 409)
    required = _record(*V1["fields"], {"name": "page", "type": "string"})
    assert not client.test_compatibility("clicks-value", _avro(required))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema("clicks-value", _avro(required))
    assert refused.value.http_status_code == 409
    assert client.test_compatibility("clicks-value", _avro(V2))
    client.set_compatibility("clicks-value", "NONE")
    assert client.register_schema("clicks-value", _avro(required)) > 0


@pytest.mark.parametrize(
    ("reader", "writer", "reads"),
    [
        (V2, V1, True),  # added with a default, int -> long
        (V1, V2, False),  # a removed field is skipped, but long -> int is no promotion
        ("long", "int", True),
        ("int", "long", False),
        ("double", "float", True),
        ("string", "bytes", True),
        (["null", "string"], "string", True),
        ("string", ["null", "string"], False),  # the writer may have written null
        (
            {"type": "enum", "name": "E", "symbols": ["A"]},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            False,
        ),
        (
            {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            True,
        ),
        ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
        ({"type": "map", "values": "int"}, {"type": "map", "values": "string"}, False),
        (
            {"type": "fixed", "name": "F", "size": 4},
            {"type": "fixed", "name": "F", "size": 8},
            False,
        ),
    ],
)
def test_avro_resolution(reader: object, writer: object, reads: bool) -> None:
    assert avro_can_read(reader, writer) is bool(reads)


def test_confluents_avro_serializer_round_trips_through_the_registry(
    registry: EmbeddedSchemaRegistry,
) -> None:
    """Records written under two versions of a subject, read back by the deserializer
    with each record's writer schema fetched by its id: Confluent's wire format."""
    client = SchemaRegistryClient({"url": registry.url})
    context = SerializationContext("clicks", MessageField.VALUE)
    old = AvroSerializer(client, json.dumps(V1))({"user_id": "u1", "amount": 3}, context)
    new = AvroSerializer(client, json.dumps(V2))(
        {"user_id": "u2", "amount": 2**40, "page": "home"}, context
    )
    for frame in (old, new):
        magic, schema_id = struct.unpack(">bI", frame[:5])
        assert magic == 0 and registry.registry.by_id(schema_id).schema_type == "AVRO"
    reader = AvroDeserializer(SchemaRegistryClient({"url": registry.url}), json.dumps(V2))
    assert reader(old, context) == {"user_id": "u1", "amount": 3, "page": None}
    assert reader(new, context) == {"user_id": "u2", "amount": 2**40, "page": "home"}
