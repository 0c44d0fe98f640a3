"""The reader's pre-stage (``flow_jobs.kafka.prestage``) gives Spark's values (issue 33).

Random expressions of the grammar (column references, literals, casts, comparisons,
``<=>``, ``IS [NOT] NULL``, ``IN`` with NULL, ``AND`` / ``OR`` / ``NOT``, ``+ - *`` and
unary minus), written as SQL over columns of every type the grammar reads, run by Spark
over random rows (NULLs, NaN, ±inf, -0.0, 1e17, the integer extremes that wrap), and the
same SQL read from Spark's optimized plan (``flow_jobs.combine.sql.analyze``) and
evaluated by Arrow on the same rows: every value the reader computes equals Spark's, and
so does every value of the Spark columns the query is rebuilt from (``to_column``). An
expression Spark's plan puts outside the grammar (a cast from STRING, a decimal) is not
evaluated by the reader at all; a fixed list checks the grammar's pieces are read.
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from flow_jobs.combine.sql import NotInGrammar, analyze, to_column
from flow_jobs.kafka.prestage import Evaluator, Stage
from flow_jobs.runtime.session import pipeline_session
from flow_jobs.spec.models import SparkSpec

SCHEMA = StructType(
    [StructField("i8", ByteType()), StructField("i32", IntegerType()),
     StructField("i64", LongType()), StructField("d", DoubleType()),
     StructField("s", StringType()), StructField("b", BooleanType())]
)  # fmt: skip
ARROW = pa.struct(
    [("i8", pa.int8()), ("i32", pa.int32()), ("i64", pa.int64()), ("d", pa.float64()),
     ("s", pa.string()), ("b", pa.bool_())]
)  # fmt: skip
VALUES: dict[str, list[Any]] = {
    "i8": [None, 0, 1, -1, 7, 127, -128, 64],
    "i32": [None, 0, 1, -1, 5, 2**31 - 1, -(2**31), 100_000],
    "i64": [None, 0, 1, -1, 3, 2**63 - 1, -(2**63), 2**31, 3_000_000_000],
    "d": [None, 0.0, -0.0, 1.5, -2.25, 5.0, math.nan, math.inf, -math.inf, 1e17],
    "s": [None, "", "a", "b", "A", "é", "a b", "10"],
    "b": [None, True, False],
}

NUM_LEAVES = ["i8", "i32", "i64", "d", "3", "-1", "127", "2147483647", "5.0D", "-2.25D",
              "CAST('NaN' AS DOUBLE)", "1e17D", "100000000000L", "CAST(NULL AS INT)"]  # fmt: skip
STR_LEAVES = ["s", "'a'", "''", "'10'", "'é'"]
BOOL_LEAVES = ["b", "TRUE", "FALSE"]


def numbers(depth: int) -> st.SearchStrategy[str]:
    leaf = st.sampled_from(NUM_LEAVES)
    if depth == 0:
        return leaf
    inner = numbers(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(lambda t: f"({' '.join(t)})"),
        inner.map(lambda a: f"(- {a})"),
        st.tuples(inner, st.sampled_from(["TINYINT", "INT", "BIGINT", "DOUBLE"])).map(
            lambda t: f"CAST({t[0]} AS {t[1]})"
        ),
    )


def strings(depth: int) -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(STR_LEAVES), numbers(depth).map(lambda a: f"CAST({a} AS STRING)")
    )


def booleans(depth: int) -> st.SearchStrategy[str]:
    ops = st.sampled_from(["=", "<", "<=", ">", ">=", "<=>", "!="])
    leaf = st.one_of(
        st.sampled_from(BOOL_LEAVES),
        st.tuples(numbers(1), ops, numbers(1)).map(lambda t: f"({' '.join(t)})"),
        st.tuples(strings(0), ops, strings(0)).map(lambda t: f"({' '.join(t)})"),
        st.tuples(numbers(1) | strings(0), st.sampled_from(["IS NULL", "IS NOT NULL"])).map(
            lambda t: f"({t[0]} {t[1]})"
        ),
        st.tuples(
            numbers(0), st.lists(st.sampled_from([*NUM_LEAVES[4:], "NULL"]), min_size=1, max_size=3)
        ).map(lambda t: f"({t[0]} IN ({', '.join(t[1])}))"),
        st.tuples(
            strings(0), st.lists(st.sampled_from(["'a'", "'b'", "NULL"]), min_size=1, max_size=3)
        ).map(lambda t: f"({t[0]} IN ({', '.join(t[1])}))"),
    )
    if depth == 0:
        return leaf
    inner = booleans(depth - 1)
    return st.one_of(
        leaf,
        inner.map(lambda a: f"(NOT {a})"),
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({' '.join(t)})"),
    )


@pytest.fixture(scope="module")
def session(spark: SparkSession) -> SparkSession:
    """A pipeline's session: its SQL settings (ANSI mode off)."""
    return pipeline_session(spark, SparkSpec())


def rows(draw_seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(draw_seed)
    return [{c: rng.choice(v) for c, v in VALUES.items()} for _ in range(n)]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b and type(a) is type(b)


def _check(spark: SparkSession, exprs: list[str], data: list[dict[str, Any]], view: str) -> int:
    """Spark's values of ``exprs`` over ``data`` against the reader's and the rebuilt
    columns'; returns how many expressions the reader evaluated."""
    frame = spark.createDataFrame([tuple(r.values()) for r in data], SCHEMA)
    frame.createOrReplaceTempView(view)
    sql = f"SELECT {', '.join(f'{e} AS c{i}' for i, e in enumerate(exprs))} FROM {view}"
    spark_rows = [r.asDict() for r in spark.sql(sql).collect()]
    stage = analyze(spark, sql, view, SCHEMA)
    evaluated = {name: e for name, e in stage.outputs.items() if e is not None}
    if not evaluated:
        return 0
    arrow = pa.array(data, ARROW)
    ev = Evaluator(arrow, ansi=False)
    rebuilt = spark.table(view).select(*(to_column(e).alias(n) for n, e in evaluated.items()))
    rebuilt_rows = [r.asDict() for r in rebuilt.collect()]
    for name, e in evaluated.items():
        ours = ev.array(e).to_pylist()
        theirs = [r[name] for r in spark_rows]
        where = exprs[int(name[1:])]
        for row, a, b, c in zip(data, ours, theirs, rebuilt_rows, strict=True):
            assert same(a, b), f"{where} over {row}: the reader {a!r}, Spark {b!r}"
            assert same(c[name], b), f"{where} over {row}: rebuilt {c[name]!r}, Spark {b!r}"
    return len(evaluated)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    exprs=st.lists(st.one_of(booleans(2), numbers(2), strings(1)), min_size=1, max_size=8),
    seed=st.integers(0, 2**32),
    n=st.integers(1, 30),
)
def test_the_reader_computes_what_spark_computes(
    session: SparkSession, exprs: list[str], seed: int, n: int
) -> None:
    assert session.conf.get("spark.sql.ansi.enabled") == "false"  # the pipelines' setting
    _check(session, exprs, rows(seed, n), "prestage_values")


def test_a_filter_keeps_the_rows_spark_keeps(session: SparkSession) -> None:
    """WHERE: the rows Spark returns are those the stage passes (TRUE, not NULL)."""
    data = rows(7, 200)
    payload = StructType([StructField("id", IntegerType()), *SCHEMA.fields])
    frame = session.createDataFrame([(i, *r.values()) for i, r in enumerate(data)], payload)
    frame.createOrReplaceTempView("prestage_filter")
    sql = (
        "SELECT id FROM prestage_filter WHERE (d >= 5.0D OR i8 IN (1, NULL)) "
        "AND NOT s <=> 'a' AND (i64 * 2 > i32 OR b)"
    )
    kept = {r["id"] for r in session.sql(sql).collect()}
    stage = analyze(session, sql, "prestage_filter", payload)
    assert stage.where is not None
    arrow = pa.array([{"id": i, **r} for i, r in enumerate(data)],
                     pa.struct([("id", pa.int32()), *ARROW]))  # fmt: skip
    _, passes = Stage(stage.where, ()).apply(arrow, ["id"])
    assert passes is not None
    assert {i for i, p in enumerate(passes) if p} == kept
    assert 0 < len(kept) < len(data)


@pytest.mark.parametrize(
    "expr",
    [
        "i64 IS NOT NULL", "d >= 5.0D", "s IN ('a', NULL)", "NOT b", "(b AND s = 'a') OR d < 0D",
        "i8 + i8", "i32 * i64", "-i64", "CAST(i64 AS INT)", "CAST(i32 AS DOUBLE)",
        "CAST(i8 AS STRING)", "d <=> CAST('NaN' AS DOUBLE)", "i32 - 1",
    ],
)  # fmt: skip
def test_the_grammar_is_read_from_spark_plans(session: SparkSession, expr: str) -> None:
    session.createDataFrame([], SCHEMA).createOrReplaceTempView("prestage_grammar")
    stage = analyze(
        session, f"SELECT {expr} AS v FROM prestage_grammar", "prestage_grammar", SCHEMA
    )
    assert stage.outputs["v"] is not None, expr


@pytest.mark.parametrize(
    "expr",
    ["CAST(s AS INT)", "i64 / 2", "upper(s)", "d % 2", "CAST(d AS BIGINT)", "i64 + 1.5"],
)
def test_what_the_reader_does_not_evaluate(session: SparkSession, expr: str) -> None:
    session.createDataFrame([], SCHEMA).createOrReplaceTempView("prestage_outside")
    stage = analyze(
        session, f"SELECT {expr} AS v FROM prestage_outside", "prestage_outside", SCHEMA
    )
    assert stage.outputs["v"] is None, expr


def test_a_plan_of_another_shape_is_refused(session: SparkSession) -> None:
    session.createDataFrame([], SCHEMA).createOrReplaceTempView("prestage_shape")
    for sql in (
        "SELECT s, count(*) AS n FROM prestage_shape GROUP BY s",
        "SELECT a.s FROM prestage_shape a JOIN prestage_shape b ON a.i8 = b.i8",
        "SELECT DISTINCT s FROM prestage_shape",
        # a filter on a name computed above it (rand() keeps it from being pushed down):
        # i64 there is i64 + 1, not the source's i64
        "SELECT * FROM (SELECT i64 + 1 AS i64, rand() AS r FROM prestage_shape) WHERE i64 > 0",
    ):
        with pytest.raises(NotInGrammar):
            analyze(session, sql, "prestage_shape", SCHEMA)
