"""Memory caps fail loud with the spec reference's message; a state past its budget is
warned about, from what it holds."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.plan.sizing import GB, estimate_state
from flow_jobs.runtime.caps import StateSizeWatch, _size
from flow_jobs.runtime.reports import state_bytes, state_rows
from flow_jobs.runtime.runner import PipelineFailed, PipelineRunner
from flow_jobs.spec.models import PipelineSpec, WindowSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import BASE_MS, make_spec, send

MINUTE = BASE_MS - BASE_MS % 60_000  # 2023-11-14T22:13:00Z


def _five_groups(broker: EmbeddedBroker, topic: str, per_group: int = 1) -> None:
    """Five users in one minute, then one row a minute later to close it."""
    rows = [(f"u{g}", MINUTE + 1_000 * i + g) for i in range(per_group) for g in range(5)]
    rows.append(("u0", MINUTE + 125_000))
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(json.dumps({"user_id": u, "qty": i, "ts": ts}).encode(), i % 2, timestamp_ms=ts)
            for i, (u, ts) in enumerate(rows)
        ],
    )


def _run(
    spark: SparkSession, workdir: Path, broker: EmbeddedBroker, topic: str, window: dict[str, Any]
) -> str:
    window = {"event_time_column": "ts", "group_by": ["user_id"], **window}
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        schema="user_id STRING, qty BIGINT, ts BIGINT",
        source={"max_offsets_per_trigger": 2},
    )
    with pytest.raises(PipelineFailed) as failure:
        PipelineRunner(spec, spark).run(available_now=True)
    return str(failure.value)


def test_native_window_over_its_group_cap_fails(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _five_groups(broker, topic)
    window = {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "max_groups_per_window": 3,
        "aggregations": [
            {"agg": "count_distinct", "column": "qty", "as": "d", "hll_precision": 21}
        ],
    }
    with caplog.at_level(logging.WARNING, logger="flow_jobs.runtime.runner"):
        message = _run(spark, workdir, broker, topic, window)
    assert (
        "window state cap hit: max_groups_per_window=3 reached on window "
        "[2023-11-14T22:13:00Z, 2023-11-14T22:14:00Z) for pipeline test-pipeline"
    ) in message
    assert not (workdir / "target" / "_delta_log" / "00000000000000000001.json").exists()


def test_state_window_over_its_group_cap_fails(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    _five_groups(broker, topic)
    window = {
        "kind": "sliding",
        "duration_ms": 30_000,
        "max_groups_per_window": 3,
        "aggregations": [{"agg": "count", "as": "n"}],
    }
    message = _run(spark, workdir, broker, topic, window)
    assert "window state cap hit: max_groups_per_window=3 reached on window [" in message
    assert "for pipeline test-pipeline" in message


@pytest.mark.parametrize("kind", ["tumbling", "session", "count_tumbling", "sliding"])
def test_exact_distinct_count_over_its_cap_fails(
    kind: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    rows = [("u0", MINUTE + 1_000 * i) for i in range(5)] + [("u0", MINUTE + 125_000)]
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(json.dumps({"user_id": u, "qty": i, "ts": ts}).encode(), 0, timestamp_ms=ts)
            for i, (u, ts) in enumerate(rows)
        ],
    )
    # Every kind fails as soon as an open window passes the cap: with this lateness none
    # closes (an exact count_distinct puts tumbling and session on the state API).
    size = {
        "tumbling": {"duration_ms": 60_000},
        "session": {"gap_ms": 10_000},
        "count_tumbling": {"count": 5},
        "sliding": {"duration_ms": 60_000},
    }[kind]
    window = {
        "kind": kind,
        **size,
        "lateness_ms": 600_000,
        "aggregations": [
            {
                "agg": "count_distinct",
                "column": "qty",
                "as": "d",
                "mode": "exact",
                "max_distinct_values_per_group": 3,
            }
        ],
    }
    message = _run(spark, workdir, broker, topic, window)
    assert "count_distinct cap hit: max_distinct_values_per_group=3 exceeded by d" in message
    start = "22:12:03" if kind == "sliding" else "22:13:00"  # [t - 60 s, t] for sliding
    assert f"(4 values) on window [2023-11-14T{start}" in message  # 2 rows per batch
    assert "test-pipeline" in message


def test_sizing_bound_follows_seed_000() -> None:
    window = WindowSpec.model_validate(
        {
            "kind": "hopping",
            "duration_ms": 60_000,
            "hop_ms": 20_000,
            "lateness_ms": 20_000,
            "max_groups_per_window": 1_000_000,
            "aggregations": [{"agg": "count_distinct", "column": "x", "as": "d"}],
        }
    )
    estimate = estimate_state(window)
    assert estimate.active_windows == 4  # ceil((60 s + 20 s) / 20 s)
    assert estimate.bytes_per_group == 1 << 14
    assert estimate.total == 4 * 1_000_000 * (1 << 14) > GB


def test_a_run_warns_of_the_state_it_holds_past_the_budget_not_of_its_caps(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A six-group window whose caps would allow 2 MiB x 1,000,000 groups: no word of
    that bound; past a budget below what it holds, one warning with the figures the
    state operators reported for the batch."""
    _five_groups(broker, topic, per_group=3)
    window = {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "event_time_column": "ts",
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": "count_distinct", "column": "qty", "as": "d", "hll_precision": 21}
        ],
    }
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        schema="user_id STRING, qty BIGINT, ts BIGINT",
    )
    doc = spec.to_document()
    doc["checks"] = {"state_budget_bytes": 1024}
    runner = PipelineRunner(PipelineSpec.model_validate(doc), spark)
    with caplog.at_level(logging.WARNING):
        runner.run(available_now=True)
    assert runner.progress is not None
    reports = list(runner.progress.progress.values())
    warnings = [r.getMessage() for r in caplog.records if "the state holds" in r.getMessage()]
    assert not [r for r in caplog.records if "1,000,000" in r.getMessage()]
    first = reports[0]
    assert warnings[0].startswith(
        f"test-pipeline: the state holds {_size(state_bytes(first))} in "
        f"{state_rows(first):,} rows after batch {first['batchId']}, over [checks] "
        "state_budget_bytes (1.0 kB); "
    )
    assert state_rows(first) == 6  # the six open (window, user) groups


def test_the_state_size_warning_comes_again_each_time_the_state_doubles() -> None:
    spec = PipelineSpec.model_validate(
        {
            "name": "p",
            "sources": [{"name": "s", "topic": "t", "bootstrap_servers": "h:1", "schema": "a INT"}],
            "transform": {"window": {"kind": "tumbling", "duration_ms": 1000,
                                     "aggregations": [{"agg": "count", "as": "n"}]}},
            "target": {"kind": "delta", "path": "/tmp/x"},
            "checks": {"state_budget_bytes": 100},
        }
    )  # fmt: skip
    watch = StateSizeWatch(spec)

    def batch(i: int, used: int) -> dict[str, Any]:
        return {"batchId": i, "stateOperators": [{"numRowsTotal": 1, "memoryUsedBytes": used}]}

    said = [
        watch.observe(batch(i, used)) is not None
        for i, used in enumerate([50, 150, 180, 250, 390, 900])
    ]
    assert said == [False, True, False, True, False, True]
