"""``sum``: Spark's ``try_sum`` natively (a sum that overflows BIGINT or DECIMAL is NULL,
not a query that fails on every replay: Spark 4's ANSI mode raises
ARITHMETIC_OVERFLOW); on the state API prefix sums, double-double for floats.

Floating point follows Spark: a sum holding NaN, or both infinities, is NaN; one holding
an infinity is that infinity. Float sums are as exact as summing each window on its own
(``float_sums``): a huge value in one window does not leak into the next through the
prefix sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType, FractionalType, LongType

from flow_jobs.aggregations.base import (
    PARTIAL_NUMBERS,
    AggregationInput,
    NativeWindow,
    OneFunctionAggregator,
    StateBuffer,
)
from flow_jobs.aggregations.partials import Merge
from flow_jobs.kernels.frame import Values
from flow_jobs.kernels.ranges import (
    Context,
    Ranges,
    WindowAggregator,
    nullable,
    prefix,
    range_sum,
)
from flow_jobs.partial_parts import SUM


class Sum(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        n = range_sum(v.valid.astype(np.int64), w)
        if kind == "int":
            return [_int_sums(v, ctx, w, n)]
        if kind == "float":
            return [nullable(float_sums(np.where(v.valid, v.data, 0.0), w), n > 0)]
        return [[python_sum(v, ctx, w, i) for i in range(len(w))]]


_INT64 = np.iinfo(np.int64)
_EPS = np.finfo(np.float64).eps


def float_sums(x: np.ndarray, w: Ranges) -> np.ndarray:
    """Per-window float64 sums from prefix sums, without their cancellation error.

    A plain prefix difference ``P[hi+1] - P[lo]`` loses the window to the rounding of
    everything before it (a frame [1e17, 3.0] gives 0.0 for the window {3.0}), and one
    NaN or infinity poisons every later window. So: NaN and infinities are counted per
    window (prefix counts) instead of summed; finite values are summed as double-double
    prefix sums (each rounding error of the running sum recovered exactly with Knuth's
    TwoSum and summed apart), which leaves an error of the order of the window's own
    rounding. Windows where even that could matter (the values before the window dwarf
    it by ~2^52 times the frame length), and frames whose running sum overflows, are
    summed directly."""
    if not len(w):
        return np.empty(0, np.float64)
    finite = np.isfinite(x)
    clean = np.where(finite, x, 0.0)
    # a running sum that overflows is detected below (the frame is then summed directly)
    with np.errstate(invalid="ignore", over="ignore"):
        p = prefix(clean)
        a, b = p[:-1], clean
        bb = p[1:] - a
        e = prefix((a - (p[1:] - bb)) + (b - bb))  # TwoSum: a + b == p[1:] + err exactly
        out = (p[w.hi + 1] - p[w.lo]) + (e[w.hi + 1] - e[w.lo])
        magnitude = prefix(np.abs(clean))
        inside = magnitude[w.hi + 1] - magnitude[w.lo]
        doubtful = magnitude[w.hi + 1] * _EPS * len(x) > inside * 0.5
    if not np.isfinite(p[-1]) or not np.isfinite(magnitude[-1]):
        doubtful[:] = True
    with np.errstate(over="ignore"):  # a window's own sum past 1.8e308 is inf, as in Spark
        for i in np.flatnonzero(doubtful):
            out[i] = np.sum(clean[w.lo[i] : w.hi[i] + 1])
    if not finite.all():
        nan = range_sum(np.isnan(x).astype(np.int64), w) > 0
        up = range_sum((x == np.inf).astype(np.int64), w) > 0
        down = range_sum((x == -np.inf).astype(np.int64), w) > 0
        out = np.where(up, np.inf, np.where(down, -np.inf, out))
        out[nan | (up & down)] = np.nan
    return out


def _int_sums(v: Values, ctx: Context, w: Ranges, n: np.ndarray) -> Any:
    """BIGINT sums; NULL where the sum overflows BIGINT (like the native engine's try_sum).

    int64 prefix sums wrap, but the difference of two is exact modulo 2^64, so it is the
    sum whenever that fits; a float sum says which windows may not (|sum| > 2^62), and
    those are summed exactly in Python."""
    data = np.where(v.valid, v.data, 0).astype(np.int64)
    sums, present = range_sum(data, w), n > 0
    approx = range_sum(data.astype(np.float64), w)
    for i in np.flatnonzero(np.abs(approx) > 2.0**62):
        total = python_sum(v, ctx, w, int(i))
        if total is not None and _INT64.min <= total <= _INT64.max:
            sums[i] = total
        else:
            present[i] = False
    return nullable(sums, present)


def python_sum(v: Values, ctx: Context, w: Ranges, i: int) -> Any:
    members = ctx.members(w, i, v.valid)
    return sum(v.data[members].tolist()) if len(members) else None


def sum_type(t: DataType | None) -> DataType:
    if isinstance(t, DecimalType):
        return DecimalType(min(38, t.precision + 10), t.scale)
    return DoubleType() if isinstance(t, FractionalType) else LongType()


class SumAggregator(OneFunctionAggregator):
    name = "sum"
    native_form = "try_sum(col)"
    state_form = "prefix sums (double-double for floats)"
    state_class = Sum
    numeric_only = True
    partial_parts = (SUM,)

    def folds(self, value: DataType | None) -> bool:
        return isinstance(value, PARTIAL_NUMBERS)

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        return ("try_sum",)  # merging: the try_sum of partial sums and rows alike

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        # try_sum over integers or DECIMAL keeps isEmpty beside the sum (its NULL when true)
        (buffer,) = buffers
        return None if buffer.fields.get("isEmpty") else buffer.fields["sum"]

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [sum_type(a.data_type)]

    def function(self, a: AggregationInput) -> Column:
        return F.try_sum(a.column_value)

    def merged(self, a: AggregationInput, w: NativeWindow, merge: Merge) -> Column:
        assert a.spec.column is not None
        return merge.merged(SUM, a.spec.column, a.column_value, w.order)  # try_sum
