"""The reader's Arrow decode gives what ``from_json`` gives (issue 12, item 1).

The rule under test (``flow_jobs.kafka.json_decode``): a record Arrow accepts decodes to
``from_json``'s result for it, field by field, and a record Arrow rejects is left to
``from_json`` (flagged undecoded). The reference is Spark's own ``from_json`` in
PERMISSIVE mode with a corrupt-record column, exactly as the plan calls it, on a corpus
of valid and invalid payloads for every type the reader decodes, and on random payloads
(hypothesis). Each corpus is decoded as one chunk, so a record Arrow rejects must not
shift the rows around it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from flow_jobs.kafka.json_decode import JsonDecoder, arrow_schema

DDL = "s STRING, l BIGINT, i INT, sh SMALLINT, t TINYINT, d DOUBLE, b BOOLEAN"
FIELDS = ["s", "l", "i", "sh", "t", "d", "b"]
CORRUPT = "__flow_corrupt_record"

CORPUS: list[bytes | None] = [
    # valid, every type, bounds
    b'{"s": "x", "l": 9223372036854775807, "i": 2147483647, "sh": 32767, "t": 127, '
    b'"d": 1.5, "b": true}',
    b'{"s": "", "l": -9223372036854775808, "i": -2147483648, "sh": -32768, "t": -128, '
    b'"d": -0.0, "b": false}',
    b"{}",
    b'{"s": null, "l": null, "d": null, "b": null}',
    b'{"d": 1e17}',
    b'{"d": 1e308}',
    b'{"d": 5e-324}',
    b'{"d": 0.1}',
    b'{"d": 3}',
    b'{"d": 123456789012345678901234567890}',
    b'{"d": 1.7976931348623157e309}',
    b'{"d": NaN}',
    b'{"d": Infinity}',
    b'{"d": -Infinity}',
    b'{"d": "NaN"}',
    b'{"d": "1.5"}',
    b'{"d": 1.0000000000000002}',
    b'{"d": 2.2250738585072011e-308}',
    b'{"s": "\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\"}',
    b'{"s": "\\u0000"}',
    b'{"s": "\\ud800"}',
    '{"s": "é 中 😀"}'.encode(),
    b'{"s": "\xff\xfe"}',
    b'{"s": 12}',
    b'{"s": 1.5}',
    b'{"s": true}',
    b'{"s": {"a": 1}}',
    b'{"s": [1, 2]}',
    b'{"l": 9223372036854775808}',
    b'{"l": -9223372036854775809}',
    b'{"l": 1.0}',
    b'{"l": 1e3}',
    b'{"l": "12"}',
    b'{"l": true}',
    b'{"l": 007}',
    b'{"l": -0}',
    b'{"i": 2147483648}',
    b'{"sh": 32768}',
    b'{"t": 128}',
    b'{"t": -129}',
    b'{"b": 1}',
    b'{"b": "true"}',
    b'{"b": TRUE}',
    # shape
    b'{"S": "upper case name"}',
    b'{"s": "a", "s": "b"}',
    b'{"extra": {"deep": [1, {"x": null}]}, "s": "kept"}',
    b'{"s": "x"} trailing',
    b'{"s": "x"}{"s": "y"}',
    b'{"s": "x"}\n{"s": "y"}',
    b'{"s": "pretty",\n "l": 1}',
    b'{"s": "cr"}\r',
    b' {"s": "leading space"}',
    b'{"s": "trailing space"} ',
    b"{'s': 'single quotes'}",
    b'{s: "unquoted"}',
    b'{"s": "x",}',
    b'{"s": "x" /* comment */}',
    b"[1, 2]",
    b'[{"s": "x"}]',
    b"5",
    b'"x"',
    b"null",
    b" null",
    b"true",
    b"   ",
    b"",
    None,
    b"not json",
    b"{",
    b'{"s": "unterminated}',
    b"\x00\x01",
]


@pytest.fixture(scope="module")
def schema(spark: SparkSession) -> StructType:
    declared = spark.range(0).select(F.from_json(F.lit("{}"), DDL).alias("p")).schema["p"]
    assert isinstance(declared.dataType, StructType)
    return declared.dataType


def _from_json(spark: SparkSession, values: list[bytes | None]) -> list[dict[str, Any] | None]:
    """What the plan's ``from_json`` gives each payload (``plan.sources._decode_json``)."""
    frame = spark.createDataFrame([(i, v) for i, v in enumerate(values)], "i INT, value BINARY")
    payload = F.from_json(
        F.col("value").cast("string"),
        f"{DDL}, {CORRUPT} STRING",
        {"columnNameOfCorruptRecord": CORRUPT},
    )
    rows = frame.select("i", payload.alias("p")).orderBy("i").collect()
    return [None if r.p is None else r.p.asDict() for r in rows]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    return bool(a == b) and type(a) is type(b)


def _check(spark: SparkSession, schema: StructType, values: list[bytes | None]) -> int:
    """Assert the rule on ``values`` decoded as one chunk; return how many Arrow took.
    Failing pieces are halved down to single records, so that Arrow takes every record
    it accepts and each is compared."""
    target = arrow_schema(schema.json())
    assert target is not None
    rows, undecoded = JsonDecoder(target, smallest_piece=1).decode(values)
    assert len(rows) == len(undecoded) == len(values)
    expected = _from_json(spark, values)
    taken = 0
    for value, row, left, reference in zip(
        values, rows.to_pylist(), undecoded.to_pylist(), expected, strict=True
    ):
        if left:
            assert row is None, value
            continue
        taken += 1
        assert reference is not None, f"Arrow decoded {value!r}, from_json gives NULL"
        assert reference[CORRUPT] is None, f"Arrow decoded {value!r}, from_json: corrupt"
        for name in FIELDS:
            assert _same(row[name], reference[name]), (value, name, row[name], reference[name])
    return taken


def test_the_corpus_decodes_like_from_json(spark: SparkSession, schema: StructType) -> None:
    taken = _check(spark, schema, CORPUS)
    # Not vacuous: Arrow takes the valid records and leaves the rest.
    assert 15 <= taken < len(CORPUS)


def test_each_record_alone_decodes_like_from_json(spark: SparkSession, schema: StructType) -> None:
    # Alone, a bad record cannot hide in a chunk that Arrow rejects as a whole.
    for value in CORPUS:
        _check(spark, schema, [value])


def test_valid_records_are_decoded_by_arrow(schema: StructType) -> None:
    target = arrow_schema(schema.json())
    assert target is not None
    good = [
        json.dumps({"s": f"u{i}", "l": i, "d": i / 7, "b": i % 2 == 0}).encode()
        for i in range(5000)
    ]
    mixed = list(good)
    mixed[2500] = b'{"l": "bad"}'
    _rows, undecoded = JsonDecoder(target).decode(mixed)
    left = [i for i, flag in enumerate(undecoded.to_pylist()) if flag]
    assert 2500 in left and len(left) <= 16  # only the bad record's smallest piece


def test_types_arrow_could_read_differently_stay_with_from_json(spark: SparkSession) -> None:
    for ddl in (
        "ts TIMESTAMP",
        "d DATE",
        "x DECIMAL(10, 2)",
        "f FLOAT",
        "b BINARY",
        "m MAP<STRING, INT>",
        "a ARRAY<INT>",
        "n STRUCT<x: INT>",
        "s STRING, ts TIMESTAMP",
    ):
        declared = spark.range(0).select(F.from_json(F.lit("{}"), ddl).alias("p")).schema["p"]
        assert arrow_schema(declared.dataType.json()) is None, ddl


def test_a_top_level_null_never_reaches_arrow() -> None:
    # Arrow 26's JSON reader crashes the process on a top-level null: the decoder must
    # keep it away (run in a child process, so a crash fails the test, not the suite).
    code = (
        "import pyarrow as pa\n"
        "from flow_jobs.kafka.json_decode import JsonDecoder\n"
        "d = JsonDecoder(pa.schema([('s', pa.string())]))\n"
        "for v in [[b'null'], [b' null'], [b'{}', b'null'], [b'null', b'{}'], [b'\\tnull']]:\n"
        "    rows, left = d.decode(v)\n"
        "    assert left.to_pylist()[v.index(b'{}') if b'{}' in v else 0] is not None\n"
        "print('ok')\n"
    )
    _passes_in_a_child(code)


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_payload = st.dictionaries(
    st.sampled_from([*FIELDS, "S", "other"]),
    st.one_of(_scalar, st.lists(_scalar, max_size=2), st.dictionaries(st.just("k"), _scalar)),
    max_size=5,
).map(lambda d: json.dumps(d).encode())
_garbage = st.binary(max_size=12).filter(lambda b: b"\n" not in b)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.one_of(_payload, _payload, _payload, _garbage, st.none()), min_size=1, max_size=60)
)
def test_random_payloads_decode_like_from_json(
    spark: SparkSession, schema: StructType, values: list[bytes | None]
) -> None:
    _check(spark, schema, values)


def test_odd_objects_never_crash_the_decoder() -> None:
    # Every line Arrow sees starts an object; fuzz what may follow the brace (a crash
    # in the reader would fail the task on every replay). Seeded: the same inputs each
    # run. In a child process, so that a crash fails this test, not the suite.
    code = (
        "import random, pyarrow as pa\n"
        "from flow_jobs.kafka.json_decode import JsonDecoder\n"
        "schema = pa.schema([('s', pa.string()), ('l', pa.int64()), ('d', pa.float64()),"
        " ('b', pa.bool_())])\n"
        "d = JsonDecoder(schema, smallest_piece=1)\n"
        "rng = random.Random(12)\n"
        "atoms = [b'{', b'}', b'[', b']', b'\"s\"', b'\"l\"', b'\"d\"', b'\"b\"', b':', b',',"
        " b'null', b'true', b'1', b'-1e999', b'NaN', b'\"x\"', b' ', b'\\\\', b'\"',"
        " b'\\x00', b'\\xff', b'9' * 30, b'{}', b'[]', b'nul', b'1.', b'-', b'Infinity',"
        " b'\"\\\\ud800\"']\n"
        "for _ in range(3000):\n"
        "    values = [b'{' + b''.join(rng.choice(atoms) for _ in range(rng.randint(0, 10)))"
        " for _ in range(rng.randint(1, 8))]\n"
        "    rows, left = d.decode(values)\n"
        "    assert len(rows) == len(left) == len(values)\n"
        "print('ok')\n"
    )
    _passes_in_a_child(code)


def _passes_in_a_child(code: str) -> None:
    """Run ``code`` in a new interpreter (a crash fails the test, not the suite); it
    must print ``ok``."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
