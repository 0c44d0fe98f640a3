"""Spark's ``from_json`` as flow-jobs relies on it, pinned against the Spark we ship.

Like ``tests/test_spark_contracts.py``: each test states behaviour of Spark, not of
flow-jobs, and names the code that depends on it, so an upgrade that changes it fails
here, where the cause is plain. The dead-letter reasons of a JSON source
(``flow_jobs.plan.json_reasons``) read which field failed from ``from_json``'s partial
result of a corrupt record, and the value from two more parses of the payload (every
field as STRING, and as VARIANT). The session is the tests' (``spark.sql.ansi.enabled``
false, as every pipeline runs).
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType, VariantType

pytestmark = pytest.mark.spark

_C = "_corrupt"
_SCHEMA = (
    "temp DOUBLE, ts BIGINT, name STRING, loc STRUCT<lat: DOUBLE, lon: DOUBLE>, "
    "tags ARRAY<BIGINT>, m MAP<STRING, BIGINT>, pts ARRAY<STRUCT<x: INT, y: INT>>"
)


def _decode(spark: SparkSession, texts: list[str], schema: str | DataType) -> list[Any]:
    """``from_json`` of each text as a pipeline's source decodes it (PERMISSIVE, with a
    corrupt-record column where the schema is a struct)."""
    if isinstance(schema, str):
        schema = f"{schema}, {_C} STRING"
    options = {"columnNameOfCorruptRecord": _C}
    frame = spark.createDataFrame([(t,) for t in texts], "value STRING")
    return [r[0] for r in frame.select(F.from_json("value", schema, options)).collect()]


def _fields(row: Any) -> dict[str, Any]:
    """A decoded row's fields that are not NULL, the corrupt-record column apart."""
    return {k: v for k, v in row.asDict(recursive=True).items() if v is not None and k != _C}


def _select(spark: SparkSession, texts: list[str], column: Column) -> list[Any]:
    frame = spark.createDataFrame([(t,) for t in texts], "value STRING")
    return [r[0] for r in frame.select(column).collect()]


def test_a_field_of_the_wrong_type_is_null_and_the_record_corrupt_the_rest_kept(
    spark: SparkSession,
) -> None:
    """A root field that does not fit its type is NULL, the record is corrupt, every
    other field keeps its value: the first field present in the payload but NULL once
    decoded is the one that failed (``json_reasons._first_failure``)."""
    rest = '"name": "n", "tags": [1, 2]'
    cases = {  # the payload's field -> the field that fails
        '"temp": "hot", "ts": 1': "temp",  # a string for a DOUBLE
        '"temp": 1.5, "ts": "1795000000000"': "ts",  # a string for a BIGINT
        '"temp": 1.5, "ts": 9223372036854775808': "ts",  # one past BIGINT's range
        '"temp": 1.5, "ts": 1.5': "ts",  # a fraction for a BIGINT
        '"temp": 1.5, "ts": 1e3': "ts",  # an exponent for a BIGINT
        '"temp": 1.5, "ts": 100.00': "ts",  # a zero fraction too
        '"temp": [1], "ts": 1': "temp",  # an array for a scalar
        '"temp": {"a": 1}, "ts": 1': "temp",  # an object for a scalar
        '"temp": 1.5, "ts": true': "ts",
        '"temp": 1.5, "ts": 1, "loc": 5': "loc",  # a scalar for a struct
        '"temp": 1.5, "ts": 1, "loc": {"lat": 1, "lon": 2}, "m": 3': "m",  # for a map
    }
    rows = _decode(spark, ["{" + f"{c}, {rest}" + "}" for c in cases], _SCHEMA)
    for (payload, failing), row in zip(cases.items(), rows, strict=True):
        assert row[_C] is not None, payload
        fields = _fields(row)
        assert failing not in fields, payload
        expected = {"temp", "ts", "name", "tags"} | ({"loc"} if '"loc": {' in payload else set())
        expected -= {failing}
        assert set(fields) == expected, payload
    assert _fields(_decode(spark, ['{"ts": 9223372036854775807}'], _SCHEMA)[0]) == {"ts": 2**63 - 1}


def test_inside_a_struct_only_the_failing_field_is_null_an_array_or_map_is_null_whole(
    spark: SparkSession,
) -> None:
    """Partial results (``spark.sql.json.enablePartialResults``, on by default): a nested
    struct keeps the fields that fit, an ARRAY or MAP of scalars with one bad element is
    NULL whole, an ARRAY of structs keeps its elements with the bad field NULL (so
    ``json_reasons`` decodes such a container alone to see whether it fails)."""
    assert spark.conf.get("spark.sql.json.enablePartialResults") == "true"
    texts = [
        '{"loc": {"lat": "x", "lon": 2}}',
        '{"tags": [1, "x", 3]}',
        '{"m": {"a": 1, "b": "x"}}',
        '{"pts": [{"x": "a", "y": 1}, {"x": 2, "y": 2}]}',
    ]
    loc, tags, m, pts = _decode(spark, texts, _SCHEMA)
    assert loc[_C] is not None and loc["loc"].asDict() == {"lat": None, "lon": 2.0}
    assert tags[_C] is not None and tags["tags"] is None
    assert m[_C] is not None and m["m"] is None
    assert pts[_C] is not None
    assert [p.asDict() for p in pts["pts"]] == [{"x": None, "y": 1}, {"x": 2, "y": 2}]


def test_a_string_field_takes_any_json_value_as_its_text(spark: SparkSession) -> None:
    """A STRING field never fails: it holds any value's JSON text (numbers as Jackson
    reads them, a fraction keeping its point; objects and arrays compacted); JSON null
    is NULL. ``json_reasons`` reads what a field held from this parse."""
    schema = "v STRING"
    texts = [
        '{"v": 5}',
        '{"v": 100.00}',
        '{"v": 1e3}',
        '{"v": -0.0}',
        '{"v": 99999999999999999999}',
        '{"v": {"x": 1, "y": [1, "a"]}}',
        '{"v": [1, 2]}',
        '{"v": true}',
        '{"v": "a \\"q\\""}',
        '{"v": null}',
        "{}",
    ]
    rows = _decode(spark, texts, schema)
    assert all(r[_C] is None for r in rows)
    assert [r["v"] for r in rows] == [
        "5", "100.0", "1000.0", "-0.0", "99999999999999999999", '{"x":1,"y":[1,"a"]}',
        "[1,2]", "true", 'a "q"', None, None,
    ]  # fmt: skip


def test_a_payload_that_is_not_an_object_is_corrupt_and_a_blank_one_null(
    spark: SparkSession,
) -> None:
    """Not JSON, or JSON that is not an object (null included): corrupt, every field
    NULL; only blanks (or nothing): NULL, not corrupt; what follows a whole object is
    ignored (``json_reasons.decode_reasons``)."""
    corrupt = ['{"temp": 1.5, "ts": 1,', "{broken", "[1, 2]", "42", "null", '"s"', "true"]
    corrupt += ['[{"temp": 1.5}]', '{"ts": 01}', "\ufeff{}"]
    for text, row in zip(corrupt, _decode(spark, corrupt, _SCHEMA), strict=True):
        assert row[_C] == text and _fields(row) == {}, text
    assert _decode(spark, ["", " ", " \n\t\r"], _SCHEMA) == [None, None, None]
    trailing = _decode(spark, ['{"ts": 1} x', '{"ts": 1}{"ts": 2}'], _SCHEMA)
    assert [(r[_C], _fields(r)) for r in trailing] == [(None, {"ts": 1}), (None, {"ts": 1})]


def test_a_duplicate_key_keeps_the_value_that_fits_and_the_string_parse_the_last(
    spark: SparkSession,
) -> None:
    """A key given twice: from_json decodes both, keeps the last that fits and marks the
    record corrupt if one does not; the STRING parse holds the last. So a duplicate whose
    last value fits explains nothing by its field (``json_reasons``' last reason)."""
    texts = ['{"ts": 1, "ts": "x"}', '{"ts": "x", "ts": 2}']
    rows = _decode(spark, texts, "ts BIGINT")
    assert [(r["ts"], r[_C] is not None) for r in rows] == [(1, True), (2, True)]
    assert [r["ts"] for r in _decode(spark, texts, "ts STRING")] == ["x", "2"]


def test_variant_fields_read_what_from_json_reads_and_say_what_a_value_is(
    spark: SparkSession,
) -> None:
    """from_json into VARIANT fields reads the documents from_json reads (single quotes,
    NaN) and tells a missing field (SQL NULL) from a JSON null (a VARIANT null);
    ``schema_of_variant`` of a string is STRING and ``to_json`` quotes it as JSON does.
    A whole document read as one VARIANT is NULL where it is not JSON, and for a key
    given twice (which ``json_reasons`` reaches only after from_json read it as an
    object)."""
    texts = ["{'ts': 'a\"b'}", '{"ts": NaN}', '{"ts": null}', "{}"]
    ts = F.from_json("value", StructType([StructField("ts", VariantType())]))["ts"]
    kinds = _select(spark, texts, F.schema_of_variant(ts))
    assert kinds == ["STRING", "DOUBLE", "VOID", None]
    assert _select(spark, texts[:1], F.to_json(ts)) == ['"a\\"b"']
    assert _select(spark, texts, F.is_variant_null(ts)) == [False, False, True, False]
    whole = F.from_json("value", VariantType())
    texts = ["[1, 2]", "null", "{broken", '{"a": 1, "a": 2}']
    assert _select(spark, texts, F.to_json(whole)) == ["[1,2]", "null", None, None]
    text_field = StructType([StructField("v", StringType())])
    assert _select(spark, ['{"v": "x\\ny"}'], F.from_json("value", text_field)["v"]) == ["x\ny"]
