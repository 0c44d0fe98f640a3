"""Sliding windows (``kind = "sliding"``, ``duration_ms``), per row (Quix Streams
semantics, docs/spec-reference.md "Windows"), on the state API: Spark has no such window.

Each distinct event time ``t`` of a group defines one window ``[t - duration, t]``,
inclusive at both ends (its start clamped at 0, as Quix does), aggregating every event
of the group inside it. No other window exists, so none is redundant. A window is
final once the watermark passes ``t``: no event at or before ``t`` can still arrive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from flow_jobs.kernels.frame import EventFrame, legacy_frame
from flow_jobs.kernels.ranges import Ranges
from flow_jobs.spec.windows import register_window_family
from flow_jobs.state_codec import Fields, legacy, listed
from flow_jobs.windows.family import (
    CloseRule,
    Emission,
    RuleClock,
    StateFamily,
)
from flow_jobs.windows.state_api import StateApiWindow


@dataclass
class SlidingState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "window.sliding"

    frame: EventFrame  # time-ordered events a pending or future window may still need
    pending: np.ndarray  # sorted distinct event times whose window is not emitted yet

    def to_fields(self) -> dict[str, pa.Array]:
        return {"frame": self.frame.to_field(), "pending": listed(self.pending)}

    @classmethod
    def from_fields(cls, fields: Fields) -> SlidingState:
        return cls(EventFrame.from_field(fields, "frame"), fields.array("pending"))


@legacy.reads(
    ("flow_jobs.windows.sliding", "SlidingState"), ("flow_jobs.operators.sliding", "SlidingState")
)
def _unpickled(r: Any) -> SlidingState:
    return SlidingState(legacy_frame(vars(r)["frame"]), vars(r)["pending"])


def add(state: SlidingState, new: EventFrame) -> tuple[SlidingState, np.ndarray]:
    """Buffer new events; returns the state and the event times of new windows."""
    frame = state.frame.concat(new).time_ordered()
    fresh = np.setdiff1d(np.unique(new.t), state.pending, assume_unique=True)
    return SlidingState(frame, np.union1d(state.pending, fresh)), fresh


def ranges(frame: EventFrame, ends: np.ndarray, duration_ms: int) -> Ranges:
    """Index ranges of the windows ending at ``ends`` in a time-ordered frame."""
    starts = window_starts(ends, duration_ms)
    return Ranges(
        np.searchsorted(frame.t, starts, side="left").astype(np.int64),
        (np.searchsorted(frame.t, ends, side="right") - 1).astype(np.int64),
    )


def window_starts(ends: np.ndarray, duration_ms: int) -> np.ndarray:
    return np.maximum(ends - duration_ms, 0)


def touched(pending: np.ndarray, new_times: np.ndarray, duration_ms: int) -> np.ndarray:
    """Pending windows that contain at least one of ``new_times`` (for emit = current)."""
    if not len(new_times) or not len(pending):
        return pending[:0]
    times = np.sort(new_times)
    # a window [end - d, end] contains a new time iff the first time >= start is <= end
    first = np.searchsorted(times, window_starts(pending, duration_ms), side="left")
    inside = first < len(times)
    inside[inside] = times[first[inside]] <= pending[inside]
    return pending[inside]


def due(state: SlidingState) -> int | None:
    """The lowest watermark at which ``close`` has work: one above the oldest pending
    window's end (a window closes once the watermark is above its end; the group's
    timer is at it: ``flow_jobs.kernels.timers``)."""
    return int(state.pending[0]) + 1 if len(state.pending) else None


def close(
    state: SlidingState, watermark_ms: int, duration_ms: int
) -> tuple[SlidingState, np.ndarray]:
    """Windows the watermark has passed, and the state without what no window needs."""
    done = state.pending[state.pending < watermark_ms]
    pending = state.pending[state.pending >= watermark_ms]
    # Pending windows need events from their start on; windows of events still to come
    # (at or after the watermark) need events from watermark - duration on.
    horizon = min(int(pending[0]) if len(pending) else watermark_ms, watermark_ms) - duration_ms
    keep = np.flatnonzero(state.frame.t >= horizon)
    return SlidingState(state.frame.take(keep), pending), done


@dataclass(frozen=True)
class Sliding(StateFamily):
    """Sliding windows of ``duration_ms``, one per distinct event time of a group."""

    STATE: ClassVar[type[SlidingState]] = SlidingState
    duration_ms: int
    holds_end = True

    def empty(self, frame: EventFrame) -> SlidingState:
        return SlidingState(frame, np.empty(0, np.int64))

    def add(
        self, state: SlidingState, new: EventFrame, emit_current: bool
    ) -> tuple[SlidingState, Emission | None]:
        state, fresh = add(state, new)
        if not emit_current:
            return state, None
        changed = np.union1d(fresh, touched(state.pending, new.t, self.duration_ms))
        return state, self._windows(state.frame, changed)

    def close(self, state: SlidingState, watermark_ms: int | None) -> tuple[SlidingState, Emission]:
        after, done = close(state, watermark_ms or 0, self.duration_ms)
        return after, self._windows(state.frame, done)

    def due(self, state: SlidingState) -> int | None:
        return due(state)

    def open_windows(self, state: SlidingState) -> Emission:
        return self._windows(state.frame, state.pending)

    def held(self, state: SlidingState) -> bool:
        return bool(len(state.pending) or len(state.frame))

    def span(self, state: SlidingState) -> tuple[int | None, int | None]:
        pending = state.pending  # sorted: the first window's start, the last one's end
        if not len(pending):
            return None, None
        return int(window_starts(pending[:1], self.duration_ms)[0]), int(pending[-1])

    def _windows(self, frame: EventFrame, ends: np.ndarray) -> Emission:
        starts = window_starts(ends, self.duration_ms)
        return Emission(frame, ranges(frame, ends, self.duration_ms), starts, ends)

    def close_rules(self, state: SlidingState, held: Emission, clock: RuleClock) -> list[CloseRule]:
        # a window [t - duration, t] holds its end: final once the watermark passes t
        return [
            CloseRule(f"closes when {clock.watermark} > end {clock.at(int(e))}", int(e) + 1)
            for e in held.ends
        ]


@register_window_family
class SlidingWindow(StateApiWindow):
    """``kind = "sliding"``: one window ``[t - duration_ms, t]`` per distinct event time
    ``t`` of a group."""

    kind: Literal["sliding"]
    duration_ms: Annotated[int, Field(gt=0)] | None = None

    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {"sliding": ("duration_ms",)}
    REOPEN_REFUSED: ClassVar[str | None] = (
        "each event time is its own window; reopening one is not there yet"
    )

    @property
    def size_text(self) -> str:
        return f"{self.duration_ms} ms per event"

    def state_family(self) -> Sliding:
        assert self.duration_ms is not None
        return Sliding(self.duration_ms)
