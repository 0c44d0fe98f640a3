"""Session windows (``kind = "session"``, ``gap_ms``): Spark's ``session_window()``
grouping natively, and on the state API with emit = "current" (Spark refuses update
mode for ``session_window``) or with an exact ``count_distinct`` (capped while open).

A group's events, in time order, form sessions: an event joins the running session when
it falls at or before the session's end (its last event + gap), as in Spark's
``session_window`` (``tests/test_spark_contracts.py``); a session is [first event, last
event + gap). The state is the group's events in open sessions. With emit = "current"
each micro-batch emits every session holding one of its new events, as it stands; a
session closes once the watermark reaches its end, and its last emission is its final
value (emit = "final": it is emitted then, once). No event at or behind the watermark
reaches the operator (Spark drops it first), so a closed session never changes again.

A session's bounds move while it is open: a new event extends its end, an earlier one
moves its start, and one event can merge two sessions. Each emission therefore
supersedes the group's rows whose bounds overlap it; the target deletes those
(``flow_jobs.io.batch``: ``Supersede``), so the operator keeps no record of what it
emitted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from flow_jobs.kernels.frame import EventFrame, legacy_frame
from flow_jobs.kernels.ranges import Ranges
from flow_jobs.spec.windows import (
    PaneFolding,
    WindowSpec,
    milliseconds,
    register_window_family,
)
from flow_jobs.state_codec import Fields, legacy
from flow_jobs.windows.family import (
    CloseRule,
    Emission,
    RuleClock,
    StateFamily,
    time_rule,
)

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass
class SessionState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "window.session"

    frame: EventFrame  # events of the group's open sessions, in the total order

    def to_fields(self) -> dict[str, pa.Array]:
        return {"frame": self.frame.to_field()}

    @classmethod
    def from_fields(cls, fields: Fields) -> SessionState:
        return cls(EventFrame.from_field(fields, "frame"))


@legacy.reads(
    ("flow_jobs.windows.session", "SessionState"), ("flow_jobs.operators.session", "SessionState")
)
def _unpickled(r: Any) -> SessionState:
    return SessionState(legacy_frame(vars(r)["frame"]))


def sessions(t: np.ndarray, gap_ms: int) -> Ranges:
    """Index ranges of the sessions of time-ordered event times ``t``."""
    if not len(t):
        return Ranges(np.empty(0, np.int64), np.empty(0, np.int64))
    breaks = np.flatnonzero(np.diff(t) > gap_ms) + 1
    lo = np.concatenate([[0], breaks]).astype(np.int64)
    hi = np.concatenate([breaks - 1, [len(t) - 1]]).astype(np.int64)
    return Ranges(lo, hi)


def bounds(frame: EventFrame, w: Ranges, gap_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """Each session's start and end (epoch ms)."""
    return frame.t[w.lo], frame.t[w.hi] + gap_ms


def add(state: SessionState, new: EventFrame, gap_ms: int) -> tuple[SessionState, Ranges]:
    """Buffer new events; returns the state and the sessions holding a new event."""
    combined = state.frame.concat(new)
    order = combined.order()
    frame = combined.take(order)
    is_new = order >= len(state.frame)
    w = sessions(frame.t, gap_ms)
    # a session holds a new event iff the count of new events up to its end grows
    seen = np.concatenate([[0], np.cumsum(is_new)])
    touched = seen[w.hi + 1] > seen[w.lo]
    return SessionState(frame), Ranges(w.lo[touched], w.hi[touched])


def close(state: SessionState, watermark_ms: int, gap_ms: int) -> tuple[SessionState, Ranges]:
    """The state without the sessions the watermark has reached (end <= watermark), and
    those sessions (index ranges into ``state``'s frame: emit = "final" writes them)."""
    w = sessions(state.frame.t, gap_ms)
    _, ends = bounds(state.frame, w, gap_ms)
    open_ = ends > watermark_ms
    closed = Ranges(w.lo[~open_], w.hi[~open_])
    if open_.all():
        return state, closed
    if not open_.any():
        return SessionState(state.frame.slice(0, 0)), closed
    # sessions are in time order and ends increase: the open ones are a suffix
    return SessionState(state.frame.slice(int(w.lo[np.argmax(open_)]))), closed


def due(state: SessionState, gap_ms: int) -> int | None:
    """The lowest watermark at which ``close`` has work: the first open session's end
    (the group's timer is at it: ``flow_jobs.kernels.timers``)."""
    w = sessions(state.frame.t, gap_ms)
    if not len(w.lo):
        return None
    return int(state.frame.t[w.hi[0]]) + gap_ms


@dataclass(frozen=True)
class Session(StateFamily):
    """Session windows with a gap of ``gap_ms``."""

    STATE: ClassVar[type[SessionState]] = SessionState
    gap_ms: int

    def empty(self, frame: EventFrame) -> SessionState:
        return SessionState(frame)

    def add(
        self, state: SessionState, new: EventFrame, emit_current: bool
    ) -> tuple[SessionState, Emission | None]:
        state, changed = add(state, new, self.gap_ms)
        if not emit_current or not len(changed):
            return state, None
        return state, self._windows(state.frame, changed)

    def close(self, state: SessionState, watermark_ms: int | None) -> tuple[SessionState, Emission]:
        after, closed = close(state, watermark_ms or 0, self.gap_ms)
        return after, self._windows(state.frame, closed)

    def due(self, state: SessionState) -> int | None:
        return due(state, self.gap_ms)

    def open_windows(self, state: SessionState) -> Emission:
        return self._windows(state.frame, sessions(state.frame.t, self.gap_ms))

    def held(self, state: SessionState) -> bool:
        return bool(len(state.frame))

    def span(self, state: SessionState) -> tuple[int | None, int | None]:
        t = state.frame.t  # time-ordered: the first session's start, the last one's end
        return (int(t[0]), int(t[-1]) + self.gap_ms) if len(t) else (None, None)

    def _windows(self, frame: EventFrame, w: Ranges) -> Emission:
        return Emission(frame, w, *bounds(frame, w, self.gap_ms))

    def close_rules(self, state: SessionState, held: Emission, clock: RuleClock) -> list[CloseRule]:
        return [time_rule(clock, int(e)) for e in held.ends]


@register_window_family
class SessionWindow(WindowSpec):
    """``kind = "session"``: a group's events less than ``gap_ms`` apart, one session
    ``[first event, last event + gap_ms)``."""

    kind: Literal["session"]
    gap_ms: Annotated[int, Field(gt=0)] | None = None

    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {"session": ("gap_ms",)}
    REOPEN_REFUSED: ClassVar[str | None] = (
        "a late row can merge two emitted sessions into one with other bounds, and the "
        "superseded rows would stay in the target"
    )
    #: Spark's session_window keeps each group's session bounds in its state's value
    NATIVE_STATE_BOUNDS: ClassVar[str | None] = "session_window"

    @property
    def runs_natively(self) -> bool:
        # Spark refuses update mode for session windows (SPARK-36463)
        return self.emit != "current"

    def native_window(self, event_time: Column) -> Column:
        from pyspark.sql import functions as F

        return F.session_window(event_time, milliseconds(self.gap_ms))

    @property
    def native_text(self) -> str:
        return f"session_window(event_time, {self.gap_ms} ms)"

    @property
    def state_reason(self) -> str:
        if self.emit == "current":
            return 'emit = "current": Spark refuses update mode for session_window'
        return super().state_reason

    @property
    def size_text(self) -> str:
        return f"with a {self.gap_ms} ms gap"

    def active_windows(self) -> int:
        return 1  # per-group state, sized per row

    def state_family(self) -> Session:
        return Session(self.gap)

    @property
    def gap(self) -> int:
        assert self.gap_ms is not None
        return self.gap_ms

    def pane_folding(self) -> PaneFolding:
        # a group's rows at most the gap apart fold into the session they merge into
        return PaneFolding(gap_ms=self.gap)

    @property
    def supersedes_overlapping(self) -> bool:
        # emitted while open, a session's bounds move (an event extends it, or merges two)
        return self.emit == "current"
