"""late_data = "reopen" (docs/spec-reference.md, "Late rows").

The operator's logic is checked against a model written from the rule's words, micro-
batch by micro-batch, over random rows and cuts (hypothesis); the pipeline end to end
on a real broker, Spark, Delta and Postgres, across restarts.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flow_jobs.kernels import timers
from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.windows import fixed as reopen
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows, window_starts
from tests.spark_timers import SparkTimers
from tests.support import (
    assert_same_windows,
    iceberg_target,
    make_spec,
    read_iceberg,
    read_windows,
    send,
)

# -- the operator against the model ---------------------------------------------------

Row = tuple[str, int, int]  # group, event time (ms), value
Emit = tuple[int, str, int, int, int, int]  # batch, group, start, revision, count, sum


def model(
    batches: Sequence[Sequence[Row]], duration: int, hop: int, lateness: int, allowed: int
) -> tuple[list[Emit], int]:
    """What the rule says each micro-batch emits, and how many rows are late.

    Spark's watermark of batch N is the highest event time of batches before N, less
    lateness + allowed lateness (the pipeline's watermark is allowed lateness ahead of
    it); a row at or below the watermark of batch N - 1 is late and dropped. A window
    emits with revision 1 in the first batch whose pipeline watermark is at or past its
    end, and again, revision + 1, in each later batch that brings it rows; it is gone
    once Spark's watermark reaches its end, and no row may reach it after that. Spark's
    watermark starts at 0 (the epoch). The last batch is a no-data batch, as Spark runs
    one at the end of a replay."""
    delay = lateness + allowed
    windows: dict[tuple[str, int], list[int]] = defaultdict(list)
    revision: dict[tuple[str, int], int] = defaultdict(int)
    gone: set[tuple[str, int]] = set()
    emits: list[Emit] = []
    late = 0
    highest: int | None = None
    previous: int | None = None  # watermark of the batch before
    for n, batch in enumerate([*batches, []]):
        watermark = max(previous or 0, highest - delay) if highest is not None else 0
        touched = set()
        for group, t, value in batch:
            if previous is not None and t <= previous:
                late += 1
                continue
            for start in window_starts(t, duration, hop):
                assert (group, start) not in gone, "a row reached a window no longer held"
                windows[(group, start)].append(value)
                touched.add((group, start))
        for w in [*sorted(touched), *sorted(windows)]:
            values = windows[w]
            reopened = w in touched and revision[w] > 0
            due = revision[w] == 0 and w[1] + duration <= watermark + allowed
            if reopened or due:
                revision[w] += 1
                emits.append((n, w[0], w[1], revision[w], len(values), sum(values)))
                touched.discard(w)  # once per batch
        for w in [w for w in windows if w[1] + duration <= watermark]:
            gone.add(w)
            del windows[w]
        times = [t for _, t, _ in batch]
        highest = max([*times, *([highest] if highest is not None else [])], default=None)
        previous = watermark
    return emits, late


def _frame(rows: Sequence[Row], seq: int) -> EventFrame:
    return EventFrame(
        np.array([t for _, t, _ in rows], np.int64),
        np.zeros(len(rows), np.int64),
        np.arange(seq, seq + len(rows), dtype=np.int64),
        {"v": Values(np.array([v for *_, v in rows], np.int64), np.ones(len(rows), bool))},
    )


def drive(
    batches: Sequence[Sequence[Row]], duration: int, hop: int, lateness: int, allowed: int
) -> tuple[list[Emit], int]:
    """The operator as Spark runs it: per batch, late rows out, each group's rows
    through ``add`` and its timer set at ``due``; then each timer at or below the
    watermark fires (Spark's rule, tests/spark_timers.py): ``close``, the next timer,
    and Spark deletes the fired one. After each batch, Spark holds exactly the timer
    each group's state saved."""
    b = reopen.Bounds(duration, hop, allowed)
    states: dict[str, reopen.ReopenState] = {}
    spark = SparkTimers()
    saved: dict[str, int | None] = {}
    emits: list[Emit] = []
    late, seq = 0, 0
    highest: int | None = None
    previous: int | None = None

    def out(n: int, group: str, state: reopen.ReopenState, index: np.ndarray) -> None:
        w = reopen.ranges(state.frame, state.starts[index], b)
        v = state.frame.columns["v"].data
        for i, k in enumerate(index):
            lo, hi = w.lo[i], w.hi[i]
            start, revision = int(state.starts[k]), int(state.revisions[k])
            emits.append((n, group, start, revision, int(hi - lo + 1), int(v[lo : hi + 1].sum())))

    for n, batch in enumerate([*batches, []]):
        watermark = max(previous or 0, highest - lateness - allowed) if highest is not None else 0
        on_time = [r for r in batch if previous is None or r[1] > previous]
        late += len(batch) - len(on_time)
        for group in sorted({g for g, _, _ in on_time}):
            rows = [r for r in on_time if r[0] == group]
            empty = reopen.empty(_frame([], 0))
            state, reopened = reopen.add(states.get(group, empty), _frame(rows, seq), b)
            seq += len(rows)
            out(n, group, state, reopened)
            states[group] = state
            due = reopen.due(state, b)
            saved[group] = timers.settle(spark.handle(group), saved.get(group), due)
        for group, expiry in spark.expired(watermark):
            before = states[group]
            state, first = reopen.close(before, watermark, b)
            out(n, group, before, first)
            states[group] = state
            firing = timers.Firing(expiry, watermark)
            due = reopen.due(state, b)
            saved[group] = timers.settle(spark.handle(group), saved[group], due, firing)
            spark.handled(group, expiry)
        for group in states:
            assert spark.of(group) == {saved[group]} - {None}
        times = [t for _, t, _ in batch]
        highest = max([*times, *([highest] if highest is not None else [])], default=None)
        previous = watermark
    return emits, late


_TIMES = st.integers(min_value=-5_000, max_value=60_000)
_ROWS = st.lists(
    st.tuples(st.sampled_from("abc"), _TIMES, st.integers(-3, 1_000)), min_size=1, max_size=60
)


@settings(max_examples=300, deadline=None)
@given(
    rows=_ROWS,
    cuts=st.lists(st.integers(0, 60), max_size=8),
    duration=st.sampled_from([1_000, 5_000, 10_000]),
    hops=st.sampled_from([1, 2, 3]),
    lateness=st.sampled_from([0, 1_000, 3_000]),
    allowed=st.sampled_from([0, 1, 2_000, 7_000]),
)
def test_the_operator_emits_what_the_rule_says_in_every_micro_batch(
    rows: list[Row], cuts: list[int], duration: int, hops: int, lateness: int, allowed: int
) -> None:
    hop = duration // hops if duration % hops == 0 else duration
    bounds = sorted({min(c, len(rows)) for c in cuts} | {0, len(rows)})
    batches = [rows[a:b] for a, b in itertools.pairwise(bounds)]
    expected_emits, expected_late = model(batches, duration, hop, lateness, allowed)
    emits, late = drive(batches, duration, hop, lateness, allowed)
    assert late == expected_late
    assert sorted(emits) == sorted(expected_emits)


def test_a_late_row_reopens_a_closed_window_once_per_batch() -> None:
    """The issue's case, spelled out: [0, 10 s) closes at 10 s, a row at 5 s corrects it
    (revision 2), a row at 6 s in the next batch again (3); once the watermark is 20 s
    past (10 s allowed lateness), a row at 7 s is late and the window is gone."""
    s, t0 = 1_000, 1_700_000_000_000  # a minute boundary: far from Spark's initial 0

    def row(second: int, value: int) -> Row:
        return ("a", t0 + second * s, value)

    batches = [
        [row(1, 1), row(2, 1)],
        [row(12, 1)],  # batch 2's watermark: 12 s, less 10 s allowed: Spark's is 2 s
        [row(5, 10), row(5, 100)],  # [0, 10 s) first emitted in batch 2, with these
        [row(6, 1000)],
        [row(30, 1)],
        [row(31, 1)],
        [row(7, 5)],  # Spark's watermark is 20 s: late
    ]
    emits, late = drive(batches, 10 * s, 10 * s, 0, 10 * s)
    assert (emits, late) == model(batches, 10 * s, 10 * s, 0, 10 * s)
    zero = [(n, rev, count, total) for n, _, start, rev, count, total in emits if start == t0]
    assert zero == [(2, 1, 4, 112), (3, 2, 5, 1112)]  # batch 2: first emit with the 5 s rows
    assert late == 1


def test_a_watermark_one_below_a_window_due_does_not_lose_its_timer() -> None:
    """The reported case: Spark's watermark stops at 7 999, one below the 8 000 at which
    the [0, 10 s) windows are due (10 s less 2 s allowed lateness). Their timers are at
    8 000 and do not fire there; a later row moves the watermark past, and both emit."""
    t0 = 1_700_000_040_000  # a minute boundary

    def row(group: str, ms: int) -> Row:
        return (group, t0 + ms, 1)

    batches = [[row("a", 1_000), row("b", 9_999)], [], [row("c", 60_000)]]
    emits, late = drive(batches, 10_000, 10_000, 0, 2_000)
    assert (emits, late) == model(batches, 10_000, 10_000, 0, 2_000)
    assert sorted(e[1:] for e in emits) == [("a", t0, 1, 1, 1), ("b", t0, 1, 1, 1)]


# -- end to end ---------------------------------------------------------------------------

LATENESS = 2_000
ALLOWED = 20_000
DURATION = 10_000
AGGREGATIONS: list[tuple[str, str | None, str, dict[str, Any]]] = [
    ("count", None, "n", {}),
    ("sum", "amount", "amount_sum", {}),
    ("min", "qty", "qty_min", {}),
    ("avg", "amount", "amount_avg", {}),
    ("first", "page", "first_page", {}),
    ("last", "page", "last_page", {}),
    ("count_distinct", "page", "pages", {"mode": "exact", "max_distinct_values_per_group": 50}),
    ("count_distinct", "qty", "qtys", {}),
    ("collect", "qty", "qty_list", {}),
]
BASE = 1_700_000_040_000  # a minute boundary


def _spec(workdir: Path, broker: EmbeddedBroker, topic: str) -> PipelineSpec:
    window = {
        "kind": "hopping",
        "duration_ms": DURATION,
        "hop_ms": DURATION // 2,
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "late_data": "reopen",
        "allowed_lateness_ms": ALLOWED,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n, **o} for a, c, n, o in AGGREGATIONS
        ],
    }
    return make_spec(workdir, broker.bootstrap_servers, topic, window)


def _event(rng: random.Random, user: str, ms: int, phase: int) -> dict[str, Any]:
    return {
        "user_id": user,
        "page": rng.choice(["/home", "/cart", "/pay", None]),
        "amount": rng.choice([None, 1.5, 2.25, -4.0, 1e6]),
        "qty": rng.choice([None, 0, 3, 7, 2**40]),
        "ts": BASE + ms,
        "_phase": phase,
    }


def _phase_records(events: list[dict[str, Any]], counts: list[int]) -> list[Record]:
    """Keys on both partitions, round-robin; each event notes its Kafka position (the
    tie-break of equal event times)."""
    records = []
    for i, e in enumerate(events):
        p = i % 2
        e["_arrival"] = (p, counts[p])
        counts[p] += 1
        value = json.dumps({k: v for k, v in e.items() if not k.startswith("_")}).encode()
        records.append(Record(value, p, e["user_id"].encode(), e["ts"]))
    return records


def _phases(seed: int) -> list[list[dict[str, Any]]]:
    """Phase 1: 0..40 s, with equal times and disorder inside the lateness; its
    watermark is 40 - 2 = 38 s: windows ending by 38 s emit, Spark's watermark is
    38 - 20 = 18 s. Phase 2: rows at 19..37 s (within the allowed lateness: they reopen
    emitted windows), at 3..18 s (behind Spark's watermark: late, dropped, counted), and
    on-time rows to 60 s. Phase 3: more rows for windows phase 2 reopened."""
    rng = random.Random(seed)
    one = [_event(rng, u, ms, 1) for ms in range(0, 40_001, 500) for u in ("a", "b", "c")]
    one += [_event(rng, "a", 20_000, 1) for _ in range(3)]  # equal times
    head = one[: len(one) // 2]
    rng.shuffle(head)  # disorder: rows up to 20 s earlier than others before them
    one[: len(head)] = head

    def some(n: int, lo: int, hi: int) -> list[dict[str, Any]]:
        return [_event(rng, rng.choice("abc"), rng.randrange(lo, hi), 2) for _ in range(n)]

    reopening, late = some(12, 19_000, 37_000), some(6, 3_000, 18_001)
    on_time = [_event(rng, u, ms, 2) for ms in range(41_000, 60_001, 1_000) for u in ("b", "c")]
    two = on_time + reopening + late
    rng.shuffle(two)
    three = [_event(rng, "b", rng.randrange(38_500, 50_000), 3) for _ in range(4)]
    for e in late:
        e["_late"] = True
    return [one, two, three]


def _expected(events: list[dict[str, Any]], watermark: int) -> dict:
    return reference_windows(
        [e for e in events if not e.get("_late")],
        kind="hopping",
        time_key="ts",
        duration_ms=DURATION,
        hop_ms=DURATION // 2,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=watermark,
    )


def _ledger(spec: PipelineSpec) -> list[dict[str, Any]]:
    ledger = LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
    return ledger.recent_batches(spec.name, 1_000)


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_reopen_corrects_closed_windows_across_restarts_and_drops_what_is_later(
    kind: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Three runs on one checkpoint (a restart between each), one data micro-batch
    each: a window emitted by an earlier run that gets rows in this one is revised once;
    one this run emits first has revision 1, whatever rows it got. In a Delta table
    and in an Iceberg one."""
    spec = _spec(workdir, broker, topic)
    if kind == "iceberg":
        target = iceberg_target(workdir, "reopened")
        spec = PipelineSpec.model_validate({**spec.to_document(), "target": target})

    def read() -> dict[tuple, dict[str, Any]]:
        if kind == "iceberg":
            return read_iceberg(target, spec.natural_key())
        return read_windows(spec.target.path, spec.natural_key())

    counts = [0, 0]
    seen: list[dict[str, Any]] = []
    revisions: dict[tuple, int] = {}
    for n, events in enumerate(_phases(7)):
        send(broker.bootstrap_servers, topic, _phase_records(events, counts))
        summary = PipelineRunner(spec, spark).run(available_now=True)
        seen += events
        expected = _expected(seen, max(e["ts"] for e in seen) - LATENESS)
        on_time = [e for e in events if not e.get("_late")]
        revisions = {
            k: revisions[k] + any(_inside(e, k) for e in on_time) if k in revisions else 1
            for k in expected
        }
        actual = read()
        assert {k: row.pop("revision") for k, row in actual.items()} == revisions
        assert_same_windows(actual, expected)
        assert summary.late_rows == sum(1 for e in events if e.get("_late"))
        if n > 0:
            assert 2 in revisions.values(), f"phase {n + 1} reopened no window: proves nothing"
    late = sum(1 for e in seen if e.get("_late"))
    assert sum(r["late_rows"] for r in _ledger(spec)) == late > 0


def _inside(e: dict[str, Any], key: tuple) -> bool:
    start, end, user = key
    return e["user_id"] == user and start.timestamp() * 1000 <= e["ts"] < end.timestamp() * 1000
