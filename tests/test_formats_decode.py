"""Confluent-framed Protobuf and JSON Schema decoded to Arrow (``flow_jobs.formats``),
with records written by confluent-kafka's own ``ProtobufSerializer`` and
``JSONSerializer`` through flow_jobs_dev's registry: two schema versions in one batch,
every type the spec reference maps, and a reason for every record that cannot be
decoded. The writer schemas come through the product's own registry client."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from flow_jobs.formats import PayloadSchemaError, format_module
from flow_jobs.formats.registry import reader_schema, writer_schemas
from flow_jobs_dev.schema_registry import EmbeddedSchemaRegistry
from tests.registry_payloads import F, click_serializer, field, message_classes

CONTEXT = SerializationContext("things", MessageField.VALUE)


@pytest.fixture
def registry() -> Iterator[EmbeddedSchemaRegistry]:
    with EmbeddedSchemaRegistry() as registry:
        yield registry


def _decode(registry: EmbeddedSchemaRegistry, fmt: str, subject: str, values: list, **kw):
    config = {"url": registry.url}
    reader = reader_schema(config, subject, "latest", fmt, **kw)
    module = format_module(fmt)
    return module.payload_schema(reader), module.Decoder(reader, writer_schemas(config, fmt))


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
def test_records_of_two_versions_decode_to_the_readers_rows(
    registry: EmbeddedSchemaRegistry, fmt: str
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    old = click_serializer(fmt, client, "clicks", v2=False)
    values = [old({"user_id": "a", "page": None, "amount": -1.5, "qty": -3, "ts": 7})]
    new = click_serializer(fmt, client, "clicks", v2=True)
    values += [
        new({"user_id": None, "page": "/p", "amount": math.inf, "qty": 2**40, "ts": 2**62}),
        new({"user_id": "", "page": "", "amount": 1e17, "qty": 0, "ts": -1}),
    ]
    schema, decoder = _decode(registry, fmt, "clicks-value", values)
    assert [(f.name, f.type) for f in schema] == [
        ("user_id", pa.string()),
        ("page", pa.string()),
        ("amount", pa.float64()),
        ("qty", pa.int64()),
        ("ts", pa.int64()),
        ("channel", pa.string()),
    ]
    rows, reasons = decoder.decode(values)
    assert reasons.to_pylist() == [None] * 3
    assert rows.to_pylist() == [
        {"user_id": "a", "page": None, "amount": -1.5, "qty": -3, "ts": 7, "channel": None},
        {"user_id": None, "page": "/p", "amount": math.inf, "qty": 2**40, "ts": 2**62,
         "channel": "web"},
        {"user_id": "", "page": "", "amount": 1e17, "qty": 0, "ts": -1, "channel": "web"},
    ]  # fmt: skip


def _order_classes() -> dict:
    address = descriptor_pb2.DescriptorProto(
        name="Address", field=[field("city", 1, F.TYPE_STRING)]
    )
    entry = descriptor_pb2.DescriptorProto(
        name="CountsEntry",
        field=[field("key", 1, F.TYPE_STRING), field("value", 2, F.TYPE_INT64)],
        options=descriptor_pb2.MessageOptions(map_entry=True),
    )
    order = descriptor_pb2.DescriptorProto(
        name="Order",
        nested_type=[entry],
        field=[
            field("ts", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"),
            field("kind", 2, F.TYPE_ENUM, type_name=".shop.Kind"),
            field("address", 3, F.TYPE_MESSAGE, type_name=".shop.Address"),
            field("tags", 4, F.TYPE_STRING, label=F.LABEL_REPEATED),
            field("counts", 5, F.TYPE_MESSAGE, type_name=".shop.Order.CountsEntry",
                  label=F.LABEL_REPEATED),
            field("ratio", 6, F.TYPE_FLOAT),
            field("big", 7, F.TYPE_UINT64),
            field("small", 8, F.TYPE_UINT32),
            field("note", 9, F.TYPE_MESSAGE, type_name=".google.protobuf.Int64Value"),
            field("raw", 10, F.TYPE_BYTES),
            field("flag", 11, F.TYPE_BOOL),
            field("n", 12, F.TYPE_SINT32),
        ],
    )  # fmt: skip
    kind = descriptor_pb2.EnumDescriptorProto(
        name="Kind",
        value=[
            descriptor_pb2.EnumValueDescriptorProto(name="NONE", number=0),
            descriptor_pb2.EnumValueDescriptorProto(name="B", number=1),
        ],
    )
    return message_classes("order.proto", "shop", [order, address], enums=[kind])


def test_protobuf_types_nested_messages_repeated_maps_and_well_known_types(
    registry: EmbeddedSchemaRegistry,
) -> None:
    classes = _order_classes()
    order, address = classes["Order"], classes["Address"]
    client = SchemaRegistryClient({"url": registry.url})
    serialize = ProtobufSerializer(order, client, {"use.deprecated.format": False})
    at = datetime(2026, 11, 26, 10, 0, 0, 123456, tzinfo=UTC)
    full = order(kind=1, address=address(city="Oslo"), tags=["x", "y"], ratio=0.5,
                 big=2**64 - 1, small=2**32 - 1, raw=b"\x00\xff", flag=True, n=-5)  # fmt: skip
    full.ts.FromDatetime(at)
    full.counts["a"] = 1
    full.note.value = -(2**63)
    values = [serialize(full, CONTEXT), serialize(order(), CONTEXT)]
    schema, decoder = _decode(registry, "protobuf", "things-value", values)
    types = {f.name: f.type for f in schema}
    assert types["ts"] == pa.timestamp("us", tz="UTC") and types["kind"] == pa.string()
    assert types["big"] == pa.decimal128(20, 0) and types["small"] == pa.int64()
    assert types["counts"] == pa.map_(pa.string(), pa.int64())
    assert types["note"] == pa.int64() and types["address"] == pa.struct([("city", pa.string())])
    rows, reasons = decoder.decode(values)
    assert reasons.to_pylist() == [None, None]
    one, empty = rows.to_pylist()
    assert one == {
        "ts": at, "kind": "B", "address": {"city": "Oslo"}, "tags": ["x", "y"],
        "counts": [("a", 1)], "ratio": 0.5, "big": Decimal(2**64 - 1), "small": 2**32 - 1,
        "note": -(2**63), "raw": b"\x00\xff", "flag": True, "n": -5,
    }  # fmt: skip
    # proto3: an unset scalar is its default, an unset message (and wrapper) NULL
    assert empty == {
        "ts": None, "kind": "NONE", "address": None, "tags": [], "counts": [], "ratio": 0.0,
        "big": Decimal(0), "small": 0, "note": None, "raw": b"", "flag": False, "n": 0,
    }  # fmt: skip


def test_every_protobuf_record_that_cannot_be_decoded_has_a_reason(
    registry: EmbeddedSchemaRegistry,
) -> None:
    classes = _order_classes()
    client = SchemaRegistryClient({"url": registry.url})
    serialize = ProtobufSerializer(classes["Order"], client, {"use.deprecated.format": False})
    good = serialize(classes["Order"](flag=True), CONTEXT)
    # the second message of the same file, under the same subject
    other = ProtobufSerializer(classes["Address"], client, {"use.deprecated.format": False})
    wrong_message = other(classes["Address"](city="x"), CONTEXT)
    values = [
        good,
        wrong_message,
        good[:5] + b"\x08",  # two message indexes announced, none there
        good[:5] + b"\x00" + b"\x0a\xff",  # field 1 (Timestamp) of 255 bytes: truncated
        b"\x00" + struct.pack(">I", 4242) + good[5:],
        b"\x07" + good[1:],
    ]
    _, decoder = _decode(registry, "protobuf", "things-value", values, message="shop.Order")
    found = decoder.decode(values)[1].to_pylist()
    assert found[0] is None
    assert "its record is a shop.Address, the reader reads shop.Order" in found[1]
    assert "truncated message indexes" in found[2]
    assert found[3] == (
        "undecodable Protobuf body (schema id 1): field ts (google.protobuf.Timestamp, "
        "number 1): the body ends inside its length (DecodeError)"
    )
    assert "schema id 4242 is not in the registry" in found[4]
    assert "magic byte 7" in found[5]


def test_a_protobuf_body_that_breaks_names_the_field_where_it_does() -> None:
    """protobuf's parser names no field; the walk of the wire format after it refused a
    body does (``flow_jobs.formats.protobuf_wire``), inside a message field too."""
    from flow_jobs.formats.protobuf_wire import where_it_breaks

    address = descriptor_pb2.DescriptorProto(
        name="Address", field=[field("city", 1, F.TYPE_STRING), field("zip", 2, F.TYPE_INT64)]
    )
    order = descriptor_pb2.DescriptorProto(
        name="Order",
        field=[
            field("id", 1, F.TYPE_STRING),
            field("qty", 2, F.TYPE_INT64),
            field("address", 3, F.TYPE_MESSAGE, type_name=".shop.Address"),
            field("price", 4, F.TYPE_DOUBLE),
        ],
    )
    classes = message_classes("wire.proto", "shop", [address, order])
    good = classes["Order"](
        id="o1", qty=3, address=classes["Address"](city="Oslo", zip=5), price=1.5
    ).SerializeToString()
    address_at = good.index(b"\x1a")
    bodies = {
        good[:-3]: "field price (double, number 4): the body ends inside its value",
        good[:3]: "field id (string, number 1): its 2 bytes run past the body's end",
        good + b"\x0f": "after field price: a tag of field number 1, wire type 7",
        b"\x10" + b"\xff" * 11: "field qty (int64, number 2): its value is a varint longer "
        "than 10 bytes",
        good[:address_at] + b"\x1a\x04\x0a\x02\xc3\x28": "field address.city (string, number "
        "1): not UTF-8 (invalid continuation byte at byte 0)",
    }
    descriptor = classes["Order"].DESCRIPTOR
    for body, where in bodies.items():
        with pytest.raises(Exception):  # noqa: B017 - protobuf's DecodeError
            classes["Order"].FromString(body)
        assert where_it_breaks(body, descriptor) == where
    assert where_it_breaks(good, descriptor) is None


def test_a_recursive_message_has_no_spark_type(registry: EmbeddedSchemaRegistry) -> None:
    node = descriptor_pb2.DescriptorProto(
        name="Node", field=[field("next", 1, F.TYPE_MESSAGE, type_name=".shop.Node")]
    )
    cls = message_classes("node.proto", "shop", [node])["Node"]
    client = SchemaRegistryClient({"url": registry.url})
    ProtobufSerializer(cls, client, {"use.deprecated.format": False})(cls(), CONTEXT)
    with pytest.raises(PayloadSchemaError, match=r"Node\.next: shop\.Node contains itself"):
        reader_schema({"url": registry.url}, "things-value", "latest", "protobuf")


ORDER_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": ["string", "null"], "format": "date"},
        "qty": {"type": "integer"},
        "price": {"oneOf": [{"type": "null"}, {"type": "number"}]},
        "ok": {"type": "boolean"},
        "address": {"$ref": "#/definitions/Address"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["id"],
    "definitions": {
        "Address": {"type": "object", "properties": {"city": {"type": ["null", "string"]}}}
    },
}


def test_json_schema_types_and_a_reason_for_every_record_without_them(
    registry: EmbeddedSchemaRegistry,
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serialize = JSONSerializer(json.dumps(ORDER_JSON), client)
    good = serialize(
        {"id": "o1", "at": "2026-11-26T10:00:00.5+01:00", "day": "2026-11-26", "qty": 3,
         "price": 1.25, "ok": True, "address": {"city": "Oslo"}, "tags": ["x"],
         "counts": {"a": 2}, "extra": "ignored"},
        CONTEXT,
    )  # fmt: skip
    header = good[:5]
    bad = [
        (b'{"qty": 1}', "the record.id is required and absent"),
        (b'{"id": "x", "qty": 1.5}', "the record.qty is a number, not an integer: 1.5"),
        (b'{"id": "x", "qty": 9223372036854775808}', "outside BIGINT's range"),
        (b'{"id": "x", "ok": 1}', "the record.ok is an integer, not a boolean"),
        (b'{"id": "x", "at": "2026-11-26T10:00:00"}', "has no UTC offset"),
        (b'{"id": "x", "day": "26/11/2026"}', 'the record.day = "26/11/2026" is not a date'),
        (b'{"id": "x", "tags": "x"}', 'the record.tags is a string, not an array: "x"'),
        (b'{"id": "x", "address": {"city": 3}}', "the record.address.city is an integer"),
        (b'{"id": "x", "counts": {"a": "b"}}', "the record.counts.a is a string"),
        (b"[1]", "the record is an array, not an object"),
        (b"{", "JSONDecodeError"),
    ]
    values = [good, header + b'{"id": "o2", "qty": 4.0}', *(header + v for v, _ in bad)]
    schema, decoder = _decode(registry, "json_schema", "things-value", values)
    types = {f.name: f.type for f in schema}
    assert types["at"] == pa.timestamp("us", tz="UTC") and types["day"] == pa.date32()
    assert types["qty"] == pa.int64() and types["price"] == pa.float64()
    assert types["counts"] == pa.map_(pa.string(), pa.int64())
    rows, reasons = decoder.decode(values)
    found = reasons.to_pylist()
    assert found[:2] == [None, None]
    for (_, fragment), reason in zip(bad, found[2:], strict=True):
        assert reason is not None and fragment in reason, (fragment, reason)
        assert reason.startswith("undecodable JSON Schema body (schema id 1)")
    first, second = rows.to_pylist()[:2]
    assert first == {
        "id": "o1", "at": datetime(2026, 11, 26, 9, 0, 0, 500000, tzinfo=UTC),
        "day": date(2026, 11, 26), "qty": 3, "price": 1.25, "ok": True,
        "address": {"city": "Oslo"}, "tags": ["x"], "counts": [("a", 2)],
    }  # fmt: skip
    assert second["qty"] == 4 and second["address"] is None


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "object", "properties": {"v": {"type": ["integer", "string"]}}},
         "the schema.v: type ['integer', 'string'] has no Spark type"),
        ({"type": "object", "properties": {"v": {"type": "object"}}},
         "the schema.v: an object without properties"),
        ({"type": "object", "properties": {"v": {"$ref": "other.json#/X"}}},
         "is not one of the schema's own definitions"),
        ({"type": "object", "properties": {"v": {"$ref": "#/$defs/N"}},
          "$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}}},
         "contains itself"),
        ({"type": "string"}, "not an object"),
    ],
)  # fmt: skip
def test_json_schemas_without_a_spark_type_are_refused(
    registry: EmbeddedSchemaRegistry, schema: dict, fragment: str
) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    client.register_schema("things-value", Schema(json.dumps(schema), "JSON"))
    with pytest.raises(PayloadSchemaError) as refused:
        reader_schema({"url": registry.url}, "things-value", "latest", "json_schema")
    assert fragment in str(refused.value)


def test_a_subject_of_another_format_is_refused(registry: EmbeddedSchemaRegistry) -> None:
    from flow_jobs.formats.registry import SubjectNotFound

    client = SchemaRegistryClient({"url": registry.url})
    client.register_schema("things-value", Schema(json.dumps(ORDER_JSON), "JSON"))
    with pytest.raises(SubjectNotFound, match="holds a JSON schema, not Protobuf"):
        reader_schema({"url": registry.url}, "things-value", "latest", "protobuf")
