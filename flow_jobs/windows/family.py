"""The interface every state-API window family implements, and what it emits.

A family is a small object its spec model builds (``WindowSpec.state_family``) that
holds the family's parameters (a duration, a gap, a count...), and the operator's plan
carries (``WindowOperatorPlan``) to the executors; a group's state is a plain value
(a dataclass of numpy arrays and an ``EventFrame``, the family's ``STATE``) that the
processor saves in the group's ``ValueState`` in its declared fields
(``flow_jobs.state_codec``). The processor (``flow_jobs.windows.processor``) calls, per
group and micro-batch:

* on input: ``add`` (and, for a family that ``closes_on_input``, ``close`` at the
  batch's watermark), the cap check over ``open_windows``, then the timer at ``due``;
* when the group's timer fires: ``close`` at the watermark, then the next timer.

``add`` returns what an ``emit = "current"`` window emits (and what a family emits on
input whatever the mode: a reopened window's correction); ``close`` returns what the
watermark completed, which ``emit = "final"`` writes.

``flow-jobs inspect`` asks a family one more thing: the rule that closes each open
window (``close_rules``), in words, with the watermark it waits for.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from flow_jobs.kernels.frame import EventFrame
from flow_jobs.kernels.ranges import Ranges


@dataclass(frozen=True)
class Emission:
    """Windows of a group to emit (or to check): index ranges into ``frame`` and each
    window's bounds (epoch ms)."""

    frame: EventFrame
    ranges: Ranges
    starts: np.ndarray
    ends: np.ndarray
    #: count windows: each window's index (``window_index``)
    indices: np.ndarray | None = None
    #: reopening windows: the revision each row carries
    revisions: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ranges)


class RuleClock(Protocol):
    """How ``inspect`` writes times into a close rule."""

    @property
    def watermark(self) -> str:
        """The watermark, e.g. "watermark 12:00:05" (or "no watermark yet")."""

    def at(self, ms: int) -> str:
        """An instant (epoch ms)."""


@dataclass(frozen=True)
class CloseRule:
    """What closes an open window, for ``inspect``: the rule in words, the watermark it
    waits for (None: it waits for events, not the watermark), and the window's count
    index or revision where the family has them."""

    text: str
    needed_ms: int | None
    index: int | None = None
    revision: int | None = None


def span_text(ms: int) -> str:
    """A length of time in a rule: "5s", or "1500ms"."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def time_rule(
    clock: RuleClock, end_ms: int, allowed_ms: int = 0, revision: int | None = None
) -> CloseRule:
    """A time window: emitted once the watermark reaches its end (``allowed_ms``
    earlier when it reopens, and then kept until the watermark reaches its end)."""
    wm, end = clock.watermark, clock.at(end_ms)
    if revision:  # emitted already: held for late rows
        text = f"emitted (revision {revision}); takes late rows until {wm} >= end {end}"
        return CloseRule(text, end_ms, revision=revision)
    if allowed_ms:
        text = f"emits when {wm} + allowed lateness {span_text(allowed_ms)} >= end {end}"
        return CloseRule(text, end_ms - allowed_ms, revision=revision)
    return CloseRule(f"closes when {wm} >= end {end}", end_ms, revision=revision)


class StateFamily(ABC):
    """One window family's rules over a group's state."""

    #: a group's state: a class saved by ``flow_jobs.state_codec`` (its ``STATE_TYPE``)
    STATE: ClassVar[type[Any]]
    #: the family numbers (closes) at the batch's watermark on input too (count windows)
    closes_on_input: ClassVar[bool] = False
    #: a window holds its end (sliding and count windows: ``[start, end]``)
    holds_end: ClassVar[bool] = False

    @abstractmethod
    def empty(self, frame: EventFrame) -> Any:
        """A group's state before its first row (``frame``: no rows, the plan's columns)."""

    @abstractmethod
    def add(self, state: Any, new: EventFrame, emit_current: bool) -> tuple[Any, Emission | None]:
        """Take a micro-batch's rows of the group; returns the state and what to emit now."""

    @abstractmethod
    def close(self, state: Any, watermark_ms: int | None) -> tuple[Any, Emission | None]:
        """At the watermark: the state without what no window needs any more, and the
        windows completed (``emit = "final"`` writes them)."""

    @abstractmethod
    def due(self, state: Any) -> int | None:
        """The lowest watermark at which ``close`` has work (``None``: nothing waits):
        the group's timer (``flow_jobs.kernels.timers``)."""

    @abstractmethod
    def open_windows(self, state: Any) -> Emission:
        """Every window the state holds, as it stands."""

    @abstractmethod
    def held(self, state: Any) -> bool:
        """Whether the group has state to keep."""

    @abstractmethod
    def span(self, state: Any) -> tuple[int | None, int | None]:
        """The time span the group's open windows cover (saved beside the state on every
        batch: read by the ``max_groups_per_window`` check without decoding it), from the
        state's bounds alone, not by building every window's range."""

    @abstractmethod
    def close_rules(self, state: Any, held: Emission, clock: RuleClock) -> list[CloseRule]:
        """What closes each of ``held`` (``open_windows(state)``), for ``inspect``."""
