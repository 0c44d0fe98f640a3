"""Aggregators for state-API windows: one small class each, over many windows at once.

A window is an inclusive index range ``[lo, hi]`` into a group's ``EventFrame``, which
holds its events in their total order (event time, then Kafka position). Each
aggregator computes its value for every window of a batch in one call, vectorised with
numpy where the aggregate allows it (prefix sums for count/sum/avg, a sparse table for
range min/max, a range minimum over the order rank for first/last); distinct counts,
collect and a user reduce loop in Python because their state is a set, a list or user
code.

Semantics are the native engine's (``flow_jobs.plan.aggregations``): SQL NULL rules,
first/last/collect/reduce in the events' total order, and Spark's floating point rules:
NaN is larger than any other value for min/max, a sum holding NaN, or both infinities,
is NaN; one holding an infinity is that infinity. Float sums are as exact as summing
each window on its own (``_float_sums``): a huge value in one window does not leak into
the next through the prefix sums.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from flow_jobs.operators.frame import EventFrame, Values, to_python


class CapExceeded(RuntimeError):
    """A window's exact distinct count went over max_distinct_values_per_group."""


@dataclass(frozen=True)
class Ranges:
    lo: np.ndarray  # int64, inclusive
    hi: np.ndarray  # int64, inclusive

    def __len__(self) -> int:
        return len(self.lo)


@dataclass
class Context:
    """What an aggregator may read besides its own column: the frame and rank order."""

    frame: EventFrame
    kinds: dict[str, str]
    rank: np.ndarray  # position of each row in (event time, arrival) order
    order: np.ndarray  # rows in (event time, arrival) order: order[rank[i]] == i
    describe_window: Callable[[int], str]  # "[start, end) for group ..." for error messages

    @staticmethod
    def of(frame: EventFrame, kinds: dict[str, str], describe: Callable[[int], str]) -> Context:
        order = frame.order()
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order), dtype=np.int64)
        return Context(frame, kinds, rank, order, describe)

    def members(self, w: Ranges, i: int, valid: np.ndarray | None = None) -> np.ndarray:
        """Row indices of window ``i`` (only valid ones if a mask is given), in time order."""
        idx = np.arange(w.lo[i], w.hi[i] + 1)
        if valid is not None:
            idx = idx[valid[idx]]
        return idx[np.argsort(self.rank[idx], kind="stable")]


def prefix(x: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros(1, dtype=x.dtype), np.cumsum(x)])


def range_sum(x: np.ndarray, w: Ranges) -> np.ndarray:
    p = prefix(x)
    return p[w.hi + 1] - p[w.lo]


def range_reduce(x: np.ndarray, w: Ranges, op: np.ufunc) -> np.ndarray:
    """op (np.minimum / np.maximum) over each range, with a sparse table: O(n log n)."""
    if not len(w):
        return x[:0]
    lengths = w.hi - w.lo + 1
    levels = [x]
    while (1 << len(levels)) <= lengths.max():
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(op(prev[:-half], prev[half:]))
    level = np.floor(np.log2(lengths)).astype(np.int64)
    out = np.empty(len(w), dtype=x.dtype)
    for j in np.unique(level):
        m = level == j
        out[m] = op(levels[j][w.lo[m]], levels[j][w.hi[m] - (1 << j) + 1])
    return out


def _nullable(values: np.ndarray, valid: np.ndarray) -> Any:
    """A typed output column: numpy when nothing is NULL, else a pandas masked array
    (NULL stays NULL and a NaN stays NaN; a Python list would cost an object array)."""
    if values.dtype.kind in "iu":
        values = values.astype(np.int64)
        return values if valid.all() else pd.arrays.IntegerArray(values, ~valid)
    if values.dtype.kind == "f":
        values = values.astype(np.float64)
        return values if valid.all() else pd.arrays.FloatingArray(values, ~valid)
    out = values.tolist()
    for i in np.flatnonzero(~valid):
        out[i] = None
    return out


def _as_output(values: Values, kind: str, index: np.ndarray, present: np.ndarray) -> list[Any]:
    """Values at ``index`` as Python objects for the output frame (None where absent)."""
    out: list[Any] = [None] * len(index)
    for i in np.flatnonzero(present):
        out[i] = to_python(values, kind, int(index[i]))
    return out


@dataclass(eq=False)
class WindowAggregator(ABC):
    """One aggregation of a state-API window: reads ``column`` (None: the row), writes
    ``outputs``. A subclass's own parameters are its further (dataclass) fields."""

    column: str | None
    outputs: list[str]

    @abstractmethod
    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        """One column of per-window values (array or list) for each output column."""

    def values(self, ctx: Context) -> Values:
        assert self.column is not None
        return ctx.frame.columns[self.column]


class Count(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        if self.column is None:
            return [w.hi - w.lo + 1]
        return [range_sum(self.values(ctx).valid.astype(np.int64), w)]


class Sum(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        n = range_sum(v.valid.astype(np.int64), w)
        if kind == "int":
            return [_int_sums(v, ctx, w, n)]
        if kind == "float":
            return [_nullable(_float_sums(np.where(v.valid, v.data, 0.0), w), n > 0)]
        return [[_python_sum(v, ctx, w, i) for i in range(len(w))]]


class Avg(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        n = range_sum(v.valid.astype(np.int64), w)
        if kind in ("int", "float"):
            total = _float_sums(np.where(v.valid, v.data, 0).astype(np.float64), w)
            return [_nullable(total / np.maximum(n, 1), n > 0)]
        sums = [_python_sum(v, ctx, w, i) for i in range(len(w))]
        return [[None if s is None else s / int(c) for s, c in zip(sums, n, strict=True)]]


_INT64 = np.iinfo(np.int64)
_EPS = np.finfo(np.float64).eps


def _float_sums(x: np.ndarray, w: Ranges) -> np.ndarray:
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
        total = _python_sum(v, ctx, w, int(i))
        if total is not None and _INT64.min <= total <= _INT64.max:
            sums[i] = total
        else:
            present[i] = False
    return _nullable(sums, present)


def _python_sum(v: Values, ctx: Context, w: Ranges, i: int) -> Any:
    members = ctx.members(w, i, v.valid)
    return sum(v.data[members].tolist()) if len(members) else None


@dataclass(eq=False)
class Extreme(WindowAggregator):
    """min or max of a column."""

    largest: bool

    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        n = range_sum(v.valid.astype(np.int64), w)
        if kind == "float":
            return [self._floats(v, w, n)]
        if kind in ("int", "ts"):
            info = np.iinfo(np.int64)
            fill = info.min if self.largest else info.max
            data = np.where(v.valid, v.data, fill).astype(np.int64)
            best = range_reduce(data, w, np.maximum if self.largest else np.minimum)
            if kind == "ts":
                holder = Values(best, n > 0)
                return [_as_output(holder, "ts", np.arange(len(w)), n > 0)]
            return [_nullable(best, n > 0)]
        pick = max if self.largest else min
        out: list[Any] = []
        for i in range(len(w)):
            members = ctx.members(w, i, v.valid)
            out.append(pick(v.data[members].tolist()) if len(members) else None)
        return [out]

    def _floats(self, v: Values, w: Ranges, n: np.ndarray) -> Any:
        """Spark's order: NaN above +inf. max: a NaN wins (np.maximum propagates it);
        min: NaN only when the window holds nothing else."""
        if self.largest:
            data = np.where(v.valid, v.data, -np.inf)
            return _nullable(range_reduce(data, w, np.maximum), n > 0)
        number = v.valid & ~np.isnan(v.data)
        best = range_reduce(np.where(number, v.data, np.inf), w, np.minimum)
        best[range_sum(number.astype(np.int64), w) == 0] = np.nan
        return _nullable(best, n > 0)


@dataclass(eq=False)
class Positional(WindowAggregator):
    """first / last: the value of the earliest / latest row (event time, then arrival)."""

    last: bool

    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        v = self.values(ctx)
        big = np.iinfo(np.int64).max
        ranks = np.where(v.valid, ctx.rank, -1 if self.last else big)
        best = range_reduce(ranks, w, np.maximum if self.last else np.minimum)
        present = (best >= 0) & (best != big)
        rows = ctx.order[np.where(present, best, 0)]
        return [_as_output(v, ctx.kinds[self.column or ""], rows, present)]


@dataclass(eq=False)
class CountDistinctExact(WindowAggregator):
    cap: int
    pipeline: str  # for the error a cap hit raises

    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        out = []
        for i in range(len(w)):
            members = ctx.members(w, i, v.valid)
            distinct = len({_hashable(to_python(v, kind, int(j))) for j in members})
            if distinct > self.cap:
                raise CapExceeded(
                    f"count_distinct cap hit: max_distinct_values_per_group={self.cap} exceeded "
                    f"by {self.outputs[0]} ({distinct} values) on window "
                    f"{ctx.describe_window(i)} for pipeline {self.pipeline}"
                )
            out.append(distinct)
        return [out]


def _hashable(value: Any) -> Any:
    return tuple(map(_hashable, value)) if isinstance(value, list) else value


@dataclass(eq=False)
class CountDistinctSketch(WindowAggregator):
    """HyperLogLog in Apache DataSketches format (HLL_8, as Spark's hll_sketch_agg)."""

    lg_k: int

    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        from datasketches import hll_sketch, tgt_hll_type

        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        estimates, sketches = [], []
        for i in range(len(w)):
            sketch = hll_sketch(self.lg_k, tgt_hll_type.HLL_8)
            for j in ctx.members(w, i, v.valid):
                item = v.data[j]
                sketch.update(int(item) if kind == "int" else str(item))
            estimates.append(round(sketch.get_estimate()))
            sketches.append(sketch.serialize_compact())
        return [estimates, sketches][: len(self.outputs)]


class Collect(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        return [
            [
                [to_python(v, kind, int(j)) for j in ctx.members(w, i, v.valid)]
                for i in range(len(w))
            ]
        ]


@dataclass(eq=False)
class Reduce(WindowAggregator):
    """Reduce: initializer(first value), then reducer(aggregate, value)."""

    initializer: Callable[[Any], Any]
    reducer: Callable[[Any, Any], Any]
    row_columns: list[str]  # the row's columns, when no column is named

    def compute(self, ctx: Context, w: Ranges) -> list[list[Any]]:
        out = []
        for i in range(len(w)):
            if self.column is not None:
                v, kind = self.values(ctx), ctx.kinds[self.column]
                items = [to_python(v, kind, int(j)) for j in ctx.members(w, i, v.valid)]
            else:
                items = [
                    {
                        c: to_python(ctx.frame.columns[c], ctx.kinds[c], int(j))
                        for c in self.row_columns
                    }
                    for j in ctx.members(w, i)
                ]
            out.append(fold(items, self.initializer, self.reducer))
        return [out]


def fold(
    items: list[Any], initializer: Callable[[Any], Any], reducer: Callable[[Any, Any], Any]
) -> Any:
    """The reduce both engines apply, over values already in event-time order."""
    if not items:
        return None
    aggregate = initializer(items[0])
    for item in items[1:]:
        aggregate = reducer(aggregate, item)
    return aggregate
