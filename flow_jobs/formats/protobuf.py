"""Protobuf payloads (``format = "protobuf"``), decoded in bulk into Arrow in the Kafka
reader.

Confluent-framed (``flow_jobs.formats.framing``): after the schema id come the
message indexes (zigzag varints: their count, then the path of the message in the
writer's file; a single 0 for the first message). The schemas travel in the registry's
serialized form (a base64 ``FileDescriptorProto``, what confluent-kafka's
``ProtobufSerializer`` registers and what a registry answers for ``format=serialized``),
with their references (imported files) resolved from the registry too.

The reader message is the subject's ``message`` (default: its schema's first top-level
message); a record must be of that message (by full name) in its writer's file, and is
parsed with the reader's descriptor: Protobuf's own evolution rules (fields matched by
number, unknown fields ignored, a missing field its default).

Each Protobuf type's Arrow type (and so Spark's), and the conversion of a parsed message
to a row: ``flow_jobs.formats.protobuf_arrow``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from google.protobuf import (  # noqa: F401 - fill the default pool
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.descriptor import Descriptor, FileDescriptor

from flow_jobs.formats.framing import (
    FramedDecoder,
    PayloadSchemaError,
    Undecodable,
    Unresolvable,
    record_schema,
)
from flow_jobs.formats.protobuf_arrow import arrow_of
from flow_jobs.formats.protobuf_wire import where_it_breaks

SCHEMA_TYPE = "PROTOBUF"
TITLE = "Protobuf"
#: what the registry is asked for: the base64 ``FileDescriptorProto``, not ``.proto`` text
FETCH_FORMAT = "serialized"


def file_proto(name: str, text: str) -> descriptor_pb2.FileDescriptorProto:
    """A registered schema in its serialized form (base64) as a ``FileDescriptorProto``."""
    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except Exception:
        raise PayloadSchemaError(
            "the registry answered a schema that is not a serialized FileDescriptorProto "
            "(a registry must answer format=serialized with base64)"
        ) from None
    if not proto.name:
        proto.name = name
    return proto


def reader(text: str, references: list[tuple[str, str]], message: str | None) -> str:
    """The reader schema (the subject's, with its references: name and serialized text,
    imports first) as the Kafka reader's option carries it: every file, and the reader
    message's full name (``message``, default the subject's first top-level message)."""
    files = [*(file_proto(n, t) for n, t in references), file_proto("subject.proto", text)]
    main = files[-1]
    if message is None:
        if not main.message_type:
            raise PayloadSchemaError(f"{main.name} declares no message")
        first = main.message_type[0].name
        message = f"{main.package}.{first}" if main.package else first
    encoded = [base64.b64encode(f.SerializeToString()).decode() for f in files]
    spec = json.dumps({"files": encoded, "message": message})
    payload_schema(spec)  # the message is there, its imports resolve, it has a Spark type
    return spec


def writer(text: str, references: list[tuple[str, str]]) -> FileDescriptor:
    """A registered writer schema as the decoder takes it: its file, imports resolved."""
    files = [*(file_proto(n, t) for n, t in references), file_proto("writer.proto", text)]
    return pool_of(files).FindFileByName(files[-1].name)


def pool_of(files: list[descriptor_pb2.FileDescriptorProto]) -> descriptor_pool.DescriptorPool:
    """A descriptor pool holding ``files`` (imports before importers) and the well-known
    types they import."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    given = {f.name for f in files}

    def add(proto: descriptor_pb2.FileDescriptorProto) -> None:
        for dependency in proto.dependency:
            if dependency not in added and dependency not in given:
                try:
                    known = descriptor_pool.Default().FindFileByName(dependency)
                except KeyError:
                    raise PayloadSchemaError(
                        f"{proto.name} imports {dependency}, which neither the registry's "
                        "references nor the well-known types hold"
                    ) from None
                add(_proto_of(known))
        if proto.name not in added:
            pool.Add(proto)
            added.add(proto.name)

    for proto in files:
        add(proto)
    return pool


def _proto_of(file: FileDescriptor) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


def reader_message(text: str) -> Descriptor:
    """The reader message's descriptor, from ``reader_text``'s form."""
    spec = json.loads(text)
    files = [file_proto("", f) for f in spec["files"]]
    try:
        return pool_of(files).FindMessageTypeByName(spec["message"])
    except KeyError:
        raise PayloadSchemaError(f"the schema declares no message {spec['message']!r}") from None


def payload_schema(reader: str) -> pa.Schema:
    """The reader message's fields as an Arrow schema (the source view's payload columns)."""
    descriptor = reader_message(reader)
    arrow, _ = arrow_of(descriptor)
    return record_schema(arrow, descriptor.full_name)


def message_at(file: FileDescriptor, indexes: list[int]) -> Descriptor:
    """The message at ``indexes`` (Confluent's path of message indexes: positions in
    declaration order) in ``file``."""
    declared = _proto_of(file).message_type  # the file's own order, not a mapping's
    candidates = [file.message_types_by_name[m.name] for m in declared]
    found: Descriptor | None = None
    for index in indexes:
        if not 0 <= index < len(candidates):
            raise ValueError(f"message index {index} is out of range in {file.name}")
        found = candidates[index]
        candidates = list(found.nested_types)
    if found is None:
        raise ValueError("no message index")
    return found


def read_indexes(value: bytes, start: int) -> tuple[list[int], int]:
    """Confluent's message indexes at ``start``: the path and where the body begins."""
    count, at = _zigzag(value, start)
    if count == 0:
        return [0], at
    if not 0 < count <= 100:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, at = _zigzag(value, at)
        indexes.append(index)
    return indexes, at


def _zigzag(value: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(value):
            raise ValueError("truncated message indexes")
        byte = value[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
        if shift > 63:
            raise ValueError("a message index longer than a varint")


class Decoder(FramedDecoder):
    """Confluent-framed Protobuf payloads to rows of the reader message's Arrow type."""

    title = TITLE

    def __init__(self, reader: str, writer_schema: Callable[[int], Any]) -> None:
        descriptor = reader_message(reader)
        arrow, self._row = arrow_of(descriptor)
        super().__init__(record_schema(arrow, descriptor.full_name), writer_schema)
        self.full_name = descriptor.full_name
        self.descriptor = descriptor
        self._parse = message_factory.GetMessageClass(descriptor).FromString

    def prepare(self, writer: Any) -> Any:
        """A writer's file, and the full names of its messages by index path (filled as
        records name them)."""
        return writer, {}

    def read(self, value: bytes, start: int, writer: Any) -> dict[str, Any]:
        indexes, start = read_indexes(value, start)
        file, names = writer
        path = tuple(indexes)
        if path not in names:
            names[path] = message_at(file, indexes).full_name
        written = names[path]
        if written != self.full_name:
            raise Unresolvable(f"its record is a {written}, the reader reads {self.full_name}")
        try:
            message = self._parse(value[start:])
        except Exception as e:  # protobuf names no field: the wire format does
            where = where_it_breaks(value[start:], self.descriptor)
            if where is None:
                raise
            raise Undecodable(f"{where} ({type(e).__name__})") from None
        return self._row(message)


# -- a Kafka target's records (``[target] format = "protobuf"``) ----------------------

_FIELD = descriptor_pb2.FieldDescriptorProto
_TARGET_SCALARS: list[tuple[Callable[[pa.DataType], bool], int]] = [
    (pa.types.is_boolean, _FIELD.TYPE_BOOL),
    (lambda t: pa.types.is_signed_integer(t) and t.bit_width <= 32, _FIELD.TYPE_INT32),
    (pa.types.is_integer, _FIELD.TYPE_INT64),
    (pa.types.is_float32, _FIELD.TYPE_FLOAT),
    (pa.types.is_floating, _FIELD.TYPE_DOUBLE),
    (lambda t: pa.types.is_string(t) or pa.types.is_decimal(t) or pa.types.is_date32(t),
     _FIELD.TYPE_STRING),
    (pa.types.is_binary, _FIELD.TYPE_BYTES),
]  # fmt: skip


def target_schema(schema: pa.Schema, name: str) -> str:
    """The Protobuf schema of a target's window rows (serialized, base64): message
    ``name`` in package ``flow_jobs``, proto2 so every field has presence (NULL: unset),
    fields numbered in column order; TIMESTAMP as ``google.protobuf.Timestamp``, DATE as
    its ISO text, DECIMAL as the text of its digits, a STRUCT as a nested message."""
    message = _message_of(list(schema), name)
    file = descriptor_pb2.FileDescriptorProto(
        name=f"flow_jobs/{name}.proto", package="flow_jobs", syntax="proto2",
        dependency=["google/protobuf/timestamp.proto"], message_type=[message],
    )  # fmt: skip
    normal = _proto_of(pool_of([file]).FindFileByName(file.name))  # as a pool gives it back
    return base64.b64encode(normal.SerializeToString()).decode()


def _message_of(fields: list[pa.Field], name: str) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    for number, f in enumerate(fields, start=1):
        field = message.field.add(name=f.name, number=number, label=_FIELD.LABEL_OPTIONAL)
        data_type = f.type
        if pa.types.is_list(data_type):
            field.label = _FIELD.LABEL_REPEATED
            data_type = data_type.value_type
        if pa.types.is_timestamp(data_type):
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, ".google.protobuf.Timestamp"
        elif pa.types.is_struct(data_type) or pa.types.is_map(data_type):
            nested = _nested(message, f.name, data_type)
            field.type, field.type_name = _FIELD.TYPE_MESSAGE, f".flow_jobs.{name}.{nested}"
            if pa.types.is_map(data_type):
                field.label = _FIELD.LABEL_REPEATED
        else:
            field.type = _scalar_of(data_type, f"{name}.{f.name}")
    return message


def _nested(message: descriptor_pb2.DescriptorProto, column: str, data_type: pa.DataType) -> str:
    nested_name = "".join(w[:1].upper() + w[1:] for w in column.split("_")) or "Nested"
    if pa.types.is_map(data_type):
        nested_name += "Entry"
        key, value = pa.field("key", data_type.key_type), pa.field("value", data_type.item_type)
        entry = _message_of([key, value], nested_name)
        entry.options.map_entry = True
        message.nested_type.append(entry)
    else:
        inner = _message_of(list(data_type), nested_name)
        message.nested_type.append(inner)
    return nested_name


def _scalar_of(data_type: pa.DataType, where: str) -> int:
    for test, kind in _TARGET_SCALARS:
        if test(data_type):
            return kind
    raise PayloadSchemaError(f"{where}: {data_type} has no Protobuf type here")


def target_serializer(client: Any, text: str, subject: str) -> Callable[[Any, Any], bytes]:
    """confluent-kafka's ``ProtobufSerializer`` of the message ``text`` declares, under
    ``subject``: (row, context) -> a Confluent-framed record."""
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    proto = file_proto("", text)
    file = pool_of([proto]).FindFileByName(proto.name)
    cls = message_factory.GetMessageClass(file.message_types_by_name[proto.message_type[0].name])
    conf = {"auto.register.schemas": False, "use.latest.version": False,
            "use.deprecated.format": False,
            "subject.name.strategy": lambda _ctx, _name: subject}  # fmt: skip
    serialize = ProtobufSerializer(cls, client, conf=conf)

    def row_to_record(row: dict[str, Any], ctx: Any) -> bytes:
        message = cls()
        _fill(message, row)
        return serialize(message, ctx)

    return row_to_record


def _fill(message: Any, row: dict[str, Any]) -> None:
    for field in message.DESCRIPTOR.fields:
        value = row.get(field.name)
        if value is None:
            continue
        target = getattr(message, field.name)
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            for k, v in value.items():
                if v is not None:
                    _set_map(target, entry, k, v)
        elif field.is_repeated:
            for item in value:
                if item is None:
                    raise ValueError(f"{field.name} holds a NULL, which a repeated field cannot")
                if entry is None:
                    target.append(_scalar(item))
                else:
                    _fill_one(target.add(), item)
        elif entry is not None:
            _fill_one(target, value)
        else:
            setattr(message, field.name, _scalar(value))


def _set_map(target: Any, entry: Descriptor, key: Any, value: Any) -> None:
    if entry.fields_by_name["value"].message_type is None:
        target[key] = _scalar(value)
    else:
        _fill_one(target[key], value)


def _fill_one(message: Any, value: Any) -> None:
    if isinstance(value, datetime):
        message.FromDatetime(value)
    else:
        _fill(message, value)


def _scalar(value: Any) -> Any:
    if isinstance(value, Decimal | date) and not isinstance(value, datetime):
        return str(value) if isinstance(value, Decimal) else value.isoformat()
    return value
