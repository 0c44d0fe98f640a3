"""State-API sums, averages, minima and maxima equal Spark SQL's on the same windows
(issue 11, item 4): huge values next to small ones, infinities, NaN, NULLs, all-NULL
windows, overlapping windows as sliding and count windows make them."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flow_jobs.aggregations.avg import Avg
from flow_jobs.aggregations.extremes import Extreme
from flow_jobs.aggregations.sum import Sum
from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.kernels.ranges import Context, Ranges

EPS = float(np.finfo(np.float64).eps)
SPECIAL = [
    2.101143456537996e-271,
    1e17,
    -1e17,
    3.0,
    0.5,
    math.inf,
    -math.inf,
    math.nan,
    1e308,
    -2.5,
    None,
]


def _frame(values: list[float | None]) -> EventFrame:
    n = len(values)
    data = np.array([0.0 if v is None else v for v in values], np.float64)
    valid = np.array([v is not None for v in values], bool)
    order = np.arange(n, dtype=np.int64)
    return EventFrame(order, np.zeros(n, np.int64), order, {"x": Values(data, valid)})


def ours(values: list[float | None], windows: list[tuple[int, int]]) -> list[list[Any]]:
    frame = _frame(values)
    ctx = Context.of(frame, {"x": "float"}, str)
    w = Ranges(
        np.array([a for a, _ in windows], np.int64), np.array([b for _, b in windows], np.int64)
    )
    columns = [
        Sum("x", ["s"]).compute(ctx, w)[0],
        Avg("x", ["a"]).compute(ctx, w)[0],
        Extreme("x", ["lo"], largest=False).compute(ctx, w)[0],
        Extreme("x", ["hi"], largest=True).compute(ctx, w)[0],
    ]
    return [[_plain(c[i]) for c in columns] for i in range(len(windows))]


def _plain(v: Any) -> Any:
    return None if v is None or v is pd.NA else float(v)


def _same(a: Any, b: Any, tolerance: float = 0.0) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tolerance


def _tolerances(window: list[float | None]) -> list[float]:
    """Spark sums in whatever order partial aggregation gives, so a sum can only be
    asked to lie within the error bound of any summation order: n * eps * sum(|x|)
    (then sum, avg, min, max). A prefix-sum difference breaks it: [1e17, 3.0] gives 0.0
    for the window {3.0}, where the bound is 3 * 2.2e-16."""
    finite = [abs(v) for v in window if v is not None and math.isfinite(v)]
    bound = 2 * len(window) * EPS * sum(finite)
    return [bound, bound / max(1, len(finite)), 0.0, 0.0]


def _check(
    spark: SparkSession, cases: list[tuple[list[float | None], list[tuple[int, int]]]]
) -> None:
    """Every window of every case against one Spark SQL query."""
    rows, expected = [], []
    for values, windows in cases:
        got = ours(values, windows)
        for w, g in zip(windows, got, strict=True):
            members = values[w[0] : w[1] + 1]
            rows += [(len(expected), v) for v in members]
            expected.append((members, g))
    frame = spark.createDataFrame(rows, "w INT, x DOUBLE")
    result = (
        frame.groupBy("w")
        .agg(F.try_sum("x"), F.try_avg("x"), F.min("x"), F.max("x"))
        .orderBy("w")
        .collect()
    )
    assert len(result) == len(expected)
    for (members, g), row in zip(expected, result, strict=True):
        want = list(row)[1:]
        tolerances = _tolerances(members)
        if math.isinf(sum(abs(v) for v in members if v is not None and math.isfinite(v))):
            # A partial sum may overflow to an infinity: Spark's own result then depends
            # on its summation order (inf + -inf is NaN, -inf + inf too, -inf alone not).
            g, want, tolerances = g[2:], want[2:], tolerances[2:]
        assert all(_same(*z) for z in zip(g, want, tolerances, strict=True)), (members, g, want)


def test_the_issue_cases(spark: SparkSession) -> None:
    # A window {3.0} after 1e17 in the same frame; NaN and infinities kept to their
    # windows; an all-NULL window; NaN as the largest value.
    values = [1e17, 3.0, 2.0, math.inf, 1.0, math.nan, 4.0, None, None, -math.inf, 7.0]
    windows = [(1, 1), (0, 1), (1, 2), (2, 4), (4, 4), (4, 6), (6, 6), (7, 8), (8, 10), (0, 10)]
    _check(spark, [(values, windows)])
    assert ours(values, [(1, 1)])[0][0] == 3.0


def test_random_windows_equal_spark_sql(spark: SparkSession) -> None:
    """400 random frames of huge, tiny, special and NULL values, with overlapping
    windows, checked in one Spark query."""
    rng = random.Random("numerics")
    cases = []
    for _ in range(400):
        n = rng.randint(1, 30)
        values = [
            rng.choice(SPECIAL) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6) for _ in range(n)
        ]
        windows = []
        for _ in range(rng.randint(1, 8)):
            a = rng.randrange(n)
            windows.append((a, rng.randint(a, n - 1)))
        cases.append((values, windows))
    _check(spark, cases)
