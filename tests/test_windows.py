"""Tumbling and hopping windows equal an independent reference computation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    make_spec,
    random_clicks,
    read_windows,
    send,
    to_records,
)

AGGREGATIONS = [
    ("count", None, "n"),
    ("count", "amount", "n_amount"),
    ("sum", "amount", "amount_sum"),
    ("sum", "qty", "qty_sum"),
    ("min", "amount", "amount_min"),
    ("max", "qty", "qty_max"),
    ("avg", "amount", "amount_avg"),
    ("first", "page", "first_page"),
    ("last", "page", "last_page"),
    ("min", "page", "page_min"),
]

CASES = {
    "tumbling-epoch-millis": dict(kind="tumbling", duration_ms=60_000, event_time_column="ts"),
    "tumbling-kafka-timestamp": dict(kind="tumbling", duration_ms=30_000),
    "tumbling-timestamp-column": dict(kind="tumbling", duration_ms=45_000, event_time_column="at"),
    "hopping-divisible": dict(
        kind="hopping", duration_ms=60_000, hop_ms=20_000, event_time_column="ts"
    ),
    "hopping-not-divisible": dict(kind="hopping", duration_ms=50_000, hop_ms=20_000),
    "hopping-hop-equals-duration": dict(
        kind="hopping", duration_ms=40_000, hop_ms=40_000, event_time_column="ts"
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_window_results_equal_reference(
    case: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    rng = random.Random(case)
    lateness = 8_000
    events = random_clicks(rng, 1_500, step_ms=300, disorder_ms=int(lateness * 0.9))
    send(broker.bootstrap_servers, topic, to_records(events))
    window = {
        **CASES[case],
        "lateness_ms": lateness,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": alias} for a, c, alias in AGGREGATIONS
        ],
    }
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, window, source={"max_offsets_per_trigger": 400}
    )

    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.late_rows == 0, "events within lateness must never be late"
    assert summary.input_rows == len(events)
    assert summary.batches >= 4  # 1,500 records at 400 per trigger, plus the closing batch
    max_ts = max(e["ts"] for e in events)
    expected = reference_windows(
        events,
        time_key="ts",
        duration_ms=window["duration_ms"],
        hop_ms=window.get("hop_ms"),
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max_ts - lateness,
    )
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, expected)
    assert list(actual and next(iter(actual.values())).keys()) == [a for *_, a in AGGREGATIONS]
