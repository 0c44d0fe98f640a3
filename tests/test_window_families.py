"""The window families behind one interface (``flow_jobs.windows``).

Every window kind the spec accepts is one family module that registers its model
(``WINDOW_FAMILIES``): the model answers what the engine asks of a kind (where it runs,
Spark's window column, the plan's and the CLI's words, the state-size bound, its
state-API family), and every kind can run on the state API
(sliding and count windows always; tumbling, hopping and session windows when they
reopen, emit "current" sessions or hold an exact distinct count), so each needs a
family that implements every part the one processor and ``inspect`` call. A family
that left a part out would fail here, not in a run.
"""

from __future__ import annotations

import inspect
import pickle
import sys
import types

import numpy as np
import pytest
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from flow_jobs.kernels import frame as frame_module
from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.spec.models import WindowSpec
from flow_jobs.spec.windows import WINDOW_FAMILIES
from flow_jobs.windows import sliding
from flow_jobs.windows.family import CloseRule, StateFamily
from flow_jobs.windows.processor import load_group
from tests.plugins import offset_windows

#: The plug-in family of the test tree is held to the same contract as the built-ins.
assert offset_windows.OffsetTumblingWindow in dict(WINDOW_FAMILIES.items()).values()

#: Every registered kind, in the order the families registered.
KINDS = WINDOW_FAMILIES.names()


def _frame(times: list[int]) -> EventFrame:
    n = len(times)
    ids = Values(np.arange(n, dtype=np.int64), np.ones(n, bool))
    return EventFrame(
        np.array(times, np.int64), np.zeros(n, np.int64), np.arange(n, dtype=np.int64), {"id": ids}
    )


class _Clock:
    watermark = "watermark 12:00:00"

    def at(self, ms: int) -> str:
        return f"@{ms}"


def _window(kind: str, **keys: object) -> WindowSpec:
    sizes = {"duration_ms": 10, "hop_ms": 5, "gap_ms": 3, "count": 3, "step": 2}
    sizes |= {"step_ms": 5, "max_duration_ms": 15, "offset_ms": 3}
    own = {k: sizes[k] for k in WINDOW_FAMILIES.get(kind).SIZE_KEYS[kind]}
    aggregations = [{"agg": "count", "as": "n"}]
    return WindowSpec.model_validate({"kind": kind, **own, "aggregations": aggregations, **keys})


@pytest.mark.parametrize("kind", KINDS)
def test_every_window_kind_has_a_family_with_every_part(kind: str) -> None:
    model = WINDOW_FAMILIES.get(kind)
    assert kind in model.SIZE_KEYS
    assert not inspect.isabstract(model), f"{model.__name__} lacks {model.__abstractmethods__}"
    family = _window(kind).state_family()
    assert isinstance(family, StateFamily)
    assert not inspect.isabstract(type(family)), kind
    assert pickle.loads(pickle.dumps(family)) == family  # the operator's plan carries it


@pytest.mark.parametrize("kind", KINDS)
def test_a_kinds_model_answers_what_the_engine_asks(kind: str, spark: SparkSession) -> None:
    """The parts the plan, the CLI, sizing and ``inspect`` read from a kind's model."""
    window = _window(kind)
    assert type(window) is WINDOW_FAMILIES.get(kind) and window.kind == kind
    assert window.size_text and window.state_reason
    assert window.active_windows() >= 1
    native = window.native_window(F.col("t"))
    assert (window.native_text is None) == (native is None)  # --plan says what compiles
    if window.runs_natively:
        assert window.engine == "native" and isinstance(native, Column)
        assert (
            spark.range(1)
            .select(F.timestamp_millis(F.lit(7)).alias("t"))
            .select(native.alias("w"))
            .first()
            is not None
        )
    else:
        assert window.engine == "state" and native is None
    folding = window.pane_folding()  # what the Kafka reader folds for it
    assert folding is None or (folding.pane_ms > 0) != (folding.gap_ms > 0)
    if window.SHARED_BOUNDS or window.NATIVE_STATE_BOUNDS:  # read from Spark's state
        assert window.has_native_form
    exact = {"agg": "count_distinct", "column": "x", "as": "d", "mode": "exact"}
    capped = _window(kind, aggregations=[{**exact, "max_distinct_values_per_group": 2}])
    assert capped.engine == "state"  # an exact distinct set is capped while open


@pytest.mark.parametrize("kind", KINDS)
def test_a_family_says_what_closes_each_window_it_holds(kind: str) -> None:
    """``inspect``'s close rules: one per open window, naming the end it waits for."""
    family = _window(kind).state_family()
    state, _ = family.add(family.empty(_frame([])), _frame([1, 2, 7]), emit_current=False)
    held = family.open_windows(state)
    rules = family.close_rules(state, held, _Clock())
    assert len(rules) == len(held) > 0
    assert all(isinstance(r, CloseRule) and r.text for r in rules)
    if WINDOW_FAMILIES.get(kind).COUNTS_EVENTS:
        assert [r.index for r in rules] == sorted(r.index for r in rules)  # type: ignore[type-var]
    else:
        assert all(f"@{int(e)}" in r.text for r, e in zip(rules, held.ends, strict=True))


@pytest.mark.parametrize("kind", KINDS)
def test_a_family_closes_what_it_holds_once_the_watermark_passes_it(kind: str) -> None:
    """Each family's parts agree with each other: rows added are held in open windows,
    ``close`` at ``due`` moves ``due`` on (the group's timer never fires twice at one
    watermark), and far past every row it closes windows and nothing waits any more."""
    family = _window(kind).state_family()
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
    if not WINDOW_FAMILIES.get(kind).COUNTS_EVENTS:  # an incomplete count window waits
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
    # frames were flow_jobs.operators.frame's then (flow_jobs.kernels.frame's now)
    monkeypatch.setitem(sys.modules, "flow_jobs.operators.frame", frame_module)
    for cls in (EventFrame, Values):
        monkeypatch.setattr(cls, "__module__", "flow_jobs.operators.frame")
    data = pickle.dumps({"state": SlidingState(_frame([4]), np.array([4]))}, protocol=5)
    monkeypatch.undo()
    assert b"flow_jobs.operators.sliding" in data and b"flow_jobs.operators.frame" in data

    group = load_group(data)
    assert type(group.state) is sliding.SlidingState
    assert group.state.pending.tolist() == [4] and group.timer is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_window_validates_again_from_its_own_dump(kind: str) -> None:
    """A family's dump holds its unset size keys as None (e.g. a tumbling window's
    ``hop_ms``): validating it again gives the same window, not a refusal."""
    window = _window(kind)
    assert WindowSpec.model_validate(window.model_dump(by_alias=True)) == window
