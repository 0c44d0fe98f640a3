"""Test payloads of the registry formats, written by confluent-kafka's own serializers
(``ProtobufSerializer``, ``JSONSerializer``, ``AvroSerializer``): the code users'
producers run, so the wire format is the real one.

Protobuf messages are built from descriptors here (no ``protoc`` at hand), into their
own pool, as generated classes would be."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)

F = descriptor_pb2.FieldDescriptorProto


def field(name: str, number: int, kind: int, **more: Any) -> F:
    return F(name=name, number=number, type=kind, label=more.pop("label", F.LABEL_OPTIONAL), **more)


def message_classes(
    name: str, package: str, messages: list[descriptor_pb2.DescriptorProto], syntax: str = "proto3",
    enums: list[descriptor_pb2.EnumDescriptorProto] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Classes of ``messages`` in a file of their own (importing the well-known types)."""
    pool = descriptor_pool.DescriptorPool()
    for known in (timestamp_pb2, wrappers_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        known.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    file = descriptor_pb2.FileDescriptorProto(
        name=name,
        package=package,
        syntax=syntax,
        message_type=messages,
        enum_type=enums or [],
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"],
    )
    pool.Add(file)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{m.name}"))
        for m in messages
    }


def click_classes(v2: bool) -> Any:
    """``shop.Click`` (proto2, so every field has presence: NULL when unset). v2, the
    reader: qty int32 -> int64 (the same varint on the wire), ``channel`` added."""
    fields = [
        field("user_id", 1, F.TYPE_STRING),
        field("page", 2, F.TYPE_STRING),
        field("amount", 3, F.TYPE_DOUBLE),
        field("qty", 4, F.TYPE_INT64 if v2 else F.TYPE_INT32),
        field("ts", 5, F.TYPE_INT64),
    ]
    if v2:
        fields.append(field("channel", 6, F.TYPE_STRING))
    messages = [descriptor_pb2.DescriptorProto(name="Click", field=fields)]
    return message_classes(f"click_v{2 if v2 else 1}.proto", "shop", messages, "proto2")["Click"]


def _json_click(v2: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "user_id": {"type": ["null", "string"]},
        "page": {"type": ["null", "string"]},
        "amount": {"type": ["null", "number"]},
        "qty": {"type": ["null", "integer"]},
        "ts": {"type": "integer"},
    }
    if v2:
        properties["channel"] = {"type": ["null", "string"]}
    return {"type": "object", "title": "Click", "properties": properties, "required": ["ts"]}


def _avro_click(v2: bool) -> dict[str, Any]:
    nullable = ["null", "string"]
    fields: list[dict[str, Any]] = [
        {"name": "user_id", "type": nullable},
        {"name": "page", "type": nullable},
        {"name": "amount", "type": ["null", "double"]},
        {"name": "qty", "type": ["null", "long" if v2 else "int"]},
        {"name": "ts", "type": "long"},
    ]
    if v2:
        fields.append({"name": "channel", "type": nullable, "default": None})
    return {"type": "record", "name": "Click", "namespace": "shop", "fields": fields}


def click_serializer(
    fmt: str, client: SchemaRegistryClient, topic: str, v2: bool
) -> Callable[[dict[str, Any]], bytes]:
    """A click (a dict of the fields above, v2's ``channel`` ignored by v1) as
    ``fmt``'s serializer frames it, its schema registered under ``<topic>-value``."""
    context = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        avro = AvroSerializer(client, json.dumps(_avro_click(v2)))
        return lambda row: avro(_fields(row, v2), context)
    if fmt == "json_schema":
        schema = json.dumps(_json_click(v2))
        as_json = JSONSerializer(schema, client)
        return lambda row: as_json(_fields(row, v2), context)
    cls = click_classes(v2)
    proto = ProtobufSerializer(cls, client, {"use.deprecated.format": False})

    def to_proto(row: dict[str, Any]) -> bytes:
        present = {k: v for k, v in _fields(row, v2).items() if v is not None}
        return proto(cls(**present), context)

    return to_proto


def _fields(row: dict[str, Any], v2: bool) -> dict[str, Any]:
    keys = ["user_id", "page", "amount", "qty", "ts", *(["channel"] if v2 else [])]
    return {k: row.get(k, "web" if k == "channel" else None) for k in keys}
