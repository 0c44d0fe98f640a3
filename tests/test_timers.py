"""Timers that cannot be lost (``flow_jobs.kernels.timers``).

Spark fires an event-time timer once the watermark is at or above it, and deletes it
after its handler (tests/test_spark_contracts.py, "timers"). Each state-API window
family registers its group's timer at ``due``, the lowest watermark at which its close
step has work. Checked here: every family driven batch by batch under Spark's rule
(tests/spark_timers.py) never leaves due work waiting past the batch, and Spark always
holds the timer the group's state saved; then, end to end on the real broker, Spark and
Delta, the reported two-run cases with Spark's watermark stopping one below a window's
``due`` (where timers at ``due - 1`` were lost), two below, and at it.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flow_jobs.kernels import timers
from flow_jobs.kernels.frame import ColumnKind, EventFrame, Values
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.windows import count as count_based
from flow_jobs.windows import fixed as reopen
from flow_jobs.windows import session, sliding
from flow_jobs.windows.processor import WindowGroup, WindowOperatorPlan, WindowProcessor
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.spark_timers import SparkTimers
from tests.support import assert_same_windows, make_spec, read_windows, send

# -- every family under Spark's timer rule ------------------------------------------------

Row = tuple[str, int]  # group, event time (ms)


@dataclass(frozen=True)
class Family:
    """One window family's state steps, as ``flow_jobs.windows.processor`` calls them:
    ``close`` returns the new state and how much work it did (0: none)."""

    empty: Callable[[], Any]
    add: Callable[[Any, EventFrame], Any]
    close: Callable[[Any, int], tuple[Any, int]]
    due: Callable[[Any], int | None]
    closes_on_input: bool = False  # count windows number at the batch's watermark on input


def _frame(times: list[int], first: int = 0) -> EventFrame:
    n = len(times)
    ids = Values(np.arange(first, first + n, dtype=np.int64), np.ones(n, bool))
    pos = np.arange(first, first + n, dtype=np.int64)
    return EventFrame(np.array(times, np.int64), np.zeros(n, np.int64), pos, {"id": ids})


def _reopen(duration: int, hop: int, allowed: int) -> Family:
    b = reopen.Bounds(duration, hop, allowed)

    def close(s: reopen.ReopenState, w: int) -> tuple[reopen.ReopenState, int]:
        copy = reopen.ReopenState(s.frame, s.starts.copy(), s.revisions.copy())
        after, first = reopen.close(copy, w, b)
        return after, len(first) + len(s.starts) - len(after.starts)

    return Family(
        lambda: reopen.empty(_frame([])),
        lambda s, new: reopen.add(s, new, b)[0],
        close,
        lambda s: reopen.due(s, b),
    )


def _session(gap: int) -> Family:
    def close(s: session.SessionState, w: int) -> tuple[session.SessionState, int]:
        after, closed = session.close(s, w, gap)
        return after, len(closed.lo)

    return Family(
        lambda: session.SessionState(_frame([])),
        lambda s, new: session.add(s, new, gap)[0],
        close,
        lambda s: session.due(s, gap),
    )


def _count(count: int, stride: int) -> Family:
    def close(s: count_based.CountState, w: int) -> tuple[count_based.CountState, int]:
        after, _ = count_based.number(s, w, count, stride)
        return after, after.numbered - s.numbered

    return Family(
        lambda: count_based.CountState(_frame([]), 0, 0),
        lambda s, new: count_based.add(s, new, count, stride, False)[0],
        close,
        count_based.due,
        closes_on_input=True,
    )


def _sliding(duration: int) -> Family:
    def close(s: sliding.SlidingState, w: int) -> tuple[sliding.SlidingState, int]:
        after, done = sliding.close(s, w, duration)
        return after, len(done)

    return Family(
        lambda: sliding.SlidingState(_frame([]), np.empty(0, np.int64)),
        lambda s, new: sliding.add(s, new)[0],
        close,
        sliding.due,
    )


def drive(family: Family, batches: list[list[Row]], delay: int) -> int:
    """Spark's micro-batches over the rows, and a last one without data. Batch N's
    watermark W(N) is the highest time of the batches before, less ``delay`` (0 at
    first, never lower); its rows at or below W(N-1) are late, dropped. Then per group
    with rows: ``add`` (count windows: ``number`` at W(N)) and the timer at ``due``;
    then every timer at or below W(N) fires: ``close`` at W(N), the next timer, and
    Spark deletes the fired one. After every batch: Spark holds the timer each group
    saved, and ``close`` at W(N) has nothing left to do for any group (no due work
    waits past its batch). Returns the work done, to show a case did some."""
    spark = SparkTimers()
    states: dict[str, Any] = {}
    saved: dict[str, int | None] = {}
    highest: int | None = None
    previous: int | None = None
    work, seq = 0, 0
    for batch in [*batches, []]:
        watermark = max(previous or 0, highest - delay) if highest is not None else 0
        rows = [r for r in batch if previous is None or r[1] > previous]
        for group in sorted({g for g, _ in rows}):
            times = [t for g, t in rows if g == group]
            state = family.add(states.get(group, family.empty()), _frame(times, seq))
            seq += len(times)
            if family.closes_on_input:
                state, done = family.close(state, watermark)
                work += done
            states[group] = state
            saved[group] = timers.settle(spark.handle(group), saved.get(group), family.due(state))
        for group, expiry in spark.expired(watermark):
            states[group], done = family.close(states[group], watermark)
            work += done
            firing = timers.Firing(expiry, watermark)
            due = family.due(states[group])
            saved[group] = timers.settle(spark.handle(group), saved[group], due, firing)
            spark.handled(group, expiry)
        for group, state in states.items():
            assert spark.of(group) == {saved[group]} - {None}, "Spark holds another timer"
            assert family.close(state, watermark)[1] == 0, f"{group}: due work left waiting"
        times = [t for _, t in batch]
        highest = max([*times, *([highest] if highest is not None else [])], default=None)
        previous = watermark
    return work


_FAMILIES: dict[str, st.SearchStrategy[Family]] = {
    "reopen": st.builds(
        lambda d, hops, allowed: _reopen(d, d // hops, allowed),
        st.sampled_from([10, 20]),
        st.sampled_from([1, 2]),
        st.integers(0, 15),
    ),
    "session": st.builds(_session, st.integers(1, 30)),
    "count": st.integers(1, 4).flatmap(lambda c: st.builds(_count, st.just(c), st.integers(1, c))),
    "sliding": st.builds(_sliding, st.integers(0, 30)),
}


@pytest.mark.parametrize("kind", list(_FAMILIES))
@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    rows=st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 120)), min_size=1),
    cuts=st.lists(st.integers(0, 40), max_size=10),
    delay=st.sampled_from([0, 1, 5, 20]),
)
def test_no_family_leaves_due_work_waiting_under_sparks_timer_rule(
    kind: str, data: st.DataObject, rows: list[Row], cuts: list[int], delay: int
) -> None:
    family = data.draw(_FAMILIES[kind])
    bounds = sorted({min(c, len(rows)) for c in cuts} | {0, len(rows)})
    drive(family, [rows[a:b] for a, b in itertools.pairwise(bounds)], delay)


@pytest.mark.parametrize(
    ("family", "first", "delay"),
    [
        # The cases: after the first run Spark's watermark is one below a due.
        (_reopen(10_000, 10_000, 2_000), [("a", 1_000), ("b", 9_999)], 2_000),
        (_count(2, 2), [("a", 5_000), ("a", 5_500), ("b", 5_999)], 1_000),
        (_session(3_000), [("a", 1_000), ("b", 3_999)], 0),
        (_sliding(1_000), [("a", 5_000), ("b", 6_000)], 1_000),
    ],
    ids=["reopen", "count", "session", "sliding"],
)
def test_a_watermark_one_below_due_then_past_it(
    family: Family, first: list[Row], delay: int
) -> None:
    """Two runs: the first leaves Spark's watermark one below the due of group a's
    windows (its no-data batch), the second moves it far past."""
    assert drive(family, [first, [], [("c", 60_000)]], delay) > 0


def _plan(kind: str) -> WindowOperatorPlan:
    return WindowOperatorPlan(
        pipeline="p",
        kind=kind,
        family=reopen.Fixed(reopen.Bounds(10_000, 10_000, 2_000), revision=True),
        emit="final",
        group_columns=("user_id",),
        columns=(ColumnKind("id", "int"),),
        aggregators=(),
        output_columns=("window_start", "window_end", "user_id", "revision"),
    )


def test_state_saved_under_the_old_rule_gets_its_timer_back() -> None:
    """A group saved before timers were set at their due watermark has its timer at due - 1 and no
    ``timer_rule``: whether Spark still holds that timer or already fired and deleted
    it, the processor's next timer call (its next input, or the firing) leaves Spark
    holding the timer at due, and the state saying so."""
    processor = WindowProcessor(_plan("tumbling"))
    b = processor.plan.family.bounds
    state = reopen.add(reopen.empty(_frame([])), _frame([1_000]), b)[0]
    due = reopen.due(state, b)
    assert due == 8_000

    # Spark lost it (it fired at W = 7 999 under the old code): the group's next input.
    spark = SparkTimers()
    processor.handle = spark.handle("a")
    lost = WindowGroup(state, timer=due - 1)  # no timer_rule: saved under the old one
    processor._set_timer(lost)
    assert spark.of("a") == {due} and lost.timer == due
    assert lost.timer_rule == timers.RULE

    # Spark still holds it and fires it at W = 7 999 under the new code.
    spark = SparkTimers()
    processor.handle = spark.handle("a")
    spark.handle("a").registerTimer(due - 1)
    held = WindowGroup(state, timer=due - 1)
    (expiry,) = [t for _, t in spark.expired(due - 1)]
    processor._set_timer(held, timers.Firing(expiry, due - 1))
    spark.handled("a", expiry)
    assert spark.of("a") == {due} and held.timer == due


# -- end to end -------------------------------------------------------------------------

BASE = 1_700_000_040_000  # a minute boundary: window bounds fall on it
#: Spark's watermark after the first run, W = due + shift, where due is the lowest
#: watermark at which group a's windows have work: one below (a timer at due - 1 fired
#: there with nothing to do and was lost), two below (no timer fires), and at it (the
#: timer fires, the windows close in that run).
SHIFTS = {"one-below-due": -1, "two-below-due": -2, "at-due": 0}


def _event(user: str, ms: int, qty: int, page: str) -> dict[str, Any]:
    return {"user_id": user, "page": page, "qty": qty, "ts": BASE + ms}


def _two_runs(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    window: dict[str, Any],
    runs: list[list[dict[str, Any]]],
) -> Any:
    """Each run's events over both partitions, one available-now run each on one
    checkpoint; returns the spec."""
    spec = make_spec(workdir, broker.bootstrap_servers, topic, window)
    assert spec.window.engine == "state"
    for events in runs:
        records = [
            Record(json.dumps(e).encode(), i % 2, e["user_id"].encode(), e["ts"])
            for i, e in enumerate(events)
        ]
        send(broker.bootstrap_servers, topic, records)
        summary = PipelineRunner(spec, spark).run(available_now=True)
        assert summary.late_rows == 0
    return spec


AGGREGATIONS: list[tuple[str, str | None, str, dict[str, Any]]] = [
    ("count", None, "n", {}),
    ("sum", "qty", "qty_sum", {}),
    ("first", "page", "first_page", {}),
    ("count_distinct", "page", "pages", {"mode": "exact", "max_distinct_values_per_group": 50}),
]


def _window(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        **fields,
        "event_time_column": "ts",
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n, **o} for a, c, n, o in AGGREGATIONS
        ],
    }


def _expected(events: list[dict[str, Any]], window: dict[str, Any]) -> dict:
    """docs/spec-reference.md's rule through the independent reference: the pipeline's
    watermark is the highest event time less ``lateness_ms``."""
    return reference_windows(
        events,
        kind=window["kind"],
        time_key="ts",
        duration_ms=window.get("duration_ms"),
        gap_ms=window.get("gap_ms"),
        count=window.get("count"),
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - window["lateness_ms"],
    )


@pytest.mark.parametrize("shift", list(SHIFTS.values()), ids=list(SHIFTS))
def test_reopening_windows_close_whatever_the_watermark_stopped_on(
    shift: int, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Tumbling 10 s windows that reopen (allowed lateness 2 s, lateness 0): [0, 10 s)
    first emits once Spark's watermark (2 s behind the pipeline's) reaches 8 s, its due.
    Run 1's rows at 1 s and 10 s + shift leave it at 8 s + shift; run 2's rows far
    later close the windows of a and b (and d's, due in run 2 only)."""
    window = _window(
        {
            "kind": "tumbling",
            "duration_ms": 10_000,
            "lateness_ms": 0,
            "late_data": "reopen",
            "allowed_lateness_ms": 2_000,
        }
    )
    first = [_event("a", 1_000, 3, "/home"), _event("b", 10_000 + shift, 4, "/cart")]
    second = [_event("d", 30_000, 5, "/pay"), _event("c", 60_000, 6, "/home")]
    spec = _two_runs(spark, broker, topic, workdir, window, [first, second])
    actual = read_windows(spec.target.path, spec.natural_key())
    assert {k: row.pop("revision") for k, row in actual.items()} == dict.fromkeys(actual, 1)
    expected = _expected(first + second, window)
    assert {k[2] for k in expected} == {"a", "b", "d"}
    assert_same_windows(actual, expected)


@pytest.mark.parametrize("shift", list(SHIFTS.values()), ids=list(SHIFTS))
def test_count_windows_number_whatever_the_watermark_stopped_on(
    shift: int, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Count windows of 2 (lateness 1 s): a's events at 5 s and 5.5 s take their numbers
    once the watermark reaches 5 s, the due of a's oldest pending event. Run 1's row of
    b at 6 s + shift leaves it at 5 s + shift; run 2's rows far later number them all:
    a's window 0, and d's (due in run 2 only)."""
    window = _window({"kind": "count_tumbling", "count": 2, "lateness_ms": 1_000})
    first = [
        _event("a", 5_000, 3, "/home"),
        _event("a", 5_500, 4, "/cart"),
        _event("b", 6_000 + shift, 5, "/pay"),
    ]
    second = [
        _event("d", 30_000, 1, "/pay"),
        _event("d", 30_001, 2, "/pay"),
        _event("c", 60_000, 6, "/home"),
    ]
    spec = _two_runs(spark, broker, topic, workdir, window, [first, second])
    expected = _expected(first + second, window)
    assert {k[3] for k in expected} == {"a", "d"}
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


@pytest.mark.parametrize("shift", list(SHIFTS.values()), ids=list(SHIFTS))
def test_sessions_close_whatever_the_watermark_stopped_on(
    shift: int, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Sessions (gap 3 s, lateness 0) with an exact count_distinct run on the state API:
    a's session [1 s, 4 s) closes once the watermark reaches 4 s, its end. Run 1's row of
    b at 4 s + shift leaves it at 4 s + shift; run 2's rows far later close a's, b's and
    d's sessions."""
    window = _window({"kind": "session", "gap_ms": 3_000, "lateness_ms": 0})
    first = [_event("a", 1_000, 3, "/home"), _event("b", 4_000 + shift, 4, "/cart")]
    second = [_event("d", 30_000, 5, "/pay"), _event("c", 60_000, 6, "/home")]
    spec = _two_runs(spark, broker, topic, workdir, window, [first, second])
    expected = _expected(first + second, window)
    assert {k[2] for k in expected} == {"a", "b", "d"}
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)
