"""Confluent's wire format, shared by the registry formats, and the bulk decode loop.

A record in Confluent's wire format is a magic byte 0, the writer schema's id in the
registry (4 bytes, big-endian), then the body (for Protobuf, the message indexes first).
``FramedDecoder`` reads a list of payloads into one Arrow struct array of the reader's
type, the same shape the JSON decoder hands the source view, plus a reason per record it
could not decode (NULL where it could): a tombstone, an unknown magic byte, a schema id
the registry does not have, a truncated or undecodable body, a writer schema that does
not resolve to the reader's. Nothing is dropped: the source view dead-letters each
failed record with its bytes and position (the spec reference, ``[[sources]]``).

Each writer schema is fetched once per id and process, and the answer kept (an id the
registry does not have too, so a topic full of them asks once); a registry that cannot
be reached raises, failing the read (retried by Spark), never dropping the record.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import pyarrow as pa

#: Confluent's wire format: magic byte 0, then the schema id (big-endian, 4 bytes).
MAGIC = 0
HEADER = struct.Struct(">bI")


class PayloadSchemaError(ValueError):
    """A schema with no Arrow / Spark type (the message names the field)."""


class Unresolvable(ValueError):
    """The writer schema of a record does not resolve to the reader's (the message says why)."""


class Undecodable(ValueError):
    """A body that cannot be decoded, the message naming where (a format's ``read`` looks
    for the field once its decoder failed)."""


class FramedDecoder(ABC):
    """Decodes payloads to rows of ``schema`` (an Arrow schema), plus a reason per row that
    could not be decoded. With ``writer_schema`` (a schema id -> the format's parsed writer
    schema, ``LookupError`` for an id the registry does not have), payloads are
    Confluent-framed; without, each is a bare body written with the reader schema."""

    #: the format's name in a reason ("Avro", "Protobuf", "JSON Schema")
    title: str

    def __init__(self, schema: pa.Schema, writer_schema: Callable[[int], Any] | None) -> None:
        self.schema = schema
        self.struct_type = pa.struct(list(schema))
        self._fetch = writer_schema
        self._writers: dict[int, Any] = {}  # schema id -> parsed writer, or an error text

    def decode(self, values: list[bytes | None]) -> tuple[pa.StructArray, pa.StringArray]:
        # One tight loop (the reader's hot path: a call per record costs as much as the
        # body's decode for small records).
        rows: list[dict[str, Any] | None] = []
        reasons: list[str | None] = []
        framed = self._fetch is not None
        writers, unpack, read = self._writers, HEADER.unpack_from, self.read
        for value in values:
            row = reason = None
            if value is None:
                reason = "null payload (a tombstone)"
            elif not framed:
                row, reason = self._body(read, value, 0, None, None)
            elif len(value) < HEADER.size:
                reason = f"not Confluent-framed {self.title}: {len(value)} bytes, no schema id"
            else:
                magic, schema_id = unpack(value)
                if magic != MAGIC:  # not framed: its "id" is not one to ask the registry for
                    reason = f"not Confluent-framed {self.title}: magic byte {magic & 0xFF}, not 0"
                    writer = None
                else:
                    writer = writers[schema_id] if schema_id in writers else self._writer(schema_id)
                if isinstance(writer, str):
                    reason = writer
                elif writer is not None:
                    row, reason = self._body(read, value, HEADER.size, writer, schema_id)
            rows.append(row)
            reasons.append(reason)
        return pa.array(rows, self.struct_type), pa.array(reasons, pa.string())

    @abstractmethod
    def read(self, value: bytes, start: int, writer: Any) -> dict[str, Any]:
        """The body of ``value`` from ``start``, as a row of Python values ``pa.array``
        takes for ``struct_type`` (``writer``: what ``prepare`` made of the writer
        schema, None unframed). Raises ``Unresolvable``, or any error for an undecodable
        body."""

    def prepare(self, writer: Any) -> Any:
        """What ``read`` takes for a writer schema, made once per schema id."""
        return writer

    def _body(
        self,
        read: Callable[[bytes, int, Any], dict[str, Any]],
        value: bytes,
        start: int,
        writer: Any,
        schema_id: int | None,
    ) -> tuple[dict[str, Any] | None, str | None]:
        try:
            return read(value, start, writer), None
        except Unresolvable as e:
            return None, f"schema id {schema_id} does not resolve to the reader's: {e}"
        except Exception as e:
            which = "" if schema_id is None else f" (schema id {schema_id})"
            why = str(e) if isinstance(e, Undecodable) else f"{type(e).__name__}: {e}"
            return None, f"undecodable {self.title} body{which}: {why}"

    def _writer(self, schema_id: int) -> Any:
        assert self._fetch is not None
        try:
            self._writers[schema_id] = self.prepare(self._fetch(schema_id))
        except LookupError as e:
            self._writers[schema_id] = f"schema id {schema_id} is not in the registry: {e}"
        except PayloadSchemaError as e:
            self._writers[schema_id] = f"schema id {schema_id} cannot be read: {e}"
        return self._writers[schema_id]


def no_references(references: list[tuple[str, str]], title: str, hint: str = "") -> None:
    """Refuses a schema that references other subjects (not read for ``title``)."""
    if references:
        names = ", ".join(n for n, _ in references)
        more = f"; {hint}" if hint else ""
        raise PayloadSchemaError(
            f"the schema references {names}: {title} references to other subjects are not "
            f"read{more}"
        )


def spark_ddl(data_type: pa.DataType) -> str:
    """The Spark DDL of an Arrow type a format's schema or the reader's partial
    aggregates map to (the reader's declared schema, where no JVM is at hand to parse a
    ``StructType``)."""
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
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.binary(): "BINARY",
    pa.string(): "STRING",
    pa.date32(): "DATE",
}


def record_schema(struct_type: pa.DataType, what: str) -> pa.Schema:
    """A struct type's fields as an Arrow schema (the source view's payload columns)."""
    if not pa.types.is_struct(struct_type):
        raise PayloadSchemaError(f"the schema is {what}, not a record")
    return pa.schema([struct_type.field(i) for i in range(struct_type.num_fields)])


def python_rows(rows: pa.Table) -> list[dict[str, Any]]:
    """A table's rows as Python values with maps as dicts (Arrow gives a map as a list of
    key-value pairs), what a serializer of a registry format takes."""
    convert = [(f.name, _python_value(f.type)) for f in rows.schema]
    return [{n: c(row[n]) for n, c in convert} for row in rows.to_pylist()]


def _python_value(data_type: pa.DataType) -> Callable[[Any], Any]:
    if pa.types.is_map(data_type):
        item = _python_value(data_type.item_type)
        return lambda v: None if v is None else {k: item(x) for k, x in v}
    if pa.types.is_list(data_type):
        element = _python_value(data_type.value_type)
        return lambda v: None if v is None else [element(x) for x in v]
    if pa.types.is_struct(data_type):
        fields = [(f.name, _python_value(f.type)) for f in data_type]
        return lambda v: None if v is None else {n: c(v[n]) for n, c in fields}
    return lambda v: v


def record_name(pipeline: str) -> str:
    """A schema's record / message name for a pipeline's window rows ("clicks-per-minute"
    -> "ClicksPerMinute"), an identifier in Avro and Protobuf."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in pipeline).split() if w]
    name = "".join(w[:1].upper() + w[1:] for w in words) or "WindowRow"
    return name if name[0].isalpha() else f"Row{name}"
