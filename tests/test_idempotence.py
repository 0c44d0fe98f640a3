"""Re-runs, replays and restarts never duplicate nor lose a window row."""

from __future__ import annotations

import random
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from flow_jobs.embedded.broker import EmbeddedBroker
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    fresh_checkpoint,
    make_spec,
    random_clicks,
    read_windows,
    send,
    to_records,
)

AGGREGATIONS = [
    ("count", None, "n"),
    ("sum", "amount", "amount_sum"),
    ("first", "page", "first_page"),
]
LATENESS = 4_000


def _spec(workdir: Path, broker: EmbeddedBroker, topic: str) -> PipelineSpec:
    window = {
        "kind": "hopping",
        "duration_ms": 30_000,
        "hop_ms": 10_000,
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
    }
    return make_spec(workdir, broker.bootstrap_servers, topic, window)


def _expected(events: list[dict]) -> dict:
    return reference_windows(
        events,
        time_key="ts",
        duration_ms=30_000,
        hop_ms=10_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )


def test_rerun_replay_and_fresh_checkpoint_leave_one_row_per_key(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(11), 800, step_ms=400, disorder_ms=3_000)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec = _spec(workdir, broker, topic)
    PipelineRunner(spec, spark).run(available_now=True)
    first = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(first, _expected(events))
    version = DeltaTable(spec.target.path).version()

    # 1. Same checkpoint, nothing new: no batch, no commit.
    rerun = PipelineRunner(spec, spark).run(available_now=True)
    assert rerun.input_rows == 0
    assert DeltaTable(spec.target.path).version() == version

    # 2. A crash after the MERGE but before Spark's commit log: the batch is replayed,
    #    and the Delta transaction id makes the replay a no-op.
    commit_log = Path(spec.checkpoint_location(), "commits")
    last = max(int(p.name) for p in commit_log.glob("[0-9]*"))
    (commit_log / str(last)).unlink()
    (commit_log / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum sidecar
    replay = PipelineRunner(spec, spark).run(available_now=True)
    assert replay.batches >= 1
    assert replay.windows_inserted == replay.windows_updated == 0
    assert DeltaTable(spec.target.path).version() == version
    assert read_windows(spec.target.path, spec.natural_key()) == first

    # 3. A fresh checkpoint recomputes everything: MERGE updates, nothing doubles.
    fresh = PipelineRunner(fresh_checkpoint(spec), spark).run(available_now=True)
    assert fresh.windows_inserted == 0
    assert fresh.windows_updated == len(first)
    assert DeltaTable(spec.target.path).version() > version
    assert read_windows(spec.target.path, spec.natural_key()) == first


def test_restart_resumes_open_windows_and_counts_late_rows(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    rng = random.Random(5)
    events = random_clicks(rng, 1_000, step_ms=300, disorder_ms=3_000)
    half = len(events) // 2
    spec = _spec(workdir, broker, topic)
    send(broker.bootstrap_servers, topic, to_records(events[:half]))
    PipelineRunner(spec, spark).run(available_now=True)

    # The second half continues the open windows; one more row is far behind the
    # watermark by then and must be dropped (and counted), not merged.
    watermark = max(e["ts"] for e in events[:half]) - LATENESS
    late = {**events[0], "ts": watermark - 60_000, "user_id": "late"}
    tail = to_records([*events[half:], late])
    send(
        broker.bootstrap_servers,
        topic,
        [
            # keep the producer's round-robin partitions continuous across the two sends
            type(r)(r.value, (i + half) % 2, r.key, r.timestamp_ms)
            for i, r in enumerate(tail)
        ],
    )
    resumed = PipelineRunner(spec, spark).run(available_now=True)

    # Spark counts what its stateful operator drops: (window, group) partial aggregates.
    # The late row lies in 3 closed hopping windows (30 s every 10 s), so 3.
    assert resumed.late_rows_dropped == 3
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, _expected(events))
    assert not any(key[2] == "late" for key in actual)
