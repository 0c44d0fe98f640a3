"""The state-API window families behind one interface (``flow_jobs.windows``).

Every window kind the spec accepts can run on the state API (sliding and count windows
always; tumbling, hopping and session windows when they reopen, emit "current" sessions
or hold an exact distinct count), so each needs a family that implements every part the
one processor calls. A family that left a part out would fail here, not in a run.
"""

from __future__ import annotations

import inspect
import pickle
import sys
import types
import typing

import numpy as np
import pytest

from flow_jobs.operators.frame import EventFrame, Values
from flow_jobs.spec.models import WindowKind
from flow_jobs.windows import sliding
from flow_jobs.windows.family import Shape, StateFamily
from flow_jobs.windows.processor import FAMILIES, load_blob

SHAPE = Shape(duration_ms=10, hop_ms=5, gap_ms=3, count=3, stride=1)


def _frame(times: list[int]) -> EventFrame:
    n = len(times)
    ids = Values(np.arange(n, dtype=np.int64), np.ones(n, bool))
    return EventFrame(
        np.array(times, np.int64), np.zeros(n, np.int64), np.arange(n, dtype=np.int64), {"id": ids}
    )


def test_every_window_kind_has_a_family_with_every_part() -> None:
    kinds = set(typing.get_args(WindowKind))
    assert set(FAMILIES) == kinds
    for kind in sorted(kinds):
        family = FAMILIES[kind](SHAPE)
        assert isinstance(family, StateFamily)
        assert not inspect.isabstract(type(family)), kind


@pytest.mark.parametrize("kind", sorted(typing.get_args(WindowKind)))
def test_a_family_closes_what_it_holds_once_the_watermark_passes_it(kind: str) -> None:
    """Each family's parts agree with each other: rows added are held in open windows,
    ``close`` at ``due`` moves ``due`` on (the group's timer never fires twice at one
    watermark), and far past every row it closes windows and nothing waits any more."""
    family = FAMILIES[kind](SHAPE)
    state = family.empty(_frame([]))
    assert not family.held(state) and family.due(state) is None
    state, _ = family.add(state, _frame([1, 2, 2, 7, 20]), emit_current=False)
    assert family.held(state)
    assert len(family.open_windows(state)) > 0
    start, end = family.span(state)
    assert start is not None and end is not None and start <= end
    due = family.due(state)
    assert due is not None
    after, _ = family.close(state, due)
    assert (family.due(after) or due + 1) > due, f"{kind}: close did nothing at due {due}"
    state, closed = family.close(after, 1_000)
    assert closed is not None and len(closed) > 0
    assert family.due(state) is None
    if not kind.startswith("count_"):  # an incomplete count window waits for events
        assert not family.held(state)


def test_state_pickled_before_the_windows_package_still_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint written before ``flow_jobs.windows`` holds pickles naming the old
    modules (``flow_jobs.operators.sliding``...): they load as the new classes."""
    old = types.ModuleType("flow_jobs.operators.sliding")

    class SlidingState(sliding.SlidingState):
        pass

    SlidingState.__module__ = old.__name__
    SlidingState.__qualname__ = "SlidingState"
    old.SlidingState = SlidingState  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, old.__name__, old)
    data = pickle.dumps({"state": SlidingState(_frame([4]), np.array([4]))}, protocol=5)
    monkeypatch.delitem(sys.modules, old.__name__)
    assert b"flow_jobs.operators.sliding" in data

    blob = load_blob(data)
    assert type(blob["state"]) is sliding.SlidingState
    assert blob["state"].pending.tolist() == [4] and blob["timer"] is None
