"""The dead-letter reason of a JSON record names the field, its declared type and the
value it held (``flow_jobs.plan.json_reasons``), at every depth of the schema; the
end-to-end cases (both decoders, one and many micro-batches) are in
``tests/test_dead_letters.py``."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType, StructField, StructType

from flow_jobs.kafka.schema import CORRUPT_RECORD
from flow_jobs.plan.json_reasons import decode_reasons, type_name

pytestmark = pytest.mark.spark

SCHEMA = (
    "temp DOUBLE, ts BIGINT, name STRING, loc STRUCT<lat: DOUBLE, deep: STRUCT<z: INT>>, "
    "tags ARRAY<BIGINT>, m MAP<STRING, BIGINT>, pts ARRAY<STRUCT<x: BIGINT>>, at TIMESTAMP, "
    "n INT, `odd.name` SMALLINT"
)
LOC = "STRUCT<lat: DOUBLE, deep: STRUCT<z: INT>>"

CASES: list[tuple[bytes | None, str | None]] = [
    (b'{"temp": 1.5, "ts": 1, "name": {"any": "thing"}, "loc": {"lat": 2}}', None),
    (b'{"temp": "hot", "ts": "soon"}', 'field temp: expected DOUBLE, got "hot"'),
    (b"{'temp': 'hot'}", 'field temp: expected DOUBLE, got "hot"'),  # from_json's quotes
    (b'{"ts": 18446744073709551616}',
     "field ts: expected BIGINT, got 18446744073709551616 (out of range)"),
    (b'{"ts": -9223372036854775809}',
     "field ts: expected BIGINT, got -9223372036854775809 (out of range)"),
    (b'{"ts": 1e3}', "field ts: expected BIGINT, got 1000.0"),
    (b'{"ts": 100.00}', "field ts: expected BIGINT, got 100.0"),
    (b'{"ts": "12"}', 'field ts: expected BIGINT, got "12"'),
    (b'{"ts": false}', "field ts: expected BIGINT, got false"),
    (b'{"temp": {"a": [1, {"b": null}]}}', 'field temp: expected DOUBLE, got {"a":[1,{"b":null}]}'),
    (b'{"loc": 5}', f"field loc: expected {LOC}, got 5"),
    (b'{"loc": {"lat": "x", "deep": {"z": 1}}}', 'field loc.lat: expected DOUBLE, got "x"'),
    (b'{"loc": {"lat": 1, "deep": {"z": "q\\n"}}}', 'field loc.deep.z: expected INT, got "q\\n"'),
    (b'{"loc": {"deep": []}}', "field loc.deep: expected STRUCT<z: INT>, got []"),
    (b'{"tags": [1, "x"]}', 'field tags: expected ARRAY<BIGINT>, got [1,"x"]'),
    (b'{"m": {"a": 1, "b": 2.5}}', 'field m: expected MAP<STRING, BIGINT>, got {"a":1,"b":2.5}'),
    (b'{"pts": [{"x": 1}, {"x": 1.5}]}',
     'field pts: expected ARRAY<STRUCT<x: BIGINT>>, got [{"x":1},{"x":1.5}]'),
    (b'{"at": "yesterday"}', 'field at: expected TIMESTAMP, got "yesterday"'),
    (b'{"n": 2147483648}', "field n: expected INT, got 2147483648 (out of range)"),
    (b'{"odd.name": 40000}', "field `odd.name`: expected SMALLINT, got 40000 (out of range)"),
    (b'{"temp": "' + b"x" * 60 + b'"}', 'field temp: expected DOUBLE, got "' + "x" * 38 + "…"),
    (b'{"ts": 1, "ts": "x"}',  # a key given twice: from_json keeps the value that fits
     'malformed JSON: not an object matching sources[3].schema: {"ts": 1, "ts": "x"}'),
    (b'{"ts": "x", "ts": 2}',
     'malformed JSON: not an object matching sources[3].schema: {"ts": "x", "ts": 2}'),
    (b'{"temp": 1.5,\n  "ts": ', 'malformed JSON: not parseable: {"temp": 1.5,   "ts":'),
    (b'{"temp": "' + b"y" * 60, 'malformed JSON: not parseable: {"temp": "' + "y" * 29 + "…"),
    (b"\xff\xfe", "malformed JSON: not parseable: \ufffd\ufffd"),
    (b'[{"temp": 1.5}]', 'malformed JSON: not an object, got [{"temp": 1.5}]'),
    (b'"text"', 'malformed JSON: not an object, got "text"'),
    (b"true", "malformed JSON: not an object, got true"),
    (b"null", "malformed JSON: not an object, got null"),
    (b"\t\r\n ", "malformed JSON: not parseable: only blanks"),
    (b"", "empty payload"),
    (None, "null payload (a tombstone)"),
]  # fmt: skip


def _reasons(spark: SparkSession, schema: StructType, values: list[bytes | None]) -> list:
    """Each value's reason (or None) as the source view decides it: the first that holds."""
    full = StructType([*schema.fields, StructField(CORRUPT_RECORD, StringType())])
    options = {"columnNameOfCorruptRecord": CORRUPT_RECORD}
    frame = spark.createDataFrame([(v,) for v in values], "value BINARY")
    frame = frame.withColumn("p", F.from_json(F.col("value").cast("string"), full, options))
    reason = F.lit(None).cast("string")
    for condition, text in reversed(decode_reasons(F.col("value"), F.col("p"), schema, 3)):
        reason = F.when(condition, F.lit(text) if isinstance(text, str) else text).otherwise(reason)
    return [r[0] for r in frame.select(reason).collect()]


def test_each_reason_names_the_field_the_type_and_the_value(spark: SparkSession) -> None:
    schema = DataType.fromDDL(SCHEMA)
    assert isinstance(schema, StructType)
    got = _reasons(spark, schema, [v for v, _ in CASES])
    assert list(zip([v for v, _ in CASES], got, strict=True)) == CASES


def test_type_names_read_as_ddl() -> None:
    schema = DataType.fromDDL(SCHEMA)
    assert isinstance(schema, StructType)
    assert [type_name(f.dataType) for f in schema.fields] == [
        "DOUBLE", "BIGINT", "STRING", LOC, "ARRAY<BIGINT>", "MAP<STRING, BIGINT>",
        "ARRAY<STRUCT<x: BIGINT>>", "TIMESTAMP", "INT", "SMALLINT",
    ]  # fmt: skip
    assert type_name(DataType.fromDDL("d DECIMAL(10, 2), t TIMESTAMP_NTZ")) == (
        "STRUCT<d: DECIMAL(10,2), t: TIMESTAMP_NTZ>"
    )
