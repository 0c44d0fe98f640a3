"""JSON Schema payloads (``format = "json_schema"``), decoded in bulk into Arrow in the
Kafka reader.

Confluent-framed (``flow_jobs.formats.framing``): after the schema id, a UTF-8 JSON
document, as confluent-kafka's ``JSONSerializer`` writes it. The view's columns come from
the reader schema (the subject's, an ``object`` with ``properties``); each record's
values are checked against the reader's types, so a record that does not have them
becomes a dead letter naming the property, never a wrong value. A property the reader
does not declare is ignored, one it declares and the record lacks is NULL (a record
that lacks a ``required`` one is a dead letter). The writer schema is fetched by the
record's id (an unknown id is a dead letter); JSON Schema's other constraints
(``minimum``, ``pattern`` …) are the producer's to enforce, as its serializer does.

JSON Schema to Arrow (and so to Spark): ``object`` with ``properties`` (STRUCT, in the
properties' order), ``object`` with only ``additionalProperties`` (MAP of string keys),
``array`` with ``items`` (ARRAY), ``string`` (STRING; ``format`` ``date-time``:
TIMESTAMP, an RFC 3339 instant with its offset; ``date``: DATE), ``integer`` (BIGINT; a
JSON number with a fraction is refused), ``number`` (DOUBLE), ``boolean``; a type list
or ``oneOf`` / ``anyOf`` of ``null`` and one type (that type, nullable); ``$ref`` into
the schema's own ``definitions`` / ``$defs``. Anything else (a union of two non-null
types, a free-form object) has no Spark type: ``payload_schema`` refuses it, naming the
property.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

import pyarrow as pa

from flow_jobs.formats.framing import (
    FramedDecoder,
    PayloadSchemaError,
    no_references,
    record_schema,
)
from flow_jobs.records import shown

SCHEMA_TYPE = "JSON"
TITLE = "JSON Schema"

_INT64 = (-(2**63), 2**63 - 1)


_NO_REFERENCES = "use $ref into the schema's own definitions"


def reader(text: str, references: list[tuple[str, str]], message: str | None = None) -> str:
    """The reader schema as the Kafka reader's option carries it (its JSON text)."""
    no_references(references, TITLE, _NO_REFERENCES)
    payload_schema(text)  # it maps to a Spark type
    return text


def writer(text: str, references: list[tuple[str, str]]) -> Any:
    """A registered writer schema (parsed: the record's id names a schema that exists)."""
    no_references(references, TITLE, _NO_REFERENCES)
    return json.loads(text)


def payload_schema(reader: str) -> pa.Schema:
    """The reader schema's properties as an Arrow schema (the source view's columns)."""
    return record_schema(_compile(reader)[0], "not an object with properties")


def _compile(reader: str) -> tuple[pa.DataType, Check]:
    try:
        root = json.loads(reader)
    except json.JSONDecodeError as e:
        raise PayloadSchemaError(f"not a JSON Schema (JSON): {e}") from None
    return _type(root, "the schema", root, ())


Check = Callable[[Any, str], Any]


def _type(
    schema: Any, where: str, root: dict[str, Any], refs: tuple[str, ...]
) -> tuple[pa.DataType, Check]:
    """A (sub)schema's Arrow type, and the check that turns a JSON value into the Python
    value ``pa.array`` takes for it (raising ``ValueError`` naming the property)."""
    if not isinstance(schema, dict):
        raise PayloadSchemaError(f"{where}: {schema!r} is not a schema")
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in refs:
            raise PayloadSchemaError(f"{where}: {ref} contains itself, which no Spark type holds")
        return _type(_resolve(ref, root, where), where, root, (*refs, ref))
    for key in ("oneOf", "anyOf"):
        if key in schema:
            branches = [b for b in schema[key] if b != {"type": "null"}]
            if len(branches) != 1:
                raise PayloadSchemaError(
                    f"{where}: {key} of {len(schema[key])} schemas has no Spark type (only "
                    'one schema, or one and {"type": "null"}, does)'
                )
            return _type(branches[0], where, root, refs)
    kinds = schema.get("type")
    if isinstance(kinds, list):
        named = [k for k in kinds if k != "null"]
        if len(named) != 1:
            raise PayloadSchemaError(
                f"{where}: type {kinds} has no Spark type (only one type, or one and null)"
            )
        kinds = named[0]
    if kinds == "object":
        return _object(schema, where, root, refs)
    if kinds == "array":
        if "items" not in schema:
            raise PayloadSchemaError(f"{where}: an array without items has no Spark type")
        item_type, item = _type(schema["items"], f"{where}[]", root, refs)
        return pa.list_(item_type), _nullable(lambda v, w: [item(x, w) for x in _is(v, list, w)])
    if kinds == "string":
        return _string(schema.get("format"))
    if kinds in _SCALARS:
        return _SCALARS[kinds]
    raise PayloadSchemaError(f"{where}: type {kinds!r} has no Spark type")


def _resolve(ref: str, root: dict[str, Any], where: str) -> Any:
    for prefix in ("#/definitions/", "#/$defs/"):
        if ref.startswith(prefix):
            found = root.get(prefix[2:-1], {}).get(ref[len(prefix) :])
            if found is not None:
                return found
    raise PayloadSchemaError(
        f"{where}: $ref {ref!r} is not one of the schema's own definitions / $defs"
    )


def _object(
    schema: dict[str, Any], where: str, root: dict[str, Any], refs: tuple[str, ...]
) -> tuple[pa.DataType, Check]:
    properties = schema.get("properties")
    if not properties:
        values = schema.get("additionalProperties")
        if not isinstance(values, dict):
            raise PayloadSchemaError(
                f"{where}: an object without properties or an additionalProperties schema "
                "has no Spark type"
            )
        item_type, item = _type(values, f"{where}{{}}", root, refs)

        def pairs(value: Any, at: str) -> Any:
            return [(k, item(v, f"{at}.{k}")) for k, v in _is(value, dict, at).items()]

        return pa.map_(pa.string(), item_type), _nullable(pairs)
    fields = []
    checks: list[tuple[str, Check]] = []
    for name, sub in properties.items():
        data_type, check = _type(sub, f"{where}.{name}", root, refs)
        fields.append(pa.field(name, data_type))
        checks.append((name, check))
    required = [n for n in schema.get("required", []) if n in properties]

    def record(value: Any, at: str) -> Any:
        value = _is(value, dict, at)
        for name in required:
            if name not in value:
                raise ValueError(f"{at}.{name} is required and absent")
        return {name: check(value.get(name), f"{at}.{name}") for name, check in checks}

    return pa.struct(fields), _nullable(record)


def _nullable(check: Check) -> Check:
    return lambda value, at: None if value is None else check(value, at)


def _is(value: Any, kind: type, at: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ValueError(f"{at} is {_json_kind(value)}, not {_json_kind(kind())}: {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """A value as a reason shows it: its JSON, cut short."""
    return shown(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "an integer"}.get(
        type(value), "a number"
    )


def _integer(value: Any, at: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    value = _is(value, int, at)
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{at} = {_shown(value)} is outside BIGINT's range")
    return value


def _number(value: Any, at: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{at} is {_json_kind(value)}, not a number: {_shown(value)}")
    return float(value)


_SCALARS: dict[str, tuple[pa.DataType, Check]] = {
    "integer": (pa.int64(), _nullable(_integer)),
    "number": (pa.float64(), _nullable(_number)),
    "boolean": (pa.bool_(), _nullable(lambda v, at: _is(v, bool, at))),
}


def _string(fmt: str | None) -> tuple[pa.DataType, Check]:
    if fmt == "date-time":

        def instant(value: Any, at: str) -> datetime:
            parsed = _parsed(datetime.fromisoformat, value, at, "an RFC 3339 date-time")
            if parsed.tzinfo is None:
                raise ValueError(f"{at} = {_shown(value)} has no UTC offset (RFC 3339 date-time)")
            return parsed

        return pa.timestamp("us", tz="UTC"), _nullable(instant)
    if fmt == "date":
        return pa.date32(), _nullable(
            lambda v, at: _parsed(date.fromisoformat, v, at, "a date (YYYY-MM-DD)")
        )
    return pa.string(), _nullable(lambda v, at: _is(v, str, at))


def _parsed(parse: Callable[[str], Any], value: Any, at: str, what: str) -> Any:
    try:
        return parse(_is(value, str, at))
    except ValueError as e:
        if str(e).startswith(at):
            raise
        raise ValueError(f"{at} = {_shown(value)} is not {what}") from None


class Decoder(FramedDecoder):
    """Confluent-framed JSON Schema payloads to rows of the reader schema's Arrow type."""

    title = TITLE

    def __init__(self, reader: str, writer_schema: Callable[[int], Any]) -> None:
        data_type, self._check = _compile(reader)
        super().__init__(record_schema(data_type, "not an object"), writer_schema)

    def read(self, value: bytes, start: int, writer: Any) -> dict[str, Any]:
        row = self._check(json.loads(value[start:]), "the record")
        if row is None:
            raise ValueError("the record is null, not an object")
        return row


# -- a Kafka target's records (``[target] format = "json_schema"``) -------------------


def target_schema(schema: pa.Schema, name: str) -> str:
    """The JSON Schema of a target's window rows: an object titled ``name``, every
    property nullable; TIMESTAMP as a ``date-time`` string, DATE as a ``date`` string,
    DECIMAL as a string of its digits and BINARY as base64 (as the JSON target writes
    them)."""
    root = _json_of(pa.struct(list(schema)), name)
    return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": name,
                       **root})  # fmt: skip


def _json_of(data_type: pa.DataType, where: str) -> dict[str, Any]:
    if pa.types.is_struct(data_type):
        properties = {f.name: _nullable_of(f.type, f"{where}.{f.name}") for f in data_type}
        return {"type": "object", "properties": properties}
    if pa.types.is_map(data_type) and pa.types.is_string(data_type.key_type):
        return {"type": "object",
                "additionalProperties": _nullable_of(data_type.item_type, where)}  # fmt: skip
    if pa.types.is_list(data_type):
        return {"type": "array", "items": _nullable_of(data_type.value_type, where)}
    if pa.types.is_timestamp(data_type):
        return {"type": "string", "format": "date-time"}
    if pa.types.is_date32(data_type):
        return {"type": "string", "format": "date"}
    if pa.types.is_binary(data_type):
        return {"type": "string", "contentEncoding": "base64"}
    for test, kind in _JSON_OF:
        if test(data_type):
            return {"type": kind}
    raise PayloadSchemaError(f"{where}: {data_type} has no JSON Schema type here")


def _nullable_of(data_type: pa.DataType, where: str) -> dict[str, Any]:
    inner = _json_of(data_type, where)
    return {"oneOf": [{"type": "null"}, inner]}


_JSON_OF: list[tuple[Callable[[pa.DataType], bool], str]] = [
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_integer, "integer"),
    (pa.types.is_floating, "number"),
    (lambda t: pa.types.is_string(t) or pa.types.is_decimal(t), "string"),
]


def target_serializer(client: Any, text: str, subject: str) -> Callable[[Any, Any], bytes]:
    """confluent-kafka's ``JSONSerializer`` of ``text`` under ``subject``: (row, context)
    -> a Confluent-framed record (instants, dates, decimals and bytes as their strings)."""
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    from flow_jobs.formats.json_rows import json_values

    conf = {"auto.register.schemas": False, "use.latest.version": False,
            "subject.name.strategy": lambda _ctx, _name: subject}  # fmt: skip
    serialize = JSONSerializer(text, client, conf=conf)
    return lambda row, ctx: serialize(json_values(row), ctx)
