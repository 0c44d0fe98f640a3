"""Tumbling and hopping windows: their spec keys, where they run, and on the state API
the windows that reopen (``late_data = "reopen"``) or hold an exact distinct count.

The rules: docs/spec-reference.md, "Windows" and "Reopening windows".

``kind = "tumbling"`` (``duration_ms``) and ``"hopping"`` (``duration_ms``, ``hop_ms``)
are Spark's ``window()`` grouping with a watermark (a JVM hash aggregation whose partial
aggregates are shuffled and kept in the state store), which the Kafka reader can feed
with partial aggregates (``flow_jobs.combine.decide``).

Spark's native window aggregation emits a window once, when the watermark passes its
end (output mode append), or on every change while it is open (update); neither emits
at the end *and again* each time a late row corrects a closed window. These windows
therefore run on the arbitrary-state API, like sliding windows, and keep their events
(every aggregator, first/last, distinct counts and collect included, is then computed
exactly as for the other state-API windows).

Windows are Spark's ``window()``: aligned to the epoch, ``[start, start + duration)``,
one every ``hop`` (tumbling: ``hop = duration``); a window exists once a row falls in it,
and a row belongs to every window that contains it (the textbook hopping formula,
``[event_ts − duration + hop, event_ts]``, misses the window that starts exactly
``duration − hop`` before the row when ``hop`` does not divide the time since epoch;
Spark's is right).

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

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol

import numpy as np
import pyarrow as pa
from pydantic import Field

from flow_jobs.kernels.frame import EventFrame, legacy_frame
from flow_jobs.kernels.ranges import Ranges
from flow_jobs.spec.base import key_error
from flow_jobs.spec.windows import (
    PaneFolding,
    WindowSpec,
    milliseconds,
    register_window_family,
)
from flow_jobs.state_codec import Fields, legacy, numbers, table
from flow_jobs.windows.family import (
    CloseRule,
    Emission,
    RuleClock,
    StateFamily,
    time_rule,
)

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass(frozen=True)
class Bounds:
    """Tumbling and hopping windows: each is keyed by its start."""

    duration_ms: int
    hop_ms: int
    allowed_lateness_ms: int

    def keys(self, t: np.ndarray) -> np.ndarray:
        """The distinct keys (sorted) of every window holding one of the times ``t``."""
        return window_starts(t, self)

    def starts(self, keys: np.ndarray) -> np.ndarray:
        return keys

    def ends(self, keys: np.ndarray) -> np.ndarray:
        return keys + self.duration_ms


class WindowBounds(Protocol):
    """A family of fixed-bounds windows, each keyed by one int64 (ascending with its
    start and its end alike): ``Bounds`` (tumbling, hopping) keys windows by their start,
    ``flow_jobs.windows.cumulate`` by their end (its windows share starts)."""

    @property
    def allowed_lateness_ms(self) -> int: ...

    def keys(self, t: np.ndarray) -> np.ndarray: ...

    def starts(self, keys: np.ndarray) -> np.ndarray: ...

    def ends(self, keys: np.ndarray) -> np.ndarray: ...


@dataclass
class ReopenState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "window.fixed"

    frame: EventFrame  # time-ordered events of the held windows
    #: int64, sorted: the held windows' keys (``WindowBounds``; tumbling and hopping
    #: windows are keyed by their start, which named the field)
    starts: np.ndarray
    revisions: np.ndarray  # int64: the revision each window last emitted, 0 = none yet

    def to_fields(self) -> dict[str, pa.Array]:
        return {
            "frame": self.frame.to_field(),
            "windows": table({"key": self.starts, "revision": self.revisions}),
        }

    @classmethod
    def from_fields(cls, fields: Fields) -> ReopenState:
        windows = fields.table("windows")
        keys, revisions = numbers(windows["key"]), numbers(windows["revision"])
        return cls(EventFrame.from_field(fields, "frame"), keys, revisions)


@legacy.reads(
    ("flow_jobs.windows.fixed", "ReopenState"), ("flow_jobs.operators.reopen", "ReopenState")
)
def _unpickled(r: Any) -> ReopenState:
    a = vars(r)
    return ReopenState(legacy_frame(a["frame"]), a["starts"], a["revisions"])


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


def add(state: ReopenState, new: EventFrame, b: WindowBounds) -> tuple[ReopenState, np.ndarray]:
    """Buffer new events; returns the state and the indices (into its windows) of the
    emitted windows they changed, whose revision this call bumps: they re-emit now."""
    frame = state.frame.concat(new).time_ordered()
    touched = b.keys(new.t)
    starts = np.union1d(state.starts, touched)
    revisions = np.zeros(len(starts), np.int64)
    revisions[np.searchsorted(starts, state.starts)] = state.revisions
    hit = np.searchsorted(starts, touched)
    reopened = hit[revisions[hit] > 0]
    revisions[reopened] += 1
    return ReopenState(frame, starts, revisions), reopened


def close(state: ReopenState, watermark_ms: int, b: WindowBounds) -> tuple[ReopenState, np.ndarray]:
    """At Spark's watermark ``watermark_ms``: the indices of the windows that emit for
    the first time (their revision set to 1), and the state without the windows
    (and events) past their allowed lateness. The indices are into ``state``'s
    windows, which keeps its events: compute the emitted rows from it."""
    ends = b.ends(state.starts)
    first = np.flatnonzero((state.revisions == 0) & (ends <= watermark_ms + b.allowed_lateness_ms))
    state.revisions[first] = 1
    held = ends > watermark_ms
    keys, revisions = state.starts[held], state.revisions[held]
    earliest = b.starts(keys[:1])  # keys ascend with their starts
    keep = np.flatnonzero(state.frame.t >= earliest[0]) if len(keys) else np.empty(0, np.int64)
    return ReopenState(state.frame.take(keep), keys, revisions), first


def ranges(frame: EventFrame, keys: np.ndarray, b: WindowBounds) -> Ranges:
    """Index ranges of the windows ``keys`` (``[start, end)``) in a time-ordered frame."""
    return Ranges(
        np.searchsorted(frame.t, b.starts(keys), side="left").astype(np.int64),
        (np.searchsorted(frame.t, b.ends(keys), side="left") - 1).astype(np.int64),
    )


def due(state: ReopenState, b: WindowBounds) -> int | None:
    """The lowest watermark at which ``close`` has work for this group: a window not
    emitted yet is due at ``W = end - allowed_lateness_ms``, every window leaves at
    ``W = end`` (the group's timer is at it: ``flow_jobs.kernels.timers``)."""
    if not len(state.starts):
        return None
    ends = b.ends(state.starts)
    return int(np.where(state.revisions == 0, ends - b.allowed_lateness_ms, ends).min())


@dataclass(frozen=True)
class Fixed(StateFamily):
    """Tumbling and hopping windows on the state API (and cumulating windows, with their
    bounds); with ``revision``, each emitted row carries the revision it is
    (``late_data = "reopen"``)."""

    STATE: ClassVar[type[ReopenState]] = ReopenState
    bounds: WindowBounds
    revision: bool = False

    def empty(self, frame: EventFrame) -> ReopenState:
        return empty(frame)

    def add(
        self, state: ReopenState, new: EventFrame, emit_current: bool
    ) -> tuple[ReopenState, Emission | None]:
        state, reopened = add(state, new, self.bounds)
        if emit_current:  # every window holding a new row, as it stands
            touched = np.searchsorted(state.starts, self.bounds.keys(new.t))
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
        keys = state.starts  # sorted, ascending with their starts and ends alike
        if not len(keys):
            return None, None
        return int(self.bounds.starts(keys[:1])[0]), int(self.bounds.ends(keys[-1:])[0])

    def _windows(self, state: ReopenState, index: np.ndarray) -> Emission:
        keys = state.starts[index]
        revisions = state.revisions[index].astype(np.int32) if self.revision else None
        return Emission(
            state.frame,
            ranges(state.frame, keys, self.bounds),
            self.bounds.starts(keys),
            self.bounds.ends(keys),
            revisions=revisions,
        )

    def close_rules(self, state: ReopenState, held: Emission, clock: RuleClock) -> list[CloseRule]:
        revisions = held.revisions if held.revisions is not None else [None] * len(held)
        allowed = self.bounds.allowed_lateness_ms
        return [
            time_rule(clock, int(e), allowed, None if r is None else int(r))
            for e, r in zip(held.ends, revisions, strict=True)
        ]


class PaneWindow(WindowSpec):
    """Windows with fixed bounds, each a whole number of panes of one length, aligned to
    the epoch (tumbling, hopping, cumulating): the Kafka reader can fold rows into the
    panes (``flow_jobs.combine.decide``), and Spark's aggregation keys its state by the
    window (``flow_jobs.runtime.caps`` counts a window's groups there)."""

    SHARED_BOUNDS: ClassVar[bool] = True

    @property
    @abstractmethod
    def pane_ms(self) -> int:
        """The windows' common pane: every window is a whole number of panes."""

    def pane_folding(self) -> PaneFolding:
        return PaneFolding(pane_ms=self.pane_ms)


@register_window_family
class FixedWindow(PaneWindow):
    """``kind = "tumbling"`` or ``"hopping"``: windows ``[start, start + duration_ms)``
    aligned to the epoch, one every ``hop_ms`` (tumbling: every ``duration_ms``)."""

    kind: Literal["tumbling", "hopping"]
    duration_ms: Annotated[int, Field(gt=0)] | None = None
    hop_ms: Annotated[int, Field(gt=0)] | None = None

    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "tumbling": ("duration_ms",),
        "hopping": ("duration_ms", "hop_ms"),
    }
    REOPEN_REFUSED: ClassVar[str | None] = None

    def _family_rules(self) -> None:
        hop, duration = self.hop_ms, self.duration_ms
        if hop is not None and duration is not None and hop > duration:
            raise key_error("hop_ms", f"hop_ms = {hop} must be <= duration_ms = {duration}")

    @property
    def duration(self) -> int:
        assert self.duration_ms is not None
        return self.duration_ms

    @property
    def hop(self) -> int:
        """How far apart windows start (a tumbling window's duration)."""
        return self.hop_ms or self.duration

    @property
    def pane_ms(self) -> int:
        return math.gcd(self.duration, self.hop)

    @property
    def runs_natively(self) -> bool:
        return True

    def native_window(self, event_time: Column) -> Column:
        from pyspark.sql import functions as F

        if self.kind == "hopping":
            return F.window(event_time, milliseconds(self.duration), milliseconds(self.hop))
        return F.window(event_time, milliseconds(self.duration))

    @property
    def native_text(self) -> str:
        if self.kind == "hopping":
            return f"window(event_time, {self.duration_ms} ms, {self.hop_ms} ms)"
        return f"window(event_time, {self.duration_ms} ms)"

    @property
    def size_text(self) -> str:
        if self.kind == "hopping":
            return f"{self.duration_ms} ms every {self.hop_ms} ms"
        return f"{self.duration_ms} ms"

    def active_windows(self) -> int:
        # a row is in duration / hop windows, each held until the watermark (lateness,
        # and a reopening window's allowed lateness, behind) passes its end
        return math.ceil((self.duration + self.watermark_delay_ms) / self.hop)

    def state_family(self) -> Fixed:
        return Fixed(Bounds(self.duration, self.hop, self.reopen_lateness_ms), self.reopens)
