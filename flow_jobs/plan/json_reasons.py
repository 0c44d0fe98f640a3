"""Why a JSON record is a dead letter, in words that name what failed: the field, the type
the schema declares and the value the record holds, cut short.

``from_json`` (PERMISSIVE) marks a record it cannot decode as corrupt and keeps what it
could decode of the rest: a root field of the wrong type is NULL and every other field
keeps its value; in a nested STRUCT only the failing field is NULL; an ARRAY or MAP of
scalars is NULL whole, one of structs keeps its elements with the failing field NULL
(``tests/test_spark_json_contracts.py`` pins all of it). So the first field present in
the payload but NULL once decoded is the one that failed; a container of structs is
decoded alone to see whether it fails. What each field held comes from two more parses
of the payload: every field as STRING (its JSON text as ``from_json`` reads it: the same
quotes, ``NaN`` and duplicate keys) and as VARIANT (whether it is a string, to show it
quoted). They run only for a record already marked corrupt (a CASE branch), each once
per record (``_let``), never for the good rows. The Arrow decoder in the reader
leaves every record it rejects to ``from_json`` (``flow_jobs.kafka.json_decode``), so every
JSON reason is decided here.

The reasons, in the order they are tried: ``malformed JSON: not parseable: <text>``,
``malformed JSON: not an object, got <value>``, ``field <name>: expected <TYPE>, got
<value>`` (a nested field as ``outer.inner``; an integer too big for its type adds
``(out of range)``), and, where no field explains it (a key given twice, its last value
fitting), ``malformed JSON: not an object matching sources[i].schema: <text>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    VariantType,
)

from flow_jobs.dead_letters import Reason
from flow_jobs.kafka.schema import CORRUPT_RECORD
from flow_jobs.records import ELLIPSIS, SHOWN_CHARS

NULL_PAYLOAD = "null payload (a tombstone)"

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_CORRUPT_OPTIONS = {"columnNameOfCorruptRecord": CORRUPT_RECORD}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def type_name(data_type: DataType) -> str:
    """A Spark type as the schema's DDL spells it (``DOUBLE``, ``ARRAY<BIGINT>``)."""
    if isinstance(data_type, StructType):
        fields = ", ".join(f"{_quoted(f.name)}: {type_name(f.dataType)}" for f in data_type.fields)
        return f"STRUCT<{fields}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{type_name(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{type_name(data_type.keyType)}, {type_name(data_type.valueType)}>"
    return data_type.simpleString().upper()


def shown(text: Column) -> Column:
    """A value's text as a reason shows it: one line, at most ``SHOWN_CHARS`` characters
    (``flow_jobs.records.shown`` in Python); ``text`` appears once in the expression."""
    one_line = F.trim(F.regexp_replace(text, r"\p{Cntrl}+", " "))
    longer = rf"(?s)^(.{{{SHOWN_CHARS - 1}}}).{{2,}}$"  # the first 39 of 41 or more
    return F.regexp_replace(one_line, longer, f"$1{ELLIPSIS}")


def decode_reasons(value: Column, decoded: Column, schema: StructType, index: int) -> list[Reason]:
    """Why a record of a JSON source is not decoded: ``value`` its payload (binary),
    ``decoded`` ``from_json``'s struct of it (``schema`` and the corrupt-record column)."""
    return [
        (value.isNull(), NULL_PAYLOAD),
        (F.length(value) == 0, "empty payload"),
        # from_json gives NULL, not a corrupt record, for a payload of blanks alone
        (decoded.isNull(), "malformed JSON: not parseable: only blanks"),
        (
            decoded.getField(CORRUPT_RECORD).isNotNull(),
            malformed_reason(value, decoded, schema, index),
        ),
    ]


def missing_field_reason(value: Column, name: str, what: str) -> Column:
    """``<what>: <name> is absent`` or ``<what>: <name> is null``, as the JSON payload
    ``value`` has the field (evaluated only where its decoded value is NULL)."""
    one = StructType([StructField(name, VariantType())])
    field = F.from_json(value.cast("string"), one).getField(name)  # SQL NULL: absent
    return F.when(field.isNull(), F.lit(f"{what}: {name} is absent")).otherwise(
        F.lit(f"{what}: {name} is null")
    )


def malformed_reason(value: Column, decoded: Column, schema: StructType, index: int) -> Column:
    """The reason of a record ``from_json`` marked corrupt: ``value`` its payload (binary),
    ``decoded`` what ``from_json`` made of it with ``schema``."""
    text = value.cast("string")
    strings = StructType([*_as(schema, StringType()), StructField(CORRUPT_RECORD, StringType())])
    unexplained = f"malformed JSON: not an object matching sources[{index}].schema: "

    def reason(parsed: Column) -> Column:
        as_text, as_variant = parsed["text"], parsed["variant"]
        shape = F.when(  # not an object at all: STRING fields take any value
            F.from_json(text, VariantType()).isNull(),  # NULL where the text is not JSON
            F.concat(F.lit("malformed JSON: not parseable: "), shown(text)),
        ).otherwise(F.concat(F.lit("malformed JSON: not an object, got "), shown(text)))
        failure = _let(_first_failure(as_text, as_variant, decoded, schema, ""), _worded)
        return F.when(as_text.getField(CORRUPT_RECORD).isNotNull(), shape).otherwise(
            F.coalesce(failure, F.concat(F.lit(unexplained), shown(text)))
        )

    parses = F.struct(
        F.from_json(text, strings, _CORRUPT_OPTIONS).alias("text"),
        F.from_json(text, StructType(_as(schema, VariantType()))).alias("variant"),
    )
    return _let(parses, reason)


def _first_failure(
    as_text: Column, as_variant: Column, decoded: Column, schema: StructType, prefix: str
) -> Column:
    """The first field of one level of the payload that failed (a struct's own fields
    right after it), or NULL, as a struct ``_worded`` words: ``as_text`` / ``as_variant``
    the level's values as JSON text / VARIANT, ``decoded`` what ``from_json`` made of
    them. Each field adds a condition and its constants, no more: the plan's optimizer
    goes through all of it every micro-batch."""
    failures = []
    for field in schema.fields:
        if isinstance(field.dataType, StringType):
            continue  # a STRING takes any JSON value (as its text): it never fails
        raw = as_text.getField(field.name)
        got = decoded.getField(field.name)
        path = f"{prefix}{_quoted(field.name)}"
        failed = got.isNull()
        if isinstance(field.dataType, (ArrayType, MapType)) and _holds_struct(field.dataType):
            # Its elements' structs fail field by field, so the container is not NULL:
            # decoded alone, the field's value says whether it fails.
            alone = F.concat(F.lit("{" + json.dumps(field.name) + ":"), raw, F.lit("}"))
            schema_alone = StructType([field, StructField(CORRUPT_RECORD, StringType())])
            corrupt = F.from_json(alone, schema_alone, _CORRUPT_OPTIONS).getField(CORRUPT_RECORD)
            failed = failed | corrupt.isNotNull()
        failure = F.struct(
            F.lit(f"field {path}: expected {type_name(field.dataType)}, got ").alias("label"),
            raw.alias("text"),
            as_variant.getField(field.name).alias("variant"),
            F.lit(isinstance(field.dataType, _INTEGRAL)).alias("integral"),
        )
        failures.append(F.when(raw.isNotNull() & failed, failure))
        if isinstance(field.dataType, StructType):  # from_json kept the fields that fit
            inner = field.dataType
            parses = F.struct(
                F.from_json(raw, StructType(_as(inner, StringType()))).alias("text"),
                F.from_json(raw, StructType(_as(inner, VariantType()))).alias("variant"),
            )
            nested = _let(parses, _within(got, inner, f"{path}."))
            failures.append(F.when(raw.isNotNull() & got.isNotNull(), nested))
    if not failures:
        return F.lit(None).cast(_FAILURE)
    return F.coalesce(*failures) if len(failures) > 1 else failures[0]


def _within(decoded: Column, schema: StructType, prefix: str) -> Callable[[Column], Column]:
    """``_first_failure`` of a nested struct, for ``_let`` (a lambda of one argument)."""
    return lambda parsed: _first_failure(parsed["text"], parsed["variant"], decoded, schema, prefix)


#: what ``_first_failure`` finds: the reason's words up to the value, the value's JSON
#: text and VARIANT, whether the field is an integer
_FAILURE = StructType(
    [
        StructField("label", StringType()),
        StructField("text", StringType()),
        StructField("variant", VariantType()),
        StructField("integral", BooleanType()),
    ]
)


def _worded(failure: Column) -> Column:
    """``field <path>: expected <TYPE>, got <value>`` (NULL for no failure): a string
    quoted as JSON writes it, any other value as ``from_json`` read its text; an integer
    too big for its type says so."""
    value = failure["variant"]
    is_string = F.coalesce(F.schema_of_variant(value) == F.lit("STRING"), F.lit(False))
    got = F.when(is_string, F.to_json(value)).otherwise(failure["text"])
    # an integer token fails an integer type only by its size
    too_big = failure["integral"] & ~is_string & failure["text"].rlike(r"^-?[0-9]+$")
    hint = F.when(too_big, F.lit(" (out of range)")).otherwise(F.lit(""))
    return F.concat(failure["label"], shown(got), hint)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """``body(value)`` with ``value`` evaluated once, however often the body refers to it
    (an expression repeated in a CASE is evaluated again in each place): the argument
    of a lambda, since Spark has no let."""
    return F.transform(F.array(value), body)[0]


def _as(schema: StructType, data_type: DataType) -> list[StructField]:
    return [StructField(f.name, data_type) for f in schema.fields]


def _holds_struct(data_type: DataType) -> bool:
    if isinstance(data_type, StructType):
        return True
    if isinstance(data_type, ArrayType):
        return _holds_struct(data_type.elementType)
    if isinstance(data_type, MapType):
        return _holds_struct(data_type.keyType) or _holds_struct(data_type.valueType)
    return False


def _quoted(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else f"`{name.replace('`', '``')}`"
