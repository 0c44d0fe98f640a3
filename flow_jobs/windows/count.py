"""Count-based windows (``kind = "count_tumbling"``, ``"count_hopping"``,
``"count_sliding"``; Quix Streams semantics), in an order no cut changes, on the state
API: Spark has no such window.

A group's events are numbered 0, 1, 2, ... in their total order: event time, then
Kafka position (``flow_jobs.plan.ordering``). Window ``k`` holds the events
``[k * stride, k * stride + count - 1]``: tumbling has ``stride = count``, sliding
``stride = 1``, hopping ``stride = step``. Its bounds are the event times of its first
and last event, and ``window_index`` is ``k``.

Numbering in arrival order (Quix Streams numbers a key's messages as its partition
delivers them) would make the windows depend on how micro-batches interleave the
partitions a key's events sit on. So an event takes its number only once no earlier
event can still come: when Spark's watermark has reached its time (rows at or behind
the watermark are late, taken out at the sources). Until then it is *pending*, in
order among the other pending events. With ``time_mode = "processing"`` every event
is numbered on arrival (its arrival time is the micro-batch's).

``emit = "final"`` emits a window once its last event is numbered. ``emit = "current"``
emits, on every micro-batch that brings a group events, each window holding one of
them or after them, as it stands with the pending events in order (partial windows
too); the target keeps one row per window index, its latest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from flow_jobs.kernels.frame import EventFrame, legacy_frame
from flow_jobs.kernels.ranges import Ranges
from flow_jobs.spec.base import key_error
from flow_jobs.spec.windows import register_window_family
from flow_jobs.state_codec import Fields, legacy, scalar
from flow_jobs.windows.family import (
    CloseRule,
    Emission,
    RuleClock,
    StateFamily,
)
from flow_jobs.windows.state_api import StateApiWindow


@dataclass
class CountState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "window.count"

    #: events in total order from ``first_index`` on: the numbered events of windows not
    #: complete yet, then the pending ones
    frame: EventFrame
    first_index: int  # the event number of frame row 0
    numbered: int  # events numbered so far (their numbers: 0 .. numbered - 1)

    def to_fields(self) -> dict[str, pa.Array]:
        return {
            "frame": self.frame.to_field(),
            "first_index": scalar(self.first_index, pa.int64()),
            "numbered": scalar(self.numbered, pa.int64()),
        }

    @classmethod
    def from_fields(cls, fields: Fields) -> CountState:
        frame = EventFrame.from_field(fields, "frame")
        return cls(frame, fields.value("first_index"), fields.value("numbered"))

    @property
    def total(self) -> int:
        return self.first_index + len(self.frame)

    @property
    def pending_times(self) -> np.ndarray:
        return self.frame.t[self.numbered - self.first_index :]


@legacy.reads(
    ("flow_jobs.windows.count", "CountState"), ("flow_jobs.operators.count_based", "CountState")
)
def _unpickled(r: Any) -> CountState:
    a = vars(r)
    # before pending events (numbered on arrival) every event was numbered: ``seen``
    return CountState(legacy_frame(a["frame"]), a["first_index"], a.get("numbered", a.get("seen")))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Windows:
    """Windows to emit: their indices and index ranges into ``frame``."""

    frame: EventFrame
    ks: np.ndarray
    ranges: Ranges


def _windows(frame: EventFrame, first_index: int, ks: np.ndarray, lo_hi: tuple) -> Windows:
    lo, hi = lo_hi
    return Windows(frame, ks, Ranges(lo - first_index, hi - first_index))


def add(
    state: CountState, new: EventFrame, count: int, stride: int, emit_current: bool
) -> tuple[CountState, Windows | None]:
    """Take a micro-batch's events of the group (sorted) in among the pending ones.
    Returns the state and, for emit = current, the windows they changed."""
    done = state.numbered - state.first_index
    waiting = state.frame.slice(done)
    combined = waiting.concat(new)
    order = combined.order()
    # A new event never goes before a numbered one: those are behind the watermark.
    frame = state.frame.slice(0, done).concat(combined.take(order))
    state = CountState(frame, state.first_index, state.numbered)
    if not emit_current or not len(new):
        return state, None
    # The first position a new event took, and every window from there on.
    position = state.numbered + int(np.argmax(order >= len(waiting)))
    total = state.total
    k_first = max(0, _ceil_div(position - count + 1, stride))
    ks = np.arange(k_first, (total - 1) // stride + 1, dtype=np.int64)
    lo = ks * stride
    hi = np.minimum(lo + count, total) - 1
    return state, _windows(frame, state.first_index, ks, (lo, hi))


def number(
    state: CountState, watermark_ms: int | None, count: int, stride: int
) -> tuple[CountState, Windows]:
    """Number the pending events the watermark has passed (all of them without one);
    returns the state without what no window needs and the windows they completed."""
    times = state.pending_times
    # At or behind the watermark: a row as old arriving later is late (Spark's rule).
    ready = (
        len(times) if watermark_ms is None else int(np.searchsorted(times, watermark_ms, "right"))
    )
    before, after = state.numbered, state.numbered + ready
    k_first = max(0, _ceil_div(before - count + 1, stride))
    k_last = (after - count) // stride
    ks = np.arange(k_first, max(k_first, k_last + 1), dtype=np.int64)
    lo = ks * stride
    complete = _windows(state.frame, state.first_index, ks, (lo, lo + count - 1))
    # The first event an incomplete (or future) window needs.
    keep_from = max(0, _ceil_div(after - count + 1, stride)) * stride
    kept = CountState(state.frame.slice(keep_from - state.first_index), keep_from, after)
    return kept, complete


def due(state: CountState) -> int | None:
    """The lowest watermark at which ``number`` has work: the oldest pending event's
    time (numbered once the watermark is at or above it; the group's timer is at it:
    ``flow_jobs.kernels.timers``)."""
    times = state.pending_times
    return int(times[0]) if len(times) else None


def open_windows(state: CountState, count: int, stride: int) -> Ranges:
    """The windows holding the state's events, as they stand, as ranges into
    ``state.frame``."""
    total = state.total
    if not len(state.frame):
        return Ranges(np.empty(0, np.int64), np.empty(0, np.int64))
    k_first = state.first_index // stride
    ks = np.arange(k_first, (total - 1) // stride + 1, dtype=np.int64)
    lo = ks * stride
    hi = np.minimum(lo + count, total) - 1
    return Ranges(lo - state.first_index, hi - state.first_index)


@dataclass(frozen=True)
class Count(StateFamily):
    """Count windows of ``count`` events every ``stride``; without ``event_time``
    (``time_mode = "processing"``) every event is numbered on arrival."""

    STATE: ClassVar[type[CountState]] = CountState
    count: int
    stride: int
    event_time: bool = True
    closes_on_input = True
    holds_end = True

    def empty(self, frame: EventFrame) -> CountState:
        return CountState(frame, 0, 0)

    def add(
        self, state: CountState, new: EventFrame, emit_current: bool
    ) -> tuple[CountState, Emission | None]:
        state, changed = add(state, new, self.count, self.stride, emit_current)
        if changed is None or not len(changed.ks):
            return state, None
        return state, _emission(changed)

    def close(self, state: CountState, watermark_ms: int | None) -> tuple[CountState, Emission]:
        after, complete = number(state, watermark_ms if self.event_time else None, *self._k)
        return after, _emission(complete)

    def due(self, state: CountState) -> int | None:
        return due(state) if self.event_time else None

    def open_windows(self, state: CountState) -> Emission:
        w = open_windows(state, *self._k)
        t = state.frame.t
        return Emission(state.frame, w, t[w.lo], t[w.hi])

    def held(self, state: CountState) -> bool:
        return bool(len(state.frame))

    def span(self, state: CountState) -> tuple[int | None, int | None]:
        t = state.frame.t
        return (int(t.min()), int(t.max())) if len(t) else (None, None)

    def close_rules(self, state: CountState, held: Emission, clock: RuleClock) -> list[CloseRule]:
        t = state.frame.t
        numbered = state.numbered - state.first_index  # frame rows numbered so far
        first_k = state.first_index // (self.stride or 1)
        rules = []
        for i, (lo, hi) in enumerate(zip(held.ranges.lo, held.ranges.hi, strict=True)):
            n = int(hi - lo + 1)
            waiting = max(0, int(hi) + 1 - numbered)  # held, but not numbered yet
            text = (
                f"holds {n} of {self.count} events; closes when its {self.count}th event "
                "is numbered"
            )
            if waiting:
                text += f" ({waiting} wait for the watermark to pass them, {clock.watermark})"
            needed = int(t[hi]) + 1 if waiting else None
            rules.append(CloseRule(text, needed, index=first_k + i))
        return rules

    @property
    def _k(self) -> tuple[int, int]:
        return self.count, self.stride


def _emission(windows: Windows) -> Emission:
    w, t = windows.ranges, windows.frame.t
    return Emission(windows.frame, w, t[w.lo], t[w.hi], indices=windows.ks)


@register_window_family
class CountWindow(StateApiWindow):
    """``kind = "count_tumbling"`` (``count``), ``"count_hopping"`` (``count``, ``step``)
    or ``"count_sliding"`` (``count``): windows of ``count`` events of a group, one every
    ``count``, ``step`` or 1 events."""

    kind: Literal["count_tumbling", "count_hopping", "count_sliding"]
    count: Annotated[int, Field(ge=2)] | None = None
    step: Annotated[int, Field(ge=1)] | None = None

    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "count_tumbling": ("count",),
        "count_hopping": ("count", "step"),
        "count_sliding": ("count",),
    }
    REOPEN_REFUSED: ClassVar[str | None] = (
        "a count window numbers each event once the watermark passes it, and a late row "
        "has no number left to take"
    )
    COUNTS_EVENTS: ClassVar[bool] = True

    def _family_rules(self) -> None:
        if self.step is not None and self.count is not None and self.step > self.count:
            raise key_error("step", f"step = {self.step} must be <= count = {self.count}")

    @property
    def stride(self) -> int | None:
        """How many events apart consecutive windows start."""
        if self.kind == "count_tumbling":
            return self.count
        if self.kind == "count_sliding":
            return 1
        return self.step

    @property
    def size_text(self) -> str:
        if self.kind == "count_hopping":
            return f"of {self.count} events every {self.step}"
        return f"of {self.count} events"

    def state_family(self) -> Count:
        assert self.count is not None and self.stride is not None
        return Count(self.count, self.stride, self.time_mode == "event")
