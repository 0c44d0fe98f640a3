"""Confluent-framed Avro payloads decoded in bulk into Arrow, in the Kafka reader.

The decoder of ``format = "avro"`` sources (the spec reference, ``[[sources]]``). A
record in Confluent's wire format is a magic byte 0, the writer schema's id in the
registry (4 bytes, big-endian), then the Avro binary body. Each record is read with its
writer schema (fetched once per id by ``writer_schema``, cached for the process) and
resolved to the reader schema by Avro's rules (a field added with a default, a removed
field, a promoted type), with fastavro; the rows become one Arrow struct array of the
reader schema's type (``arrow_type``), the same shape the JSON decoder hands the source
view.

Nothing is lost: a record that cannot be decoded gets a NULL row and a reason naming
its cause (an unknown magic byte, a schema id the registry does not have, a truncated or
undecodable body, a writer schema that does not resolve to the reader's), so the source
view dead-letters it with its bytes and position like a malformed JSON record.

Avro to Arrow (and so to Spark, through Arrow): boolean, int (int32), long (int64),
float (float32), double (float64), string, bytes and fixed (binary), enum (string), a
union of null and one type (that type, nullable), record (struct), array (list), map
(map of string keys); logical types timestamp-millis / timestamp-micros (TIMESTAMP,
UTC, microseconds), date (DATE), decimal on bytes or fixed (DECIMAL(p, s)), uuid
(string). Other unions have no Spark type: ``arrow_type`` refuses them, naming the field.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import fastavro
import pyarrow as pa

#: Confluent's wire format: magic byte 0, then the schema id (big-endian, 4 bytes).
MAGIC = 0
HEADER = struct.Struct(">bI")


class AvroSchemaError(ValueError):
    """An Avro schema with no Arrow / Spark type (the message names the field)."""


def arrow_type(schema: Any, where: str = "") -> pa.DataType:
    """The Arrow type of an Avro schema (JSON form: a dict, a type name or a union list)."""
    return _arrow(schema, where or "the schema", {})


def arrow_schema(schema: Any) -> pa.Schema:
    """A record schema's fields as an Arrow schema (the source view's payload columns)."""
    struct_type = arrow_type(schema)
    if not pa.types.is_struct(struct_type):
        raise AvroSchemaError(f"the schema is {_name(schema)}, not a record")
    return pa.schema([struct_type.field(i) for i in range(struct_type.num_fields)])


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
            raise AvroSchemaError(
                f"{where}: a union of {', '.join(_name(b) for b in schema)} has no Spark "
                "type (only a union of null and one type does)"
            )
        return _arrow(branches[0], where, named)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:
            return named[schema]
        raise AvroSchemaError(f"{where}: unknown type {schema!r}")
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


def spark_ddl(data_type: pa.DataType) -> str:
    """The Spark DDL of an Arrow type ``arrow_type`` makes (the reader's declared schema,
    where no JVM is at hand to parse a ``StructType``)."""
    if pa.types.is_struct(data_type):
        fields = (data_type.field(i) for i in range(data_type.num_fields))
        inner = ", ".join(f"`{f.name.replace('`', '``')}`: {spark_ddl(f.type)}" for f in fields)
        return f"STRUCT<{inner}>"
    if pa.types.is_map(data_type):
        return f"MAP<{spark_ddl(data_type.key_type)}, {spark_ddl(data_type.item_type)}>"
    if pa.types.is_list(data_type):
        return f"ARRAY<{spark_ddl(data_type.value_type)}>"
    if pa.types.is_decimal(data_type):
        return f"DECIMAL({data_type.precision}, {data_type.scale})"
    if pa.types.is_timestamp(data_type):
        return "TIMESTAMP"
    return _SPARK_DDL[data_type]


_SPARK_DDL = {
    pa.null(): "VOID",
    pa.bool_(): "BOOLEAN",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.binary(): "BINARY",
    pa.string(): "STRING",
    pa.date32(): "DATE",
}


def _name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("name") or schema.get("type"))
    return str(schema)


class ConfluentAvroDecoder:
    """Decodes Confluent-framed Avro payloads to rows of ``reader``'s Arrow type, plus a
    reason per row that could not be decoded (NULL where it was)."""

    def __init__(self, reader: Any, writer_schema: Callable[[int], Any]) -> None:
        self.reader = fastavro.parse_schema(reader)
        self.schema = arrow_schema(reader)
        self.struct_type = pa.struct(list(self.schema))
        self._fetch = writer_schema
        self._writers: dict[int, Any] = {}  # schema id -> parsed schema, or an error text

    def decode(self, values: list[bytes | None]) -> tuple[pa.StructArray, pa.StringArray]:
        rows: list[dict[str, Any] | None] = []
        reasons: list[str | None] = []
        for value in values:
            row, reason = self._one(value)
            rows.append(row)
            reasons.append(reason)
        return pa.array(rows, self.struct_type), pa.array(reasons, pa.string())

    def _one(self, value: bytes | None) -> tuple[dict[str, Any] | None, str | None]:
        if value is None:
            return None, "null payload (a tombstone)"
        if len(value) < HEADER.size:
            return None, f"not Confluent-framed Avro: {len(value)} bytes, no schema id"
        magic, schema_id = HEADER.unpack_from(value)
        if magic != MAGIC:
            return None, f"not Confluent-framed Avro: magic byte {magic & 0xFF}, not 0"
        writer = self._writer(schema_id)
        if isinstance(writer, str):
            return None, writer
        body = io.BytesIO(value)
        body.seek(HEADER.size)
        try:
            row = fastavro.schemaless_reader(body, writer, self.reader)
        except fastavro.read.SchemaResolutionError as e:
            return None, f"schema id {schema_id} does not resolve to the reader's: {e}"
        except Exception as e:
            return None, f"undecodable Avro body (schema id {schema_id}): {type(e).__name__}: {e}"
        if body.tell() != len(value):
            extra = len(value) - body.tell()
            return None, f"undecodable Avro body (schema id {schema_id}): {extra} bytes left over"
        return _arrow_values(row), None

    def _writer(self, schema_id: int) -> Any:
        if schema_id not in self._writers:
            try:
                self._writers[schema_id] = fastavro.parse_schema(self._fetch(schema_id))
            except LookupError as e:
                self._writers[schema_id] = f"schema id {schema_id} is not in the registry: {e}"
        return self._writers[schema_id]


def _arrow_values(value: Any) -> Any:
    """fastavro's Python values as ``pa.array`` takes them (maps as key-value pairs,
    UUIDs as text, naive datetimes as UTC)."""
    if isinstance(value, dict):
        return {k: _arrow_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_arrow_values(v) for v in value]
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if type(value).__name__ == "UUID":
        return str(value)
    return value
