"""emit = "current": every trigger upserts the windows it changed; open windows show
their value so far, and the final value supersedes every earlier one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.reference import reference_windows
from tests.support import (
    aggregation_specs,
    assert_same_windows,
    iceberg_target,
    make_spec,
    random_clicks,
    read_iceberg,
    read_windows,
    send,
    to_records,
)

AGGREGATIONS = [
    ("count", None, "n"),
    ("sum", "amount", "amount_sum"),
    ("last", "page", "last_page"),
    ("collect", "qty", "qty_list"),
]
CASES = {
    "tumbling": {"kind": "tumbling", "duration_ms": 20_000},
    "hopping": {"kind": "hopping", "duration_ms": 20_000, "hop_ms": 5_000},
    # the running total of each cumulation, one row per step so far
    "cumulate": {"kind": "cumulate", "step_ms": 5_000, "max_duration_ms": 20_000},
    "sliding": {"kind": "sliding", "duration_ms": 4_000},
    # bounds that move; merges are in tests/test_session_current.py
    "session": {"kind": "session", "gap_ms": 1_200},
    # partial windows, overlapping ones, and bounds that move while a window fills
    "count_hopping": {"kind": "count_hopping", "count": 5, "step": 2},
}


@pytest.mark.parametrize(("case", "kind"), [*((c, "delta") for c in CASES), ("hopping", "iceberg")])
def test_current_windows_track_every_update(
    case: str, kind: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    lateness = 3_000
    events = random_clicks(random.Random(case), 600, step_ms=200, disorder_ms=2_000)
    for i, e in enumerate(events):
        e["ts"] += i % 7  # distinct enough; ties are not what this test is about
    window = {
        **CASES[case],
        "emit": "current",
        "lateness_ms": lateness,
        "event_time_column": "ts",
        "group_by": ["user_id"],
        "aggregations": aggregation_specs(AGGREGATIONS),
    }
    spec = make_spec(workdir, broker.bootstrap_servers, topic, window)
    if kind == "iceberg":
        target = iceberg_target(workdir, f"current_{case}")
        spec = PipelineSpec.model_validate({**spec.to_document(), "target": target})

    def read() -> dict[tuple, dict]:
        if kind == "iceberg":
            return read_iceberg(target, spec.natural_key())
        return read_windows(spec.target.path, spec.natural_key())

    def expected(seen: list[dict]) -> dict:
        # current: every window, closed or not, with its value over what has arrived
        for j, e in enumerate(seen):
            e["_arrival"] = (j % 2, j // 2)  # round-robin over two partitions
        return reference_windows(
            seen,
            kind=case,
            time_key="ts",
            group_by=["user_id"],
            duration_ms=CASES[case].get("duration_ms"),
            hop_ms=CASES[case].get("hop_ms"),
            gap_ms=CASES[case].get("gap_ms"),
            count=CASES[case].get("count"),
            step=CASES[case].get("step"),
            step_ms=CASES[case].get("step_ms"),
            max_duration_ms=CASES[case].get("max_duration_ms"),
            aggregations=AGGREGATIONS,
            watermark_ms=2**62,
            current=True,
        )

    half = len(events) // 2
    send(broker.bootstrap_servers, topic, to_records(events[:half]))
    PipelineRunner(spec, spark).run(available_now=True)
    assert_same_windows(read(), expected(events[:half]))

    # Each key's next event lands in its last open window (within lateness), so the
    # second run must supersede windows the first one wrote, for every kind.
    watermark = max(e["ts"] for e in events[:half]) - lateness
    backdated = []
    for user in {e["user_id"] for e in events[:half]}:
        last = max(e["ts"] for e in events[:half] if e["user_id"] == user)
        if last - 10 > watermark:
            backdated.append({**events[0], "user_id": user, "ts": last - 10, "qty": 5})
    assert backdated
    events[half:half] = backdated
    tail = to_records(events[half:])
    send(
        broker.bootstrap_servers,
        topic,
        [type(r)(r.value, (i + half) % 2, r.key, r.timestamp_ms) for i, r in enumerate(tail)],
    )
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.late_rows == 0
    assert summary.windows_updated > 0  # windows open across the restart were superseded
    assert_same_windows(read(), expected(events))
