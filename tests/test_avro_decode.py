"""Confluent-framed Avro decoded to Arrow (flow_jobs.formats.avro), with records
written by confluent-kafka's own AvroSerializer through flow_jobs_dev's registry: two
schema versions in one batch, Avro's resolution rules, logical types, and a reason for
every record that cannot be decoded."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from flow_jobs.formats.avro import Decoder, arrow_schema
from flow_jobs.formats.framing import PayloadSchemaError
from flow_jobs.formats.registry import writer_schemas
from flow_jobs_dev.schema_registry import EmbeddedSchemaRegistry

V1 = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "amount", "type": "int"},
        {"name": "dropped", "type": "string"},
    ],
}
#: v2, the reader: amount promoted to long, ``dropped`` removed, ``page`` added with a default
V2 = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "page", "type": ["null", "string"], "default": None},
    ],
}
CONTEXT = SerializationContext("clicks", MessageField.VALUE)


@pytest.fixture
def registry() -> Iterator[EmbeddedSchemaRegistry]:
    with EmbeddedSchemaRegistry() as registry:
        yield registry


@pytest.fixture
def client(registry: EmbeddedSchemaRegistry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


@pytest.fixture
def decoder(registry: EmbeddedSchemaRegistry):
    """The product's decoder over the registry's writer schemas, as the reader builds it."""
    return lambda reader: Decoder(reader, writer_schemas({"url": registry.url}, "avro"))


def test_records_of_two_versions_decode_to_the_readers_rows(
    client: SchemaRegistryClient, decoder
) -> None:
    old = AvroSerializer(client, json.dumps(V1))
    new = AvroSerializer(client, json.dumps(V2))
    values = [
        old({"user_id": "a", "amount": 7, "dropped": "x"}, CONTEXT),
        new({"user_id": "b", "amount": 2**40, "page": "home"}, CONTEXT),
        new({"user_id": "c", "amount": -1, "page": None}, CONTEXT),
    ]
    rows, reasons = decoder(V2).decode(values)
    assert reasons.null_count == 3
    assert rows.type == pa.struct(list(arrow_schema(V2)))
    assert rows.to_pylist() == [
        {"user_id": "a", "amount": 7, "page": None},
        {"user_id": "b", "amount": 2**40, "page": "home"},
        {"user_id": "c", "amount": -1, "page": None},
    ]


def test_every_record_that_cannot_be_decoded_has_a_reason(
    client: SchemaRegistryClient, decoder
) -> None:
    good = AvroSerializer(client, json.dumps(V2))({"user_id": "a", "amount": 1}, CONTEXT)
    unresolvable = {  # amount as a string: no rule turns it into the reader's long
        "type": "record",
        "name": "Click",
        "fields": [{"name": "user_id", "type": "string"}, {"name": "amount", "type": "string"}],
    }
    client.set_compatibility(level="NONE")
    wrong = AvroSerializer(client, json.dumps(unresolvable))(
        {"user_id": "a", "amount": "1"}, CONTEXT
    )
    schema_id = struct.unpack(">I", good[1:5])[0]
    values = [
        None,
        b"\x00\x00",
        b"\x01" + good[1:],
        b"\x00" + struct.pack(">I", 4242) + good[5:],
        good[:-1],
        good + b"\x00",
        wrong,
        good,
    ]
    rows, reasons = decoder(V2).decode(values)
    found = reasons.to_pylist()
    assert found[0] == "null payload (a tombstone)"
    assert "no schema id" in found[1]
    assert "magic byte 1" in found[2]
    assert "schema id 4242 is not in the registry" in found[3]
    # the field where the body breaks, the cause without the reader's object address
    assert found[4].startswith(
        f"undecodable Avro body (schema id {schema_id}): field page (null | string): "
    ), found[4]
    assert " at 0x" not in found[4]
    assert "1 bytes left over" in found[5]
    assert "does not resolve to the reader's" in found[6]
    assert found[7] is None
    assert rows.to_pylist()[:7] == [None] * 7
    assert rows.to_pylist()[7] == {"user_id": "a", "amount": 1, "page": None}


def test_logical_types_nested_records_arrays_and_maps(
    client: SchemaRegistryClient, decoder
) -> None:
    schema = {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            },
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
            {
                "name": "address",
                "type": {
                    "type": "record",
                    "name": "Address",
                    "fields": [{"name": "city", "type": ["null", "string"]}],
                },
            },
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "counts", "type": {"type": "map", "values": "long"}},
            {"name": "ratio", "type": "float"},
        ],
    }
    order_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    at = datetime(2026, 11, 26, 10, 0, 0, 123000, tzinfo=UTC)
    record = {
        "ts": at,
        "ts_us": at.replace(microsecond=123456),
        "day": date(2026, 11, 26),
        "price": Decimal("12.34"),
        "id": order_id,
        "kind": "B",
        "address": {"city": None},
        "tags": ["x", "y"],
        "counts": {"a": 1},
        "ratio": 0.5,
    }
    value = AvroSerializer(client, json.dumps(schema))(record, CONTEXT)
    rows, reasons = decoder(schema).decode([value])
    assert reasons.to_pylist() == [None]
    types = {f.name: f.type for f in arrow_schema(schema)}
    assert types["ts"] == pa.timestamp("us", tz="UTC") and types["day"] == pa.date32()
    assert types["price"] == pa.decimal128(10, 2) and types["kind"] == pa.string()
    (row,) = rows.to_pylist()
    assert row["ts"] == at and row["ts_us"] == at.replace(microsecond=123456)
    assert row["day"] == date(2026, 11, 26) and row["price"] == Decimal("12.34")
    assert row["id"] == str(order_id) and row["kind"] == "B"
    assert row["address"] == {"city": None} and row["tags"] == ["x", "y"]
    assert row["counts"] == [("a", 1)] and row["ratio"] == 0.5


def test_a_union_of_two_types_has_no_spark_type() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "v", "type": ["int", "string"]}]}
    with pytest.raises(PayloadSchemaError, match=r"the schema\.v: a union of int, string"):
        arrow_schema(schema)
