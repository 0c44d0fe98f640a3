"""Every window kind x every aggregator equals the independent reference computation."""

from __future__ import annotations

import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.embedded.broker import EmbeddedBroker
from flow_jobs.embedded.producer import Record
from flow_jobs.runtime.runner import PipelineRunner
from tests import reduce_fns
from tests.reference import reference_windows
from tests.support import assert_same_windows, make_spec, random_clicks, read_windows, send

AGGREGATIONS: list[tuple[str, str | None, str, dict[str, Any]]] = [
    ("count", None, "n", {}),
    ("count", "amount", "n_amount", {}),
    ("sum", "amount", "amount_sum", {}),
    ("sum", "qty", "qty_sum", {}),
    ("min", "page", "page_min", {}),
    ("max", "qty", "qty_max", {}),
    ("avg", "amount", "amount_avg", {}),
    ("first", "page", "first_page", {}),
    ("last", "amount", "last_amount", {}),
    ("count_distinct", "page", "pages", {"keep_sketch": True}),
    ("count_distinct", "qty", "qtys", {"mode": "exact", "max_distinct_values_per_group": 1000}),
    ("collect", "qty", "qty_list", {}),
    (
        "reduce",
        "page",
        "page_trail",
        {
            "initializer": reduce_fns.start_trail,
            "reducer": reduce_fns.extend_trail,
            "result_type": "STRING",
        },
    ),
    (
        "reduce",
        None,
        "summary",
        {
            "initializer": reduce_fns.start_summary,
            "reducer": reduce_fns.extend_summary,
            "result_type": "STRUCT<n: BIGINT, pages: STRING, spend: DOUBLE>",
        },
    ),
]

CASES: dict[str, dict[str, Any]] = {
    "tumbling": {"kind": "tumbling", "duration_ms": 30_000, "lateness_ms": 6_000},
    "hopping": {"kind": "hopping", "duration_ms": 40_000, "hop_ms": 15_000, "lateness_ms": 6_000},
    "session": {"kind": "session", "gap_ms": 4_000, "lateness_ms": 6_000},
    "sliding": {"kind": "sliding", "duration_ms": 5_000, "lateness_ms": 3_000},
    "count_tumbling": {"kind": "count_tumbling", "count": 5},
    "count_hopping": {"kind": "count_hopping", "count": 6, "step": 2},
    "count_sliding": {"kind": "count_sliding", "count": 4},
}


def _events(rng: random.Random, lateness: int) -> list[dict[str, Any]]:
    """Out of order within lateness, NULLs, several keys (one NULL), distinct times, and
    pauses so sessions end."""
    events = random_clicks(rng, 1_200, step_ms=450, disorder_ms=int(lateness * 0.8))
    seen: set[int] = set()
    pause = 0
    for i, e in enumerate(events):
        if i and i % 150 == 0:
            pause += 9_000
        ts = e["ts"] + pause
        while ts in seen:  # distinct times: tie rules are tested on their own
            ts += 1
        seen.add(ts)
        e["ts"] = ts
    return events


def _partition(user: str | None) -> int:
    # One partition per group: arrival order is then offset order, whatever the batches.
    return zlib.crc32((user or "").encode()) % 2


@pytest.mark.parametrize("case", list(CASES))
def test_every_aggregator_equals_reference(
    case: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    window = dict(CASES[case])
    lateness = window.get("lateness_ms", 0)
    rng = random.Random(f"kinds-{case}")
    events = _events(rng, max(lateness, 2_000) if lateness else 2_000)
    records = [
        Record(
            value=__import__("json").dumps(e).encode(),
            partition=_partition(e["user_id"]),
            key=(e["user_id"] or "").encode(),
            timestamp_ms=e["ts"],
        )
        for e in events
    ]
    for i, e in enumerate(events):
        e["_arrival"] = i  # production order == offset order within each partition
    send(broker.bootstrap_servers, topic, records)
    window.update(
        event_time_column="ts",
        group_by=["user_id"],
        aggregations=[
            {"agg": a, **({"column": c} if c else {}), "as": alias, **options}
            for a, c, alias, options in AGGREGATIONS
        ],
    )
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, window, source={"max_offsets_per_trigger": 350}
    )

    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.late_rows == 0
    assert summary.batches >= 4
    max_ts = max(e["ts"] for e in events)
    expected = reference_windows(
        events,
        kind=case,
        time_key="ts",
        duration_ms=window.get("duration_ms"),
        hop_ms=window.get("hop_ms"),
        gap_ms=window.get("gap_ms"),
        count=window.get("count"),
        step=window.get("step"),
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max_ts - lateness,
        ties="value" if case in ("tumbling", "hopping", "session") else "arrival",
    )
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, expected)
