"""Late rows, row by row: counted per source for every time window kind, kept out of
the windows, dropped or dead-lettered with their original bytes (late_data = "dlq").

Each test runs a pipeline twice on one checkpoint: phase 1 closes windows and leaves a
watermark W; phase 2 brings rows older than W (late, whatever the micro-batch cut) among
on-time rows whose disorder stays inside the lateness (never late, whatever the cut).
The expected windows come from ``tests.reference`` over the on-time rows alone; the
late rule (at or below the previous micro-batch's watermark) is in docs/spec-reference.md.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    make_spec,
    random_clicks,
    read_windows,
    send,
)

LATENESS = 3_000
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum"), ("max", "qty", "qty_max")]
KINDS: dict[str, dict[str, Any]] = {
    "tumbling": {"kind": "tumbling", "duration_ms": 10_000},
    # duration = 3 x hop: a late row falls in 3 closed windows and still counts once
    "hopping": {"kind": "hopping", "duration_ms": 15_000, "hop_ms": 5_000},
    "session": {"kind": "session", "gap_ms": 4_000},
    # a row is in up to 3 windows of its cumulation, each with its own end
    "cumulate": {"kind": "cumulate", "step_ms": 5_000, "max_duration_ms": 15_000},
    "sliding": {"kind": "sliding", "duration_ms": 10_000},
}


def _records(events: list[dict[str, Any]], counts: list[int]) -> list[Record]:
    """Round-robin over the two partitions, continuing ``counts`` (records so far per
    partition); each event's partition and offset go into ``_at``."""
    records = []
    for e in events:
        partition = min((0, 1), key=lambda p: counts[p])
        e["_at"] = (partition, counts[partition])
        counts[partition] += 1
        value = json.dumps({k: v for k, v in e.items() if not k.startswith("_")}).encode()
        records.append(Record(value, partition, (e["user_id"] or "").encode(), e["ts"]))
    return records


def _phases(seed: str) -> tuple[list[dict], list[dict], list[dict]]:
    """On-time rows of phase 1, on-time rows of phase 2, late rows of phase 2 (mixed in)."""
    rng = random.Random(seed)
    first = random_clicks(rng, 120, step_ms=250, disorder_ms=2_000)
    top = max(e["ts"] for e in first)
    watermark = top - LATENESS
    second = random_clicks(rng, 80, step_ms=250, disorder_ms=2_000, start_ms=top + 250)
    closed = [e for e in first if e["ts"] < watermark - 12_000]
    # Late rows: a cluster of one group in one closed window (Spark would count the
    # cluster's partial aggregate once), and rows scattered over closed windows.
    cluster = [{**closed[10], "ts": closed[10]["ts"] + i, "amount": 1.0} for i in range(5)]
    scattered = [{**e, "amount": 2.0} for e in rng.sample(closed, 7)]
    return first, second, cluster + scattered


def _spec(workdir: Path, broker: EmbeddedBroker, topic: str, kind: str, **extra: Any) -> Any:
    window = {
        **KINDS[kind],
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
        **extra,
    }
    per_trigger = window.pop("per_trigger", None)
    source = {"max_offsets_per_trigger": per_trigger} if per_trigger else None
    return make_spec(workdir, broker.bootstrap_servers, topic, window, source=source)


def _two_phases(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, spec: PipelineSpec, seed: str
) -> tuple[list[dict], list[dict], Any]:
    first, second, late = _phases(seed)
    counts = [0, 0]
    send(broker.bootstrap_servers, topic, _records(first, counts))
    PipelineRunner(spec, spark).run(available_now=True)
    rng = random.Random(seed + "/mix")
    mixed = list(second)
    for row in late:  # late rows anywhere among the on-time ones
        mixed.insert(rng.randrange(len(mixed) + 1), row)
    send(broker.bootstrap_servers, topic, _records(mixed, counts))
    summary = PipelineRunner(spec, spark).run(available_now=True)
    return first + second, late, summary


def _expected(kind: str, on_time: list[dict]) -> dict:
    window = KINDS[kind]
    return reference_windows(
        on_time,
        kind=kind,
        time_key="ts",
        duration_ms=window.get("duration_ms"),
        hop_ms=window.get("hop_ms"),
        gap_ms=window.get("gap_ms"),
        step_ms=window.get("step_ms"),
        max_duration_ms=window.get("max_duration_ms"),
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in on_time) - LATENESS,
    )


def _ledger_late(spec: PipelineSpec) -> Counter[str]:
    ledger = LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
    total: Counter[str] = Counter()
    for row in ledger.recent_batches(spec.name, 1_000):
        total.update(row["source_late_rows"] or {})
        assert row["late_rows"] == sum((row["source_late_rows"] or {}).values())
    return total


#: "drop" in one micro-batch, "dlq" in 50-record micro-batches: both for the native
#: (tumbling) and the state-API (sliding) engines, one each for hopping, cumulate and
#: session.
MODES = {"drop-one-batch": ("drop", None), "dlq-50-per-batch": ("dlq", 50)}
CASES = [
    ("tumbling", "drop-one-batch"),
    ("tumbling", "dlq-50-per-batch"),
    ("sliding", "drop-one-batch"),
    ("sliding", "dlq-50-per-batch"),
    ("hopping", "dlq-50-per-batch"),
    ("cumulate", "dlq-50-per-batch"),
    ("session", "drop-one-batch"),
]


@pytest.mark.parametrize(("kind", "mode"), CASES, ids=[f"{k}-{m}" for k, m in CASES])
def test_late_rows_are_counted_per_row_and_kept_out_of_every_window(
    kind: str,
    mode: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
) -> None:
    late_data, per_trigger = MODES[mode]
    spec = _spec(workdir, broker, topic, kind, late_data=late_data, per_trigger=per_trigger)
    on_time, late, summary = _two_phases(spark, broker, topic, spec, kind)

    assert summary.late_rows == len(late)  # one per row: not per window, not per cluster
    assert _ledger_late(spec) == Counter({"clicks": len(late)})
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, _expected(kind, on_time))
    if late_data == "drop":
        assert summary.dead_lettered == 0  # counted, not kept
        return
    assert summary.dead_lettered == len(late)
    rows = read_delta(spec.dead_letter_path()).to_pylist()
    dead = {(r["partition"], r["offset"]): r for r in rows}
    assert set(dead) == {e["_at"] for e in late}
    for e in late:
        row = dead[e["_at"]]
        assert json.loads(row["value"]) == {k: v for k, v in e.items() if not k.startswith("_")}
        assert row["key"] == (e["user_id"] or "").encode()
        assert row["source"] == "clicks" and row["topic"] == topic
        assert row["reason"].startswith("late: event time ts = ")
        behind = int(row["reason"].split(" is ")[1].split(" ms behind")[0])
        assert behind > 0, row["reason"]


def test_late_means_at_or_below_the_previous_batchs_watermark(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """The rule, batch by batch (docs/spec-reference.md, "Late rows"). Batch 0 reads
    0..39 s and leaves the watermark at 36 s; batch 1 brings straggler A (12 s): the
    previous watermark is 0, so A is on time and [10, 20), which closes in batch 1, holds
    it. Batch 2 brings straggler B (25 s), at or below batch 1's watermark (36 s): late,
    counted once, and kept out of [20, 30)."""
    base = 1_700_000_040_000  # a minute boundary

    def row(second: float, amount: float = 1.0) -> dict[str, Any]:
        return {"user_id": "a", "amount": amount, "qty": 1, "ts": base + int(second * 1000)}

    early = [row(i) for i in range(40)]
    later = [row(40 + i) for i in range(80)]
    a, b = row(12, 100.0), row(25, 1000.0)
    # 20 records a partition per batch (40 per trigger, shared evenly by two partitions).
    lanes = {
        0: [*early[0::2], a, *later[0::2][:19], b, *later[0::2][19:]],
        1: [*early[1::2], *later[1::2]],
    }
    records = [Record(json.dumps(e).encode(), p, b"a", e["ts"]) for p in lanes for e in lanes[p]]
    send(broker.bootstrap_servers, topic, records)
    spec = _spec(workdir, broker, topic, "tumbling", per_trigger=40)

    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.late_rows == 1  # B
    windows = read_windows(spec.target.path, spec.natural_key())
    expected = _expected("tumbling", [*early, *later, a])
    assert_same_windows(windows, expected)
    sums = {k[0].timestamp() * 1000 - base: v["amount_sum"] for k, v in windows.items()}
    assert sums[10_000] == 110.0 and sums[20_000] == 10.0
