"""The ``StatefulProcessor`` that runs sliding and count-based windows in Spark.

Per group, all window state is one ``ValueState`` blob (the group's buffered events and
bookkeeping, pickled numpy arrays), read and written once per micro-batch: Spark's
state calls are round trips to the JVM (≈ 1.5 ms per group and batch measured here),
so one get and one put per group is what keeps the operator fast. The blob lives in
Spark's state store (RocksDB) inside the checkpoint, like every other operator's state.

Sliding windows use one event-time timer per group, at the end of its oldest pending
window + 1 ms: Spark fires it once the watermark passes that end. Late rows never reach
this code: Spark drops rows behind the watermark before the operator and counts them.
Count windows need no timer: they close on arrival. Tumbling and hopping windows come
here only when they reopen (``flow_jobs.operators.reopen``), with one timer per group
too, and an integer revision column last in their output.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from flow_jobs.operators import count_based, reopen, sliding
from flow_jobs.operators.aggregators import (
    Avg,
    Collect,
    Context,
    Count,
    CountDistinctExact,
    CountDistinctSketch,
    Extreme,
    Positional,
    Ranges,
    Reduce,
    Sum,
    WindowAggregator,
    range_reduce,
)
from flow_jobs.operators.frame import ColumnKind, EventFrame, arrival_order, frame_from_pandas

#: The group's window state, plus the time span of its open windows (epoch ms): read by
#: the max_groups_per_window check (``flow_jobs.runtime.caps``) without unpickling.
_STATE_SCHEMA = StructType(
    [
        StructField("blob", BinaryType()),
        StructField("span_start", LongType()),
        StructField("span_end", LongType()),
    ]
)
STATE_VARIABLE = "window_state"


@dataclass(frozen=True)
class AggregatorSpec:
    """What an aggregator needs, in a form that pickles (built on the driver)."""

    agg: str
    column: str | None
    outputs: tuple[str, ...]
    lg_k: int = 14
    cap: int = 0
    initializer: Callable[[Any], Any] | None = None
    reducer: Callable[[Any, Any], Any] | None = None
    row_columns: tuple[str, ...] = ()

    def build(self, pipeline: str) -> WindowAggregator:
        outputs = list(self.outputs)
        a = self.agg
        if a == "count":
            return Count(self.column, outputs)
        if a == "sum":
            return Sum(self.column, outputs)
        if a == "avg":
            return Avg(self.column, outputs)
        if a in ("min", "max"):
            return Extreme(self.column, outputs, largest=a == "max")
        if a in ("first", "last"):
            return Positional(self.column, outputs, last=a == "last")
        if a == "count_distinct" and self.cap:
            return CountDistinctExact(self.column, outputs, self.cap, pipeline)
        if a == "count_distinct":
            return CountDistinctSketch(self.column, outputs, self.lg_k)
        if a == "collect":
            return Collect(self.column, outputs)
        if a == "reduce":
            assert self.initializer is not None and self.reducer is not None
            return Reduce(
                self.column, outputs, self.initializer, self.reducer, list(self.row_columns)
            )
        raise ValueError(f"no state-engine aggregator for {a!r}")


@dataclass(frozen=True)
class WindowOperatorPlan:
    """Everything the processor needs, decided at plan time on the driver."""

    pipeline: str
    kind: str  # sliding | count_tumbling | count_hopping | count_sliding
    duration_ms: int | None
    count: int | None
    stride: int | None
    emit: str
    group_columns: tuple[str, ...]  # empty: one global group
    columns: tuple[ColumnKind, ...]
    aggregators: tuple[AggregatorSpec, ...]
    output_columns: tuple[str, ...]
    hop_ms: int | None = None  # hopping (tumbling: the duration)
    #: set: tumbling / hopping windows that reopen (late_data = "reopen")
    allowed_lateness_ms: int | None = None

    @property
    def count_based(self) -> bool:
        return self.kind.startswith("count_")

    @property
    def reopens(self) -> bool:
        return self.allowed_lateness_ms is not None

    @property
    def bounds(self) -> reopen.Bounds:
        duration = self.duration_ms or 0
        return reopen.Bounds(duration, self.hop_ms or duration, self.allowed_lateness_ms or 0)


class WindowProcessor(StatefulProcessor):
    def __init__(self, plan: WindowOperatorPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(STATE_VARIABLE, _STATE_SCHEMA)
        self.aggregators = [a.build(self.plan.pipeline) for a in self.plan.aggregators]
        self.kinds = {c.name: c.kind for c in self.plan.columns}

    # -- state -------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        if self.state.exists():
            return pickle.loads(self.state.get()[0])
        empty = EventFrame.empty(list(self.plan.columns))
        if self.plan.count_based:
            return {"state": count_based.CountState(empty, 0, 0)}
        if self.plan.reopens:
            return {"state": reopen.empty(empty), "timer": None, "seq": 0}
        return {
            "state": sliding.SlidingState(empty, np.empty(0, np.int64)),
            "timer": None,
            "seq": 0,
        }

    def _save(self, blob: dict[str, Any], empty: bool) -> None:
        if empty:
            self.state.clear()
            return
        start, end = self._span(blob["state"])
        self.state.update((pickle.dumps(blob, protocol=5), start, end))

    def _span(self, state: Any) -> tuple[int | None, int | None]:
        """The time span the group's open windows cover."""
        if self.plan.count_based:
            t = state.frame.t
            return (int(t.min()), int(t.max())) if len(t) else (None, None)
        if self.plan.reopens:
            starts = state.starts
            if not len(starts):
                return None, None
            return int(starts[0]), int(starts[-1]) + (self.plan.duration_ms or 0)
        pending = state.pending
        if not len(pending):
            return None, None
        start = sliding.window_starts(pending[:1], self.plan.duration_ms or 0)[0]
        return int(start), int(pending[-1])

    # -- Spark callbacks ---------------------------------------------------------------
    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        pdf = pd.concat(list(rows), ignore_index=True)
        blob = self._load()
        if self.plan.count_based:
            yield from self._count_windows(key, pdf, blob)
        elif self.plan.reopens:
            yield from self._reopen_input(key, pdf, blob)
        else:
            yield from self._sliding_input(key, pdf, blob)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        blob = self._load()
        blob["timer"] = None  # this one has fired
        if self.plan.reopens:
            yield from self._reopen_close(key, blob, timerValues.getCurrentWatermarkInMs())
            return
        state, done = sliding.close(
            blob["state"], timerValues.getCurrentWatermarkInMs(), self.plan.duration_ms or 0
        )
        if self.plan.emit == "final" and len(done):
            yield self._sliding_output(key, blob["state"].frame, done)
        blob["state"] = state
        self._set_timer(blob)
        self._save(blob, empty=not len(state.pending) and not len(state.frame))

    def close(self) -> None:
        return None

    # -- sliding -----------------------------------------------------------------------
    def _sliding_input(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any]
    ) -> Iterator[pd.DataFrame]:
        new = frame_from_pandas(arrival_order(pdf), list(self.plan.columns), blob["seq"])
        blob["seq"] += len(new)
        state, fresh = sliding.add(blob["state"], new)
        blob["state"] = state
        if self.plan.emit == "current":
            changed = np.union1d(
                fresh, sliding.touched(state.pending, new.t, self.plan.duration_ms or 0)
            )
            if len(changed):
                yield self._sliding_output(key, state.frame, changed)
        self._set_timer(blob)
        self._save(blob, empty=False)

    def _set_timer(self, blob: dict[str, Any]) -> None:
        if self.plan.reopens:
            wanted = reopen.next_timer(blob["state"], self.plan.bounds)
        else:
            pending = blob["state"].pending
            wanted = int(pending[0]) + 1 if len(pending) else None
        if blob["timer"] != wanted:
            if blob["timer"] is not None:
                self.handle.deleteTimer(blob["timer"])
            if wanted is not None:
                self.handle.registerTimer(wanted)
            blob["timer"] = wanted

    def _sliding_output(self, key: Any, frame: EventFrame, ends: np.ndarray) -> pd.DataFrame:
        starts = sliding.window_starts(ends, self.plan.duration_ms or 0)
        w = sliding.ranges(frame, ends, self.plan.duration_ms or 0)
        return self._output(key, frame, w, starts, ends, None)

    # -- tumbling / hopping that reopen ------------------------------------------------
    def _reopen_input(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any]
    ) -> Iterator[pd.DataFrame]:
        new = frame_from_pandas(arrival_order(pdf), list(self.plan.columns), blob["seq"])
        blob["seq"] += len(new)
        state, reopened = reopen.add(blob["state"], new, self.plan.bounds)
        blob["state"] = state
        if len(reopened):  # late rows corrected emitted windows: they emit again
            yield self._reopen_output(key, state, reopened)
        self._set_timer(blob)
        self._save(blob, empty=False)

    def _reopen_close(
        self, key: Any, blob: dict[str, Any], watermark_ms: int
    ) -> Iterator[pd.DataFrame]:
        before = blob["state"]
        state, first = reopen.close(before, watermark_ms, self.plan.bounds)
        if len(first):
            yield self._reopen_output(key, before, first)
        blob["state"] = state
        self._set_timer(blob)
        self._save(blob, empty=not len(state.starts))

    def _reopen_output(
        self, key: Any, state: reopen.ReopenState, index: np.ndarray
    ) -> pd.DataFrame:
        starts = state.starts[index]
        w = reopen.ranges(state.frame, starts, self.plan.bounds)
        ends = starts + (self.plan.duration_ms or 0)
        return self._output(
            key, state.frame, w, starts, ends, None, state.revisions[index].astype(np.int32)
        )

    # -- count-based -------------------------------------------------------------------
    def _count_windows(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any]
    ) -> Iterator[pd.DataFrame]:
        state = blob["state"]
        new = frame_from_pandas(arrival_order(pdf), list(self.plan.columns), state.seen)
        count, stride = self.plan.count or 0, self.plan.stride or 0
        kept, frame, w, ks = count_based.add(state, new, count, stride)
        if len(ks):
            starts = range_reduce(frame.t, w, np.minimum)
            ends = range_reduce(frame.t, w, np.maximum)
            yield self._output(key, frame, w, starts, ends, ks)
        blob["state"] = kept
        self._save(blob, empty=False)

    # -- output ------------------------------------------------------------------------
    def _output(
        self,
        key: Any,
        frame: EventFrame,
        w: Ranges,
        starts: np.ndarray,
        ends: np.ndarray,
        indices: np.ndarray | None,
        revisions: np.ndarray | None = None,
    ) -> pd.DataFrame:
        group = dict(zip(self.plan.group_columns, key, strict=False))
        closing = ")" if self.plan.reopens else "]"  # sliding and count windows hold their end

        def describe(i: int) -> str:
            bounds = f"[{_iso(starts[i])}, {_iso(ends[i])}{closing}"
            return f"{bounds} for group {group}" if group else bounds

        ctx = Context.of(frame, self.kinds, describe)
        data: dict[str, Any] = {
            self.plan.output_columns[0]: pd.to_datetime(starts, unit="ms", utc=True),
            self.plan.output_columns[1]: pd.to_datetime(ends, unit="ms", utc=True),
        }
        if indices is not None:
            data[self.plan.output_columns[2]] = indices
        for name in self.plan.group_columns:
            data[name] = [group[name]] * len(w)
        for aggregator in self.aggregators:
            for name, values in zip(aggregator.outputs, aggregator.compute(ctx, w), strict=True):
                data[name] = values
        if revisions is not None:
            data[self.plan.output_columns[-1]] = revisions
        return pd.DataFrame(data, columns=list(self.plan.output_columns))


def _iso(ms: Any) -> str:
    return pd.Timestamp(int(ms), unit="ms", tz="UTC").isoformat().replace("+00:00", "Z")
