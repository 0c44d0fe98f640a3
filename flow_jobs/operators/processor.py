"""The ``StatefulProcessor`` that runs sliding, count-based and current session windows.

Per group, all window state is one ``ValueState`` blob (the group's buffered events and
bookkeeping, pickled numpy arrays), read and written once per micro-batch: Spark's
state calls are round trips to the JVM (≈ 1.5 ms per group and batch measured here),
so one get and one put per group is what keeps the operator fast. The blob lives in
Spark's state store (RocksDB) inside the checkpoint, like every other operator's state.

Each group holds one event-time timer, at the lowest watermark at which its windows
have work (their family's ``due``; Spark fires a timer once the watermark is at or above
it: ``flow_jobs.operators.timers``). Sliding windows close once the watermark passes
their end (due: the oldest pending window's end + 1 ms). Late rows never reach this
code: Spark drops rows behind the watermark before the operator and counts them.
Count windows number their events once the watermark reaches them (due: the oldest
pending event's time), so that their order is the events' total order whatever the
micro-batches (``flow_jobs.operators.count_based``). Tumbling and hopping windows come
here when they reopen (``flow_jobs.operators.reopen``), with an integer revision column
last in their output; session windows when they emit "current"
(``flow_jobs.operators.session``; due: the end of the group's first open session).
Tumbling, hopping and session windows with an exact ``count_distinct`` come here too:
only here is its cap checked while a window is open.
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

from flow_jobs.operators import count_based, reopen, session, sliding, timers
from flow_jobs.operators.aggregators import Context, CountDistinctExact, Ranges, WindowAggregator
from flow_jobs.operators.frame import ColumnKind, EventFrame, frame_from_pandas

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
class WindowOperatorPlan:
    """Everything the processor needs, decided at plan time on the driver."""

    pipeline: str
    kind: str  # sliding | count_tumbling | count_hopping | count_sliding | session
    duration_ms: int | None
    count: int | None
    stride: int | None
    emit: str
    group_columns: tuple[str, ...]  # empty: one global group
    columns: tuple[ColumnKind, ...]
    #: built on the driver by each aggregator's unit (``flow_jobs.plan.aggregations``)
    aggregators: tuple[WindowAggregator, ...]
    output_columns: tuple[str, ...]
    hop_ms: int | None = None  # hopping (tumbling: the duration)
    #: tumbling / hopping windows that reopen (late_data = "reopen"): how long after
    #: their end, and the revision column last in the output
    allowed_lateness_ms: int = 0
    revision: bool = False
    #: False: time_mode = "processing" (count windows number events on arrival)
    event_time: bool = True
    gap_ms: int | None = None  # session

    @property
    def session(self) -> bool:
        return self.kind == "session"

    @property
    def count_based(self) -> bool:
        return self.kind.startswith("count_")

    @property
    def fixed(self) -> bool:
        """Tumbling and hopping windows (``flow_jobs.operators.reopen``)."""
        return self.kind in ("tumbling", "hopping")

    @property
    def bounds(self) -> reopen.Bounds:
        duration = self.duration_ms or 0
        return reopen.Bounds(duration, self.hop_ms or duration, self.allowed_lateness_ms)


class WindowProcessor(StatefulProcessor):
    def __init__(self, plan: WindowOperatorPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(STATE_VARIABLE, _STATE_SCHEMA)
        self.aggregators = list(self.plan.aggregators)
        self.kinds = {c.name: c.kind for c in self.plan.columns}

    # -- state -------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        if self.state.exists():
            blob = pickle.loads(self.state.get()[0])
            blob.setdefault("timer", None)  # count windows' state before they had one
            return blob
        empty = EventFrame.empty(list(self.plan.columns))
        if self.plan.count_based:
            return {"state": count_based.CountState(empty, 0, 0), "timer": None}
        if self.plan.fixed:
            return {"state": reopen.empty(empty), "timer": None}
        if self.plan.session:
            return {"state": session.SessionState(empty), "timer": None}
        return {"state": sliding.SlidingState(empty, np.empty(0, np.int64)), "timer": None}

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
        if self.plan.session:
            t = state.frame.t
            return (int(t[0]), int(t[-1]) + (self.plan.gap_ms or 0)) if len(t) else (None, None)
        if self.plan.fixed:
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
            yield from self._count_input(key, pdf, blob, timerValues.getCurrentWatermarkInMs())
        elif self.plan.fixed:
            yield from self._reopen_input(key, pdf, blob)
        elif self.plan.session:
            yield from self._session_input(key, pdf, blob)
        else:
            yield from self._sliding_input(key, pdf, blob)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        blob = self._load()
        watermark = timerValues.getCurrentWatermarkInMs()
        # Spark deletes this timer once the handler returns: ``_set_timer`` must know it.
        firing = timers.Firing(expiredTimerInfo.getExpiryTimeInMs(), watermark)
        if self.plan.count_based:
            yield from self._count_number(key, blob, watermark, firing)
            return
        if self.plan.fixed:
            yield from self._reopen_close(key, blob, firing)
            return
        if self.plan.session:
            gap = self.plan.gap_ms or 0
            before = blob["state"]
            state, closed = session.close(before, watermark, gap)
            if self.plan.emit == "final" and len(closed):
                starts, ends = session.bounds(before.frame, closed, gap)
                yield self._output(key, before.frame, closed, starts, ends, None)
            blob["state"] = state
            self._set_timer(blob, firing)
            self._save(blob, empty=not len(state.frame))
            return
        state, done = sliding.close(blob["state"], watermark, self.plan.duration_ms or 0)
        if self.plan.emit == "final" and len(done):
            yield self._sliding_output(key, blob["state"].frame, done)
        blob["state"] = state
        self._set_timer(blob, firing)
        self._save(blob, empty=not len(state.pending) and not len(state.frame))

    def close(self) -> None:
        return None

    # -- sliding -----------------------------------------------------------------------
    def _sliding_input(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any]
    ) -> Iterator[pd.DataFrame]:
        new = frame_from_pandas(pdf, list(self.plan.columns))
        state, fresh = sliding.add(blob["state"], new)
        blob["state"] = state
        duration = self.plan.duration_ms or 0
        self._check_open(
            key,
            state.frame,
            sliding.ranges(state.frame, state.pending, duration),
            sliding.window_starts(state.pending, duration),
            state.pending,
        )
        if self.plan.emit == "current":
            changed = np.union1d(
                fresh, sliding.touched(state.pending, new.t, self.plan.duration_ms or 0)
            )
            if len(changed):
                yield self._sliding_output(key, state.frame, changed)
        self._set_timer(blob)
        self._save(blob, empty=False)

    def _due(self, state: Any) -> int | None:
        """The lowest watermark at which the group's windows have work."""
        if self.plan.count_based:
            return count_based.due(state) if self.plan.event_time else None
        if self.plan.fixed:
            return reopen.due(state, self.plan.bounds)
        if self.plan.session:
            return session.due(state, self.plan.gap_ms or 0)
        return sliding.due(state)

    def _set_timer(self, blob: dict[str, Any], firing: timers.Firing | None = None) -> None:
        """Hold the group's timer at its ``due`` (``flow_jobs.operators.timers``).

        State saved before timers were set at their due watermark has its timer at
        ``due - 1``, which Spark may have fired and deleted already (a group it left with
        no timer): the first call for such a group deletes that one and registers the new
        one whatever it was."""
        blob["timer"] = timers.settle(
            self.handle,
            blob["timer"],
            self._due(blob["state"]),
            firing,
            held_known=blob.get("timer_rule") == timers.RULE,
        )
        blob["timer_rule"] = timers.RULE

    def _sliding_output(self, key: Any, frame: EventFrame, ends: np.ndarray) -> pd.DataFrame:
        starts = sliding.window_starts(ends, self.plan.duration_ms or 0)
        w = sliding.ranges(frame, ends, self.plan.duration_ms or 0)
        return self._output(key, frame, w, starts, ends, None)

    # -- tumbling / hopping (that reopen, or hold an exact count_distinct) ---------------
    def _reopen_input(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any]
    ) -> Iterator[pd.DataFrame]:
        new = frame_from_pandas(pdf, list(self.plan.columns))
        state, reopened = reopen.add(blob["state"], new, self.plan.bounds)
        blob["state"] = state
        self._check_open(
            key,
            state.frame,
            reopen.ranges(state.frame, state.starts, self.plan.bounds),
            state.starts,
            state.starts + (self.plan.duration_ms or 0),
        )
        if self.plan.emit == "current":  # every window holding a new row, as it stands
            touched = np.searchsorted(state.starts, reopen.window_starts(new.t, self.plan.bounds))
            if len(touched):
                yield self._reopen_output(key, state, touched)
        elif len(reopened):  # late rows corrected emitted windows: they emit again
            yield self._reopen_output(key, state, reopened)
        self._set_timer(blob)
        self._save(blob, empty=False)

    def _reopen_close(
        self, key: Any, blob: dict[str, Any], firing: timers.Firing
    ) -> Iterator[pd.DataFrame]:
        before = blob["state"]
        state, first = reopen.close(before, firing.watermark_ms, self.plan.bounds)
        if self.plan.emit == "final" and len(first):
            yield self._reopen_output(key, before, first)
        blob["state"] = state
        self._set_timer(blob, firing)
        self._save(blob, empty=not len(state.starts))

    def _reopen_output(
        self, key: Any, state: reopen.ReopenState, index: np.ndarray
    ) -> pd.DataFrame:
        starts = state.starts[index]
        w = reopen.ranges(state.frame, starts, self.plan.bounds)
        ends = starts + (self.plan.duration_ms or 0)
        revisions = state.revisions[index].astype(np.int32) if self.plan.revision else None
        return self._output(key, state.frame, w, starts, ends, None, revisions)

    # -- session (emit = "current", or an exact count_distinct) --------------------------
    def _session_input(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any]
    ) -> Iterator[pd.DataFrame]:
        new = frame_from_pandas(pdf, list(self.plan.columns))
        gap = self.plan.gap_ms or 0
        state, changed = session.add(blob["state"], new, gap)
        blob["state"] = state
        every = session.sessions(state.frame.t, gap)
        self._check_open(key, state.frame, every, *session.bounds(state.frame, every, gap))
        if self.plan.emit == "current" and len(changed):
            starts, ends = session.bounds(state.frame, changed, gap)
            yield self._output(key, state.frame, changed, starts, ends, None)
        self._set_timer(blob)
        self._save(blob, empty=False)

    # -- count-based -------------------------------------------------------------------
    def _count_input(
        self, key: Any, pdf: pd.DataFrame, blob: dict[str, Any], watermark_ms: int
    ) -> Iterator[pd.DataFrame]:
        new = frame_from_pandas(pdf, list(self.plan.columns))
        count, stride = self.plan.count or 0, self.plan.stride or 0
        state, changed = count_based.add(
            blob["state"], new, count, stride, self.plan.emit == "current"
        )
        if changed is not None and len(changed.ks):
            yield self._count_output(key, changed)
        blob["state"] = state
        yield from self._count_number(key, blob, watermark_ms)

    def _count_number(
        self,
        key: Any,
        blob: dict[str, Any],
        watermark_ms: int,
        firing: timers.Firing | None = None,
    ) -> Iterator[pd.DataFrame]:
        count, stride = self.plan.count or 0, self.plan.stride or 0
        watermark = watermark_ms if self.plan.event_time else None
        state, complete = count_based.number(blob["state"], watermark, count, stride)
        w = count_based.open_windows(state, count, stride)
        self._check_open(key, state.frame, w, state.frame.t[w.lo], state.frame.t[w.hi])
        if self.plan.emit == "final" and len(complete.ks):
            yield self._count_output(key, complete)
        blob["state"] = state
        self._set_timer(blob, firing)
        self._save(blob, empty=not len(state.frame))

    def _count_output(self, key: Any, windows: count_based.Windows) -> pd.DataFrame:
        w, t = windows.ranges, windows.frame.t
        return self._output(key, windows.frame, w, t[w.lo], t[w.hi], windows.ks)

    # -- the exact distinct-count cap, while windows are open --------------------------
    def _check_open(
        self, key: Any, frame: EventFrame, w: Ranges, starts: np.ndarray, ends: np.ndarray
    ) -> None:
        """Fail now if an open window holds more distinct values than its cap allows:
        its state must not grow until the window closes. Free unless the group's held
        values outnumber the cap (no window can hold more than all of them)."""
        for a in self.aggregators:
            if not isinstance(a, CountDistinctExact) or not len(w):
                continue
            values = frame.columns[a.column or ""]
            if _distinct_at_most(values.data[values.valid], a.cap):
                continue
            a.compute(Context.of(frame, self.kinds, self._describe(key, starts, ends)), w)

    def _describe(self, key: Any, starts: np.ndarray, ends: np.ndarray) -> Callable[[int], str]:
        group = dict(zip(self.plan.group_columns, key, strict=False))
        # sliding and count windows hold their end
        closing = ")" if self.plan.fixed or self.plan.session else "]"

        def describe(i: int) -> str:
            bounds = f"[{_iso(starts[i])}, {_iso(ends[i])}{closing}"
            return f"{bounds} for group {group}" if group else bounds

        return describe

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
        ctx = Context.of(frame, self.kinds, self._describe(key, starts, ends))
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


def _distinct_at_most(values: np.ndarray, cap: int) -> bool:
    if len(values) <= cap:
        return True
    try:
        return len(pd.unique(values)) <= cap
    except TypeError:  # unhashable items (arrays): let the aggregator count them
        return False


def _iso(ms: Any) -> str:
    return pd.Timestamp(int(ms), unit="ms", tz="UTC").isoformat().replace("+00:00", "Z")
