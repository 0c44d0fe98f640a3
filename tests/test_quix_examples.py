"""Quix Streams' documented worked examples, window for window."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import make_spec, read_windows, send

SLIDING_INPUT = [
    (30, 3_600_000),
    (29, 4_800_000),
    (28, 4_800_001),
    (27, 7_200_000),
    (26, 7_200_001),
]
# "Expected output" of the sliding example, as closed windows: [start, end] -> mean. The
# fifth window, [3600001, 7200001], stays open: no later event closes it (Quix alike).
SLIDING_OUTPUT = {
    (0, 3_600_000): 30,
    (1_200_000, 4_800_000): 29.5,
    (1_200_001, 4_800_001): 29,
    (3_600_000, 7_200_000): 28.5,
}
COUNT_INPUT = [(100, 121), (60, 165), (200, 583), (40, 723), (120, 1009), (80, 1242)]
COUNT_OUTPUTS: dict[str, tuple[dict[str, Any], dict[tuple[int, int, int], float]]] = {
    "sliding_count_window(3)": (
        {"kind": "count_sliding", "count": 3},
        {(121, 583, 0): 120, (165, 723, 1): 100, (583, 1009, 2): 120, (723, 1242, 3): 80},
    ),
    "tumbling_count_window(3)": (
        {"kind": "count_tumbling", "count": 3},
        {(121, 583, 0): 120, (723, 1242, 1): 80},
    ),
    "hopping_count_window(4, step=2)": (
        {"kind": "count_hopping", "count": 4, "step": 2},
        {(121, 723, 0): 100, (583, 1242, 1): 110},
    ),
}


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _run(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    window: dict[str, Any],
    rows: list[tuple[int, int]],
) -> dict[tuple, dict]:
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(json.dumps({"sensor": "s1", "value": v, "ts": ts}).encode(), 0, b"s1", ts)
            for v, ts in rows
        ],
    )
    window = {
        **window,
        "event_time_column": "ts",
        "group_by": ["sensor"],
        "aggregations": [{"agg": "avg", "column": "value", "as": "mean"}],
    }
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        schema="sensor STRING, value BIGINT, ts BIGINT",
    )
    PipelineRunner(spec, spark).run(available_now=True)
    return read_windows(spec.target.path, spec.natural_key())


def test_sliding_window_example(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    window = {"kind": "sliding", "duration_ms": 3_600_000}
    actual = _run(spark, broker, topic, workdir, window, SLIDING_INPUT)
    assert actual == {
        (_ts(start), _ts(end), "s1"): {"mean": mean}
        for (start, end), mean in SLIDING_OUTPUT.items()
    }


@pytest.mark.parametrize("example", list(COUNT_OUTPUTS))
def test_count_window_examples(
    example: str, spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    window, expected = COUNT_OUTPUTS[example]
    actual = _run(spark, broker, topic, workdir, window, COUNT_INPUT)
    assert actual == {
        (_ts(start), _ts(end), k, "s1"): {"mean": mean}
        for (start, end, k), mean in expected.items()
    }
