"""Tumbling and hopping windows that reopen (``late_data = "reopen"``).

The rules: docs/spec-reference.md, "Reopening windows".

Spark's native window aggregation emits a window once, when the watermark passes its
end (output mode append), or on every change while it is open (update); neither emits
at the end *and again* each time a late row corrects a closed window. These windows
therefore run on the arbitrary-state API, like sliding windows, and keep their events
(every aggregator, first/last, distinct counts and collect included, is then computed
exactly as for the other state-API windows).

Windows are Spark's ``window()``: aligned to the epoch, ``[start, start + duration)``,
one every ``hop`` (tumbling: ``hop = duration``); a window exists once a row falls in it.

Spark's watermark ``W`` runs ``allowed_lateness_ms`` behind the pipeline's (the plan
gives ``withWatermark`` the delay ``lateness_ms + allowed_lateness_ms``), so rows up to
the allowed lateness still reach the operator, and rows behind ``W`` are dropped (and
counted) at the sources like any late row. A window ``[s, e)`` of a group:

* first emits, with revision 1, once ``W + allowed_lateness_ms >= e``: the pipeline's
  watermark has passed its end, when ``late_data = "drop"`` would emit it;
* re-emits, revision + 1, in every micro-batch that brings it rows after that;
* leaves the state once ``W >= e`` (the pipeline's watermark is ``allowed_lateness_ms``
  past its end): any row of it is then behind ``W``, so late.

A group's state is its held windows with the revision each last emitted (0: not yet),
and the events inside them, in (event time, arrival) order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flow_jobs.operators.aggregators import Ranges
from flow_jobs.operators.frame import EventFrame
from flow_jobs.windows.family import Emission, StateFamily


@dataclass(frozen=True)
class Bounds:
    duration_ms: int
    hop_ms: int
    allowed_lateness_ms: int


@dataclass
class ReopenState:
    frame: EventFrame  # time-ordered events of the held windows
    starts: np.ndarray  # int64, sorted: the held windows
    revisions: np.ndarray  # int64: the revision each window last emitted, 0 = none yet


def empty(frame: EventFrame) -> ReopenState:
    return ReopenState(frame, np.empty(0, np.int64), np.empty(0, np.int64))


def window_starts(t: np.ndarray, b: Bounds) -> np.ndarray:
    """The distinct starts of every window holding one of the times ``t`` (epoch ms)."""
    if not len(t):
        return np.empty(0, np.int64)
    last = t - np.mod(t, b.hop_ms)  # floor, also before the epoch
    k = -(-b.duration_ms // b.hop_ms)
    candidates = last[:, None] - b.hop_ms * np.arange(k, dtype=np.int64)[None, :]
    inside = candidates + b.duration_ms > t[:, None]
    return np.unique(candidates[inside])


def add(state: ReopenState, new: EventFrame, b: Bounds) -> tuple[ReopenState, np.ndarray]:
    """Buffer new events; returns the state and the indices (into its windows) of the
    emitted windows they changed, whose revision this call bumps: they re-emit now."""
    frame = state.frame.concat(new).time_ordered()
    touched = window_starts(new.t, b)
    starts = np.union1d(state.starts, touched)
    revisions = np.zeros(len(starts), np.int64)
    revisions[np.searchsorted(starts, state.starts)] = state.revisions
    hit = np.searchsorted(starts, touched)
    reopened = hit[revisions[hit] > 0]
    revisions[reopened] += 1
    return ReopenState(frame, starts, revisions), reopened


def close(state: ReopenState, watermark_ms: int, b: Bounds) -> tuple[ReopenState, np.ndarray]:
    """At Spark's watermark ``watermark_ms``: the indices of the windows that emit for
    the first time (their revision set to 1), and the state without the windows
    (and events) past their allowed lateness. The indices are into ``state``'s
    windows, which keeps its events: compute the emitted rows from it."""
    ends = state.starts + b.duration_ms
    first = np.flatnonzero((state.revisions == 0) & (ends <= watermark_ms + b.allowed_lateness_ms))
    state.revisions[first] = 1
    held = ends > watermark_ms
    starts, revisions = state.starts[held], state.revisions[held]
    keep = np.flatnonzero(state.frame.t >= starts[0]) if len(starts) else np.empty(0, np.int64)
    return ReopenState(state.frame.take(keep), starts, revisions), first


def ranges(frame: EventFrame, starts: np.ndarray, b: Bounds) -> Ranges:
    """Index ranges of windows ``[start, start + duration)`` in a time-ordered frame."""
    return Ranges(
        np.searchsorted(frame.t, starts, side="left").astype(np.int64),
        (np.searchsorted(frame.t, starts + b.duration_ms, side="left") - 1).astype(np.int64),
    )


def due(state: ReopenState, b: Bounds) -> int | None:
    """The lowest watermark at which ``close`` has work for this group: a window not
    emitted yet is due at ``W = end - allowed_lateness_ms``, every window leaves at
    ``W = end`` (the group's timer is at it: ``flow_jobs.windows.timers``)."""
    if not len(state.starts):
        return None
    ends = state.starts + b.duration_ms
    return int(np.where(state.revisions == 0, ends - b.allowed_lateness_ms, ends).min())


@dataclass(frozen=True)
class Fixed(StateFamily):
    """Tumbling and hopping windows on the state API; with ``revision``, each emitted
    row carries the revision it is (``late_data = "reopen"``)."""

    bounds: Bounds
    revision: bool = False

    def empty(self, frame: EventFrame) -> ReopenState:
        return empty(frame)

    def add(
        self, state: ReopenState, new: EventFrame, emit_current: bool
    ) -> tuple[ReopenState, Emission | None]:
        state, reopened = add(state, new, self.bounds)
        if emit_current:  # every window holding a new row, as it stands
            touched = np.searchsorted(state.starts, window_starts(new.t, self.bounds))
            return state, self._windows(state, touched) if len(touched) else None
        # late rows corrected emitted windows: they emit again
        return state, self._windows(state, reopened) if len(reopened) else None

    def close(self, state: ReopenState, watermark_ms: int | None) -> tuple[ReopenState, Emission]:
        after, first = close(state, watermark_ms or 0, self.bounds)
        return after, self._windows(state, first)

    def due(self, state: ReopenState) -> int | None:
        return due(state, self.bounds)

    def open_windows(self, state: ReopenState) -> Emission:
        return self._windows(state, np.arange(len(state.starts)))

    def held(self, state: ReopenState) -> bool:
        return bool(len(state.starts))

    def span(self, state: ReopenState) -> tuple[int | None, int | None]:
        starts = state.starts  # sorted
        if not len(starts):
            return None, None
        return int(starts[0]), int(starts[-1]) + self.bounds.duration_ms

    def _windows(self, state: ReopenState, index: np.ndarray) -> Emission:
        starts = state.starts[index]
        revisions = state.revisions[index].astype(np.int32) if self.revision else None
        return Emission(
            state.frame,
            ranges(state.frame, starts, self.bounds),
            starts,
            starts + self.bounds.duration_ms,
            revisions=revisions,
        )

    @classmethod
    def of(cls, plan: Any) -> Fixed:
        duration = plan.duration_ms or 0
        bounds = Bounds(duration, plan.hop_ms or duration, plan.allowed_lateness_ms)
        return cls(bounds, plan.revision)
