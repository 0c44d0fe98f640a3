"""Session windows with emit = "current": each micro-batch upserts the sessions it
changed, and a session whose bounds moved (it grew, its start moved back, two sessions
merged) replaces the rows it overlaps, in Delta, Postgres and Iceberg. The target always holds
each group's sessions as they stand: never two overlapping rows of one group."""

from __future__ import annotations

import itertools
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.windows import session
from flow_jobs_dev.broker import EmbeddedBroker
from tests.reference import reference_windows
from tests.support import (
    BASE_MS,
    aggregation_specs,
    assert_same_windows,
    fresh_checkpoint,
    iceberg_target,
    make_spec,
    read_iceberg,
    read_windows,
    send,
    to_records,
)
from tests.test_state_store import read_postgres

GAP = 1_000
AGGREGATIONS = [
    ("count", None, "n"),
    ("sum", "qty", "qty_sum"),
    ("first", "page", "first_page"),
    ("collect", "qty", "qty_list"),
]


def _event(user: str | None, offset_ms: int, qty: int) -> dict[str, Any]:
    ts = BASE_MS + offset_ms
    return {
        "user_id": user,
        "page": f"/p{qty}",
        "amount": None,
        "qty": qty,
        "ts": ts,
        "at": datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat(timespec="milliseconds"),
    }


# Run 1: user a has two open sessions, [1000, 2500) and [3000, 4000); b and NULL one each.
FIRST = [
    _event("a", 1_000, 1),
    _event("a", 1_500, 2),
    _event("b", 1_000, 3),
    _event("a", 3_000, 4),
    _event(None, 2_000, 5),
]
# Run 2, one event per micro-batch: a@2400 merges a's two sessions into [1000, 4000);
# a@500 moves its start back to 500; NULL@2999 extends [2000, 3000) to [2000, 3999);
# b@5000 opens a second session of b; c@30000 moves the watermark past them all.
SECOND = [
    _event("a", 2_400, 6),
    _event("a", 500, 7),
    _event(None, 2_999, 8),
    _event("b", 5_000, 9),
    _event("c", 30_000, 10),
]


def _spec(
    workdir: Path, broker: EmbeddedBroker, topic: str, target: dict[str, Any]
) -> PipelineSpec:
    window = {
        "kind": "session",
        "gap_ms": GAP,
        "emit": "current",
        "event_time_column": "ts",
        "lateness_ms": 10_000,
        "group_by": ["user_id"],
        "aggregations": aggregation_specs(AGGREGATIONS),
    }
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        source={"max_offsets_per_trigger": 1},
    )
    return PipelineSpec.model_validate({**spec.to_document(), "target": target})


def _expected(events: list[dict[str, Any]]) -> dict:
    return reference_windows(
        events,
        kind="session",
        time_key="ts",
        gap_ms=GAP,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        current=True,
    )


def _no_overlap(rows: dict[tuple, dict]) -> None:
    by_group: dict[Any, list[tuple]] = {}
    for start, end, user in rows:
        by_group.setdefault(user, []).append((start, end))
    for user, spans in by_group.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"overlapping sessions of {user!r}: {spans}"


@pytest.mark.parametrize("kind", ["delta", "postgres", "iceberg"])
def test_current_sessions_replace_what_they_overlap(
    kind: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    table = f"sessions_{os.environ['FLOW_STATE_STORE_SCHEMA']}"
    target = {
        "delta": {"kind": "delta", "path": str(workdir / "target")},
        "postgres": {"kind": "postgres", "table": table},
        "iceberg": iceberg_target(workdir, "sessions"),
    }[kind]
    spec = _spec(workdir, broker, topic, target)
    key = spec.natural_key()
    assert key == ["window_start", "window_end", "user_id"]

    def read() -> dict[tuple, dict]:
        rows = {
            "delta": lambda: read_windows(workdir / "target", key),
            "postgres": lambda: read_postgres(table, key),
            "iceberg": lambda: read_iceberg(target, key),
        }[kind]()
        _no_overlap(rows)
        return rows

    send(broker.bootstrap_servers, topic, to_records(FIRST, partitions=1))
    first = PipelineRunner(spec, spark).run(available_now=True)
    assert first.windows_superseded == 1  # a@1500 extends [1000, 2000) to [1000, 2500)
    assert_same_windows(read(), _expected(FIRST))

    send(broker.bootstrap_servers, topic, to_records(SECOND, partitions=1))
    second = PipelineRunner(spec, spark).run(available_now=True)
    assert second.batches >= len(SECOND) and second.late_rows == 0
    # a's two rows give way to [1000, 4000), that one to [500, 4000); NULL's one row
    assert second.windows_superseded == 4
    rows = read()
    assert_same_windows(rows, _expected(FIRST + SECOND))
    ms = lambda offset: datetime.fromtimestamp((BASE_MS + offset) / 1000, tz=UTC)  # noqa: E731
    assert rows[(ms(500), ms(4_000), "a")]["qty_list"] == [7, 1, 2, 6, 4]

    # A new checkpoint lineage re-reads everything in one micro-batch: the same rows.
    doc = fresh_checkpoint(spec).to_document()
    del doc["sources"][0]["max_offsets_per_trigger"]
    again = PipelineRunner(PipelineSpec.model_validate(doc), spark).run(available_now=True)
    assert again.input_rows == len(FIRST + SECOND) and again.windows_superseded == 0
    assert read() == rows


# -- the operator and the target's rule, without Spark, under random cuts ------------

LATENESS = 50


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, LATENESS - 1)), max_size=60),
    st.sets(st.integers(1, 59), max_size=12),
    st.integers(1, 40),
)
def test_sessions_as_they_stand_under_any_cut(
    steps: list[tuple[int, int]], cuts: set[int], gap: int
) -> None:
    """Each micro-batch's late rows (at or behind the watermark of the batches before)
    never reach the operator; the target applies each emitted session as the sinks do
    (delete the rows it overlaps, upsert it), and the sessions close on the watermark.
    The target ends as the sessions of the rows that were not late (seed: a session is
    [first, last + gap), an event joins when it falls at or before the session's end)."""
    events, base = [], 1_000
    for i, (step, disorder) in enumerate(steps):
        base += step
        events.append((base - disorder, i % 3, i // 3, i))  # (time, lane, position, id)
    bounds = [0, *sorted(c for c in cuts if c < len(events)), len(events)]
    state = session.SessionState(_frame([]))
    target: dict[tuple[int, int], tuple[int, ...]] = {}
    kept: list[tuple[int, int, int, int]] = []
    highest: int | None = None
    for a, b in [*itertools.pairwise(bounds), (len(events), len(events))]:
        watermark = None if highest is None else highest - LATENESS
        rows = [e for e in events[a:b] if watermark is None or e[0] > watermark]
        kept += rows
        state, changed = session.add(state, _frame(rows), gap)
        starts, ends = session.bounds(state.frame, changed, gap)
        ids = state.frame.columns["id"].data
        for start, end, lo, hi in zip(starts, ends, changed.lo, changed.hi, strict=True):
            for old in [k for k in target if k[0] < end and k[1] > start]:
                del target[old]
            target[(int(start), int(end))] = tuple(int(x) for x in ids[lo : hi + 1])
        if watermark is not None:
            state, _ = session.close(state, watermark, gap)
            held = session.sessions(state.frame.t, gap)
            assert (session.bounds(state.frame, held, gap)[1] > watermark).all()  # only open
        times = [e[0] for e in events[a:b]] + ([highest] if highest is not None else [])
        highest = max(times) if times else None
    want: dict[tuple[int, int], tuple[int, ...]] = {}
    members: list[tuple[int, int, int, int]] = []
    for e in sorted(kept):
        if members and e[0] > members[-1][0] + gap:
            want[(members[0][0], members[-1][0] + gap)] = tuple(m[3] for m in members)
            members = []
        members.append(e)
    if members:
        want[(members[0][0], members[-1][0] + gap)] = tuple(m[3] for m in members)
    assert target == want


def _frame(events: list[tuple[int, int, int, int]]) -> EventFrame:
    a = np.array(events, np.int64).reshape(-1, 4)
    ids = Values(a[:, 3], np.ones(len(a), bool))
    return EventFrame(a[:, 0], a[:, 1], a[:, 2], {"id": ids})
