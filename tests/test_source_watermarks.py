"""The pipeline's watermark is the minimum over its sources, and idle sources leave it
(docs/spec-reference.md, "Watermarks over several sources").

Two sources feed one window through ``[transform].sql`` (a UNION ALL): ``slow`` lags
``fast`` in event time. Under the minimum rule no row of either source is late as long as
each source's own disorder stays inside the lateness, whatever the micro-batch cut; the
expected windows come from ``tests.reference`` over every row of both sources, closed by
the lower of the two sources' watermarks.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli_store import format_batches
from flow_jobs.kafka.heartbeats import IDLE_FOR_THE_RUN_MS
from flow_jobs.runtime.idleness import IdleSources, replay_targets
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.tables import show
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import (
    BASE_MS,
    CLICK_SCHEMA,
    assert_same_windows,
    random_clicks,
    read_windows,
    send,
)

LATENESS = 5_000
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum")]
KINDS: dict[str, dict[str, Any]] = {
    "tumbling": {"kind": "tumbling", "duration_ms": 60_000},
}
UNION = "SELECT user_id, amount, ts FROM slow UNION ALL SELECT user_id, amount, ts FROM fast"


def _spec(
    workdir: Path,
    broker: EmbeddedBroker,
    topics: dict[str, str],
    kind: str,
    per_trigger: int | None = None,
    **window: Any,
) -> PipelineSpec:
    sources = [
        {
            "name": name,
            "kind": "kafka",
            "topic": topic,
            "bootstrap_servers": broker.bootstrap_servers,
            "format": "json",
            "schema": CLICK_SCHEMA,
            **({"max_offsets_per_trigger": per_trigger} if per_trigger else {}),
        }
        for name, topic in topics.items()
    ]
    doc = {
        "name": f"two-sources-{kind}",
        "sources": sources,
        "transform": {
            "sql": UNION,
            "window": {
                **KINDS[kind],
                "event_time_column": "ts",
                "lateness_ms": LATENESS,
                "group_by": ["user_id"],
                "aggregations": [
                    {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
                ],
                **window,
            },
        },
        "target": {"kind": "delta", "path": str(workdir / "target")},
        "checkpoint": {"location": str(workdir / "checkpoint")},
        "dead_letter": {"path": str(workdir / "dead_letters")},
    }
    return PipelineSpec.model_validate(doc)


def _records(events: list[dict[str, Any]]) -> list[Record]:
    return [
        Record(json.dumps(e).encode(), i % 2, (e["user_id"] or "").encode(), e["ts"])
        for i, e in enumerate(events)
    ]


def _topics(broker: EmbeddedBroker, topic: str) -> dict[str, str]:
    names = {"slow": f"{topic}-slow", "fast": f"{topic}-fast"}
    for name in names.values():
        broker.create_topic(name, partitions=2)
    return names


def _expected(kind: str, events: list[dict[str, Any]], watermark_ms: int) -> dict:
    return reference_windows(
        events,
        kind=kind,
        time_key="ts",
        duration_ms=KINDS[kind]["duration_ms"],
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=watermark_ms,
    )


# The rule is Spark's global watermark, the same for every window engine; the state
# engine's (sliding) use of it runs in test_late_rows and test_window_kinds.
CASES = [("tumbling", 20)]


@pytest.mark.parametrize(
    ("kind", "per_trigger"), CASES, ids=[f"{k}-{p}-per-batch" for k, p in CASES]
)
def test_a_lagging_source_holds_the_watermark_back(
    kind: str,
    per_trigger: int | None,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
) -> None:
    """``fast`` reaches the end of ten minutes in its first micro-batch; ``slow`` spreads
    60 rows over the same ten minutes (20 a batch). A watermark taken after the union
    would follow ``fast`` and lose most of ``slow``; the minimum counts every row."""
    rng = random.Random(f"lagging/{kind}/{per_trigger}")
    slow = random_clicks(rng, 60, step_ms=10_000, disorder_ms=3_000)
    fast = random_clicks(rng, 12, step_ms=50_000, disorder_ms=0)
    topics = _topics(broker, topic)
    send(broker.bootstrap_servers, topics["slow"], _records(slow))
    send(broker.bootstrap_servers, topics["fast"], _records(fast))
    spec = _spec(workdir, broker, topics, kind, per_trigger)

    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.late_rows == 0
    watermark = min(max(e["ts"] for e in rows) for rows in (slow, fast)) - LATENESS
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, _expected(kind, slow + fast, watermark))


def test_a_source_with_nothing_to_read_is_idle_for_a_whole_replay(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """An --available-now run does not look at the clock: a source that has nothing to
    read in the run leaves the minimum for all of it (without that, its watermark, 0,
    would hold every window open). (A source taking the minimum back once it has
    records: the continuous test below.)"""
    rng = random.Random("empty-source")
    slow = random_clicks(rng, 120, step_ms=2_500, disorder_ms=3_000)
    topics = _topics(broker, topic)
    send(broker.bootstrap_servers, topics["slow"], _records(slow))
    spec = _spec(workdir, broker, topics, "tumbling")

    PipelineRunner(spec, spark).run(available_now=True)

    first_watermark = max(e["ts"] for e in slow) - LATENESS
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, _expected("tumbling", slow, first_watermark))


def test_a_replay_lifts_only_empty_sources_and_only_beside_one_with_records(
    broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """--available-now idleness (no clock): with nothing to read anywhere, no source is
    idle (the watermark must not move: every source lifted to the highest timestamp
    would close every window and make every later row late); once ``slow`` has a
    record, ``fast``, still empty, is idle for the run."""
    topics = _topics(broker, topic)
    spec = _spec(workdir, broker, topics, "tumbling")
    checkpoint = str(workdir / "checkpoint")

    assert replay_targets(spec, checkpoint) == {}
    send(broker.bootstrap_servers, topics["slow"], _records(random_clicks(random.Random(1), 1)))
    assert replay_targets(spec, checkpoint) == {"fast": IDLE_FOR_THE_RUN_MS}


def _await(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _watermarks(runner: PipelineRunner) -> list[int]:
    """The watermark each micro-batch ran under so far, by batch id (epoch ms)."""
    progress = runner.progress.progress if runner.progress else {}
    marks = []
    for _, p in sorted(progress.items()):
        mark = p.get("eventTime", {}).get("watermark")
        if mark:
            marks.append(int(datetime.fromisoformat(mark).timestamp() * 1000))
    return marks


def test_an_idle_source_stops_holding_the_watermark_until_it_has_records_again(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """A continuous run, source_idleness_ms = 3 s. Both sources start together; then
    only ``slow`` goes on: once ``fast`` has had no record for 3 s, the watermark follows
    ``slow`` alone and its windows close. ``fast`` comes back with a record just ahead of
    that watermark, and ``slow`` runs far ahead: the next watermark is ``fast``'s, the
    minimum again, not ``slow``'s."""
    topics = _topics(broker, topic)
    spec = _spec(workdir, broker, topics, "tumbling", source_idleness_ms=3_000)
    spec = spec.model_copy(
        update={"runtime": spec.runtime.model_copy(update={"trigger_interval_ms": 200})}
    )
    rng = random.Random("idle")
    both = random_clicks(rng, 20, step_ms=1_000, keys=("a", "b"))
    alone = random_clicks(rng, 40, step_ms=5_000, keys=("a",), start_ms=BASE_MS + 30_000)
    slow_mark = max(e["ts"] for e in alone) - LATENESS
    back = {"user_id": "b", "page": None, "amount": 1.0, "qty": 1, "ts": slow_mark + 10_000}
    fast_mark = back["ts"] - LATENESS
    ahead = random_clicks(rng, 10, step_ms=60_000, keys=("a",), start_ms=slow_mark + 60_000)
    stop = threading.Event()
    runner = PipelineRunner(spec, spark, stop_event=stop)
    thread = threading.Thread(target=runner.run, daemon=True)

    def rows_in() -> int:
        return runner.progress.input_rows() if runner.progress else 0

    send(broker.bootstrap_servers, topics["slow"], _records(both[::2]))
    send(broker.bootstrap_servers, topics["fast"], _records(both[1::2]))
    thread.start()
    try:
        _await(lambda: rows_in() == 20, 90, "both sources' first records")
        send(broker.bootstrap_servers, topics["slow"], _records(alone))
        # fast is idle: the watermark reaches slow's, far past fast's own (minute 0).
        _await(lambda: slow_mark in _watermarks(runner), 90, "the watermark to follow slow")
        closed = read_windows(spec.target.path, spec.natural_key())
        assert_same_windows(closed, _expected("tumbling", both + alone, slow_mark))

        seen = len(_watermarks(runner))
        send(broker.bootstrap_servers, topics["fast"], _records([back]))
        send(broker.bootstrap_servers, topics["slow"], _records(ahead))
        _await(lambda: max(_watermarks(runner)) > slow_mark, 90, "a watermark past slow's")
        later = [m for m in _watermarks(runner)[seen:] if m > slow_mark]
        assert later[0] == fast_mark  # fast holds the minimum again
    finally:
        stop.set()
        thread.join(60)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _report(**sources: tuple[int, int | None]) -> dict[str, Any]:
    """A micro-batch report with each source's (rows, max event time ms)."""
    return {
        "observedMetrics": {
            f"flow_source_{name}": {"rows": rows, "max_event_time_ms": latest}
            for name, (rows, latest) in sources.items()
        }
    }


def test_idle_sources_publish_the_lowest_watermark_of_the_others(tmp_path: Path) -> None:
    """The spec reference: global = min over the sources not idle; an idle source's target is that
    minimum; all idle, or no other watermark known yet: no target."""
    clock = _Clock()
    path = tmp_path / "idle.json"
    idle = IdleSources(
        str(path), ["a", "b", "c"], lateness_ms=1_000, idleness_ms=2_000, clock=clock
    )
    assert json.loads(path.read_text()) == {}  # an earlier run's targets are cleared

    idle.observe(_report(a=(5, 10_000), b=(5, 20_000), c=(5, 30_000)))
    clock.now = 1.5
    idle.observe(_report(b=(3, 25_000), c=(3, 40_000), a=(0, None)))
    assert idle.targets() == {}  # a's last records were 1.5 s ago: not idle yet
    clock.now = 2.5
    assert idle.targets() == {"a": 24_000}  # min(b, c) = 25 s - 1 s
    idle.publish()
    assert json.loads(path.read_text()) == {"a": 24_000}

    clock.now = 3.0
    idle.observe(_report(a=(1, 12_000), b=(0, None), c=(2, 50_000)))
    assert idle.targets() == {}  # a has records again; b's were 1.5 s ago
    clock.now = 3.6
    assert idle.targets() == {"b": 11_000}  # a's own watermark is behind the heartbeat's
    clock.now = 100.0
    assert idle.targets() == {}  # every source idle: the watermark does not move
    idle.publish()
    assert json.loads(path.read_text()) == {}


def test_a_source_watermark_never_goes_back(tmp_path: Path) -> None:
    clock = _Clock()
    idle = IdleSources(str(tmp_path / "i.json"), ["a", "b"], 0, 1_000, clock=clock)
    idle.observe(_report(a=(1, 9_000), b=(1, 5_000)))
    idle.observe(_report(a=(1, 7_000), b=(0, None)))  # a's disorder: its mark stays 9 s
    clock.now = 2.0
    idle.observe(_report(a=(1, 8_000)))
    assert idle.targets() == {"b": 9_000}


def test_the_ledger_table_shows_offsets_not_heartbeats() -> None:
    """A source's end offset may hold "_heartbeat" (and "_data_loss"): not partitions."""
    row = {
        "state_version": 0,
        "batch_id": 7,
        "replayed": False,
        "end_offsets": {
            "fast": {"t-fast": {"0": 3, "1": 4}, "_heartbeat": {"seq": 2, "watermark_ms": 9}},
        },
        "global_watermark": None,
        "watermark_lag": None,
        "input_rows": 0,
        "output_rows": 0,
        "late_rows": 0,
        "dead_lettered_rows": 0,
        "target_kind": "delta",
        "target_version": None,
        "committed_at": None,
    }
    out = io.StringIO()
    show(format_batches([row]), file=out)
    table = out.getvalue()
    assert "fast:0=3,1=4" in table
    assert "seq" not in table and "watermark_ms" not in table
