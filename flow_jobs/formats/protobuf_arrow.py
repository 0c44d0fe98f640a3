"""A Protobuf message as Arrow: each field's Arrow type, and a parsed message's row.

Protobuf to Arrow (and so to Spark): double, float, int32 / sint32 / sfixed32 (INT),
int64 / sint64 / sfixed64 (BIGINT), uint32 / fixed32 (BIGINT), uint64 / fixed64
(DECIMAL(20, 0): no Spark integer holds it), bool, string, bytes (BINARY), enum (its
value's name; an unknown number as its digits), message (STRUCT), repeated (ARRAY), map
(MAP), ``google.protobuf.Timestamp`` (TIMESTAMP), the wrapper types
(``google.protobuf.Int64Value`` …: their value, NULL when unset). A field without
presence (a proto3 scalar) holds its default when unset, as Protobuf reads it; a field
with presence (a message, ``optional``, a oneof member) is NULL when unset. A recursive
message has no Spark type: ``arrow_of`` refuses it, naming the field.

This is the one mapping between the two type systems, used for the source view's payload
schema (``protobuf.payload_schema``) and for every record the reader decodes
(``protobuf.Decoder``); it is apart from ``flow_jobs.formats.protobuf`` (the
registry's descriptors, the framing, a Kafka target's schema) so that the rules of the
mapping read in one place, without the rest of the format around them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from flow_jobs.formats.framing import PayloadSchemaError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WRAPPERS = {
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
_SCALARS: dict[int, pa.DataType] = {
    FieldDescriptor.TYPE_DOUBLE: pa.float64(),
    FieldDescriptor.TYPE_FLOAT: pa.float32(),
    FieldDescriptor.TYPE_INT32: pa.int32(),
    FieldDescriptor.TYPE_SINT32: pa.int32(),
    FieldDescriptor.TYPE_SFIXED32: pa.int32(),
    FieldDescriptor.TYPE_INT64: pa.int64(),
    FieldDescriptor.TYPE_SINT64: pa.int64(),
    FieldDescriptor.TYPE_SFIXED64: pa.int64(),
    FieldDescriptor.TYPE_UINT32: pa.int64(),
    FieldDescriptor.TYPE_FIXED32: pa.int64(),
    FieldDescriptor.TYPE_UINT64: pa.decimal128(20, 0),
    FieldDescriptor.TYPE_FIXED64: pa.decimal128(20, 0),
    FieldDescriptor.TYPE_BOOL: pa.bool_(),
    FieldDescriptor.TYPE_STRING: pa.string(),
    FieldDescriptor.TYPE_BYTES: pa.binary(),
}


Convert = Callable[[Any], Any]


def arrow_of(descriptor: Descriptor) -> tuple[pa.DataType, Convert]:
    """The reader message's Arrow struct type and the function from a parsed message to
    its row (a ``PayloadSchemaError`` for a message no Spark type holds)."""
    return _message(descriptor, descriptor.name, ())


def _message(
    descriptor: Descriptor, where: str, within: tuple[str, ...]
) -> tuple[pa.DataType, Convert]:
    """A message's Arrow struct type and the function from a parsed message to its row."""
    if descriptor.full_name in within:
        raise PayloadSchemaError(
            f"{where}: {descriptor.full_name} contains itself, which no Spark type holds"
        )
    within = (*within, descriptor.full_name)
    fields: list[pa.Field] = []
    readers: list[tuple[str, Convert]] = []
    for field in descriptor.fields:
        data_type, convert = _field(field, f"{where}.{field.name}", within)
        fields.append(pa.field(field.name, data_type))
        readers.append((field.name, convert))

    def row(message: Any) -> dict[str, Any]:
        return {name: convert(message) for name, convert in readers}

    return pa.struct(fields), row


def _field(
    field: FieldDescriptor, where: str, within: tuple[str, ...]
) -> tuple[pa.DataType, Convert]:
    name = field.name
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        key_type, key = _value(entry.fields_by_name["key"], where, within)
        item_type, item = _value(entry.fields_by_name["value"], where, within)
        pairs: Convert = lambda m: [(key(k), item(v)) for k, v in getattr(m, name).items()]  # noqa: E731
        return pa.map_(key_type, item_type), pairs
    data_type, value = _value(field, where, within)
    if field.is_repeated:
        return pa.list_(data_type), lambda m: [value(v) for v in getattr(m, name)]
    if field.has_presence:
        return data_type, lambda m: value(getattr(m, name)) if m.HasField(name) else None
    return data_type, lambda m: value(getattr(m, name))


def _same(value: Any) -> Any:
    return value


def _value(
    field: FieldDescriptor, where: str, within: tuple[str, ...]
) -> tuple[pa.DataType, Convert]:
    """One value's Arrow type and conversion (a repeated field's element too)."""
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}
        return pa.string(), lambda v: names.get(v, str(v))
    message = field.message_type
    if message is None:
        return _SCALARS[field.type], _same
    if message.full_name == "google.protobuf.Timestamp":
        return pa.timestamp("us", tz="UTC"), _instant
    if message.full_name in _WRAPPERS:
        inner, _ = _value(message.fields_by_name["value"], where, within)
        return inner, lambda m: m.value
    return _message(message, where, within)


def _instant(timestamp: Any) -> datetime:
    return _EPOCH + timedelta(seconds=timestamp.seconds, microseconds=timestamp.nanos // 1000)
