"""Avro payloads (``format = "avro"``), decoded in bulk into Arrow in the Kafka reader.

Confluent-framed through a registry (``flow_jobs.formats.framing``), or bare bodies
written with the spec's ``avro_schema``. Each record is read with its writer schema and
resolved to the reader schema by Avro's rules (a field added with a default, a removed
field, a promoted type), with fastavro; the rows become one Arrow struct array of the
reader schema's type (``arrow_type``).

Avro to Arrow (and so to Spark, through Arrow): boolean, int (int32), long (int64),
float (float32), double (float64), string, bytes and fixed (binary), enum (string), a
union of null and one type (that type, nullable), record (struct), array (list), map
(map of string keys); logical types timestamp-millis / timestamp-micros (TIMESTAMP,
UTC, microseconds), date (DATE), decimal on bytes or fixed (DECIMAL(p, s)), uuid
(string). Other unions have no Spark type: ``arrow_type`` refuses them, naming the field.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from typing import Any
from uuid import UUID

import fastavro
import pyarrow as pa

from flow_jobs.formats.framing import (
    FramedDecoder,
    PayloadSchemaError,
    Undecodable,
    Unresolvable,
    no_references,
    record_schema,
)

#: the registry's name of the schema type, and the format's in messages
SCHEMA_TYPE = "AVRO"
TITLE = "Avro"


def reader(text: str, references: list[tuple[str, str]], message: str | None = None) -> str:
    """The reader schema as the Kafka reader's option carries it (its JSON text)."""
    no_references(references, TITLE)
    payload_schema(text)  # it maps to a Spark type
    return text


def writer(text: str, references: list[tuple[str, str]]) -> Any:
    """A registered writer schema, parsed once for every record written with it."""
    no_references(references, TITLE)
    return fastavro.parse_schema(json.loads(text))


def payload_schema(reader: str) -> pa.Schema:
    """The reader schema's fields as an Arrow schema (the source view's payload columns)."""
    try:
        return arrow_schema(json.loads(reader))
    except json.JSONDecodeError as e:
        raise PayloadSchemaError(f"not an Avro schema (JSON): {e}") from None


def arrow_type(schema: Any, where: str = "") -> pa.DataType:
    """The Arrow type of an Avro schema (JSON form: a dict, a type name or a union list)."""
    return _arrow(schema, where or "the schema", {})


def arrow_schema(schema: Any) -> pa.Schema:
    """A record schema's fields as an Arrow schema (the source view's payload columns)."""
    return record_schema(arrow_type(schema), _name(schema))


_PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}


def _arrow(schema: Any, where: str, named: dict[str, pa.DataType]) -> pa.DataType:
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise PayloadSchemaError(
                f"{where}: a union of {', '.join(_name(b) for b in schema)} has no Spark "
                "type (only a union of null and one type does)"
            )
        return _arrow(branches[0], where, named)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise PayloadSchemaError(f"{where}: unknown type {schema!r}")
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "record":
        fields = [
            pa.field(f["name"], _arrow(f["type"], f"{where}.{f['name']}", named))
            for f in schema.get("fields", [])
        ]
        out = pa.struct(fields)
        named[schema.get("name", "")] = out
        return out
    if kind == "enum":
        named[schema.get("name", "")] = pa.string()
        return pa.string()
    if kind == "fixed":
        named[schema.get("name", "")] = pa.binary()
        return pa.binary()
    if kind == "array":
        return pa.list_(_arrow(schema["items"], f"{where}[]", named))
    if kind == "map":
        return pa.map_(pa.string(), _arrow(schema["values"], f"{where}{{}}", named))
    return _arrow(kind, where, named)  # {"type": "long"} and the like


def _name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


class Decoder(FramedDecoder):
    """Avro payloads to rows of the reader schema's Arrow type (``FramedDecoder``);
    ``reader`` is its JSON text or the parsed JSON."""

    title = TITLE

    def __init__(self, reader: Any, writer_schema: Callable[[int], Any] | None = None) -> None:
        schema = json.loads(reader) if isinstance(reader, str) else reader
        super().__init__(arrow_schema(schema), writer_schema)
        self.reader = fastavro.parse_schema(schema)
        self._canonical = _canonical(schema)
        # Only a UUID needs converting: pa.array takes fastavro's other values as they are
        self._uuids = '"uuid"' in json.dumps(schema)

    def prepare(self, writer: Any) -> Any:
        """A writer schema and the reader to resolve it to: None where it is the reader
        schema itself (fastavro's resolving read is slower)."""
        return writer, None if _canonical(writer) == self._canonical else self.reader

    def read(self, value: bytes, start: int, writer: Any) -> dict[str, Any]:
        written, resolved = writer or (self.reader, None)
        body = io.BytesIO(value)
        body.seek(start)
        try:
            row = fastavro.schemaless_reader(body, written, resolved)
        except fastavro.read.SchemaResolutionError as e:
            raise Unresolvable(str(e)) from None
        except Exception as e:
            raise Undecodable(_where_it_breaks(value, start, written, e)) from None
        if body.tell() != len(value):
            raise ValueError(f"{len(value) - body.tell()} bytes left over")
        return _arrow_values(row) if self._uuids else row


def _where_it_breaks(value: bytes, start: int, written: Any, error: Exception) -> str:
    """Why a body does not decode, naming the writer's field where it breaks (``outer.inner``
    in a nested record), found by fastavro again only once a record has failed; the cause
    without the reader's object address."""
    path, what = _broken_field(value, start, written, lambda record: record)
    message = _ADDRESS.sub("", str(error)).strip() or "the body ends"
    cause = f"{type(error).__name__}: {message}"
    return f"field {'.'.join(path)} ({what}): {cause}" if path else cause


def _broken_field(
    value: bytes, start: int, record: Any, whole: Callable[[Any], Any]
) -> tuple[list[str], str]:
    """The path and type of the first field of ``record`` (``whole`` puts it back in the
    writer schema) whose prefix of the record no longer reads: an Avro body is its fields
    one after another, so a record of the first k fields reads the same bytes."""
    if not isinstance(record, dict) or record.get("type") != "record":
        return [], ""
    fields = record.get("fields", [])
    for k, field in enumerate(fields):
        if _reads(value, start, whole({**record, "fields": fields[: k + 1]})):
            continue

        def within(inner: Any, k: int = k, field: Any = field) -> Any:
            return whole({**record, "fields": [*fields[:k], {**field, "type": inner}]})

        path, what = _broken_field(value, start, field["type"], within)
        return [field["name"], *path], what or _type_name(field["type"])
    return [], ""


def _reads(value: bytes, start: int, schema: Any) -> bool:
    body = io.BytesIO(value)
    body.seek(start)
    try:
        fastavro.schemaless_reader(body, schema, None)
    except Exception:
        return False
    return True


_ADDRESS = re.compile(r" (?:from|of) <[^>]* at 0x[0-9a-f]+>")


def _type_name(schema: Any) -> str:
    """An Avro type as a reason names it (``long``, ``record Loc``, ``null | string``)."""
    if isinstance(schema, list):
        return " | ".join(_type_name(s) for s in schema)
    if isinstance(schema, dict):
        kind = str(schema.get("type"))
        logical = schema.get("logicalType")
        name = schema.get("name")
        return f"{kind} {name}" if name else f"{kind} ({logical})" if logical else kind
    return str(schema)


def _canonical(schema: Any) -> str:
    """Avro's Parsing Canonical Form of a schema (equal for equal schemas)."""
    return str(fastavro.schema.to_parsing_canonical_form(schema))


def _arrow_values(value: Any) -> Any:
    """fastavro's Python values as ``pa.array`` takes them: UUIDs as text (it takes a
    map as a dict and a naive datetime as UTC already)."""
    if isinstance(value, dict):
        return {k: _arrow_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_arrow_values(v) for v in value]
    if isinstance(value, UUID):
        return str(value)
    return value


# -- a Kafka target's records (``[target] format = "avro"``) --------------------------


def target_schema(schema: pa.Schema, name: str) -> str:
    """The Avro schema of a target's window rows: a record of ``name`` in the
    ``flow_jobs`` namespace, every field a union of null and its type (default null)."""
    names: list[str] = []
    record = _record(list(schema), name, names)
    return json.dumps({**record, "namespace": "flow_jobs"})


def _record(fields: list[pa.Field], name: str, names: list[str]) -> dict[str, Any]:
    names.append(name)
    return {
        "type": "record",
        "name": name,
        "fields": [
            {"name": f.name, "type": ["null", _avro_of(f.type, f"{name}_{f.name}", names)],
             "default": None}
            for f in fields
        ],
    }  # fmt: skip


def _avro_of(data_type: pa.DataType, name: str, names: list[str]) -> Any:
    for test, avro in _AVRO_OF:
        if test(data_type):
            return avro
    if pa.types.is_timestamp(data_type):
        return {"type": "long", "logicalType": "timestamp-micros"}
    if pa.types.is_date32(data_type):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_decimal(data_type):
        return {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision,
                "scale": data_type.scale}  # fmt: skip
    if pa.types.is_list(data_type):
        items = _avro_of(data_type.value_type, name, names)
        return {"type": "array", "items": ["null", items]}
    if pa.types.is_map(data_type) and pa.types.is_string(data_type.key_type):
        values = _avro_of(data_type.item_type, name, names)
        return {"type": "map", "values": ["null", values]}
    if pa.types.is_struct(data_type):
        return _record(list(data_type), name, names)
    raise PayloadSchemaError(f"{name}: {data_type} has no Avro type here")


_AVRO_OF: list[tuple[Callable[[pa.DataType], bool], str]] = [
    (pa.types.is_boolean, "boolean"),
    (lambda t: pa.types.is_integer(t) and t.bit_width <= 32 and pa.types.is_signed_integer(t),
     "int"),
    (pa.types.is_integer, "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_floating, "double"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "string"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "bytes"),
]  # fmt: skip


def target_serializer(client: Any, text: str, subject: str) -> Callable[[Any, Any], bytes]:
    """confluent-kafka's ``AvroSerializer`` of ``text`` under ``subject``: (row, context)
    -> a Confluent-framed record."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    conf = {"auto.register.schemas": False, "use.latest.version": False,
            "subject.name.strategy": lambda _ctx, _name: subject}  # fmt: skip
    return AvroSerializer(client, text, conf=conf)
