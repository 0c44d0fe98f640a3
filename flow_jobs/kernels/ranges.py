"""Windows as index ranges over a group's events, and what state-API aggregators compute
with: the interface (``WindowAggregator``), the context and vectorised range primitives.

A window is an inclusive index range ``[lo, hi]`` into a group's ``EventFrame``, which
holds its events in their total order (event time, then Kafka position). Each
aggregator (one module each in ``flow_jobs.aggregations``) computes its value for every
window of a batch in one call, vectorised with numpy where the aggregate allows it
(prefix sums, a sparse table for range minima and maxima); distinct counts, collect and
a user reduce loop in Python because their state is a set, a list or user code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from flow_jobs.kernels.frame import EventFrame, Values, to_python


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


def nullable(values: np.ndarray, valid: np.ndarray) -> Any:
    """A typed output column: numpy when nothing is NULL, else a pandas masked array
    (NULL stays NULL and a NaN stays NaN; a Python list would cost an object array)."""
    import pandas as pd  # not at import: Spark's state workers start often

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


def as_output(values: Values, kind: str, index: np.ndarray, present: np.ndarray) -> list[Any]:
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

    def check_open(self, frame: EventFrame, w: Ranges, context: Callable[[], Context]) -> None:
        """Check a group's open windows ``w`` over ``frame`` on every input (``context``
        builds the ``Context`` when a check needs it): an aggregator whose state is
        capped while a window is open fails here (the others have nothing to check)."""
        return
