"""No poison pills: a record that cannot be used is a dead letter, never a failed query.

Each of these records failed the whole query before (and, since a restart replays the
same offsets, on every restart): an epoch-ms event time beyond Spark's TIMESTAMP range, a
Kafka record timestamp of 2^62, an event time computed in [transform].sql that is NULL,
unparsable or far in the future, and a BIGINT sum that overflows.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.errors import PlanError
from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import assert_same_windows, make_spec, random_clicks, read_windows, send

OUT_OF_RANGE = (
    "event time ts = {} is out of range: epoch milliseconds outside years 1-9999 "
    "(a value in micro- or nanoseconds?)"
)
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum"), ("sum", "qty", "qty_sum")]


def _window(time_column: str, aggregations: list[tuple[str, str | None, str]]) -> dict[str, Any]:
    return {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "event_time_column": time_column,
        "lateness_ms": 5_000,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in aggregations
        ],
    }


def _dead_letters(spec: Any) -> dict[tuple[int, int], tuple[bytes | None, str]]:
    rows = read_delta(spec.dead_letter_path()).to_pylist()
    assert {r["pipeline"] for r in rows} <= {spec.name}
    return {(r["partition"], r["offset"]): (r["value"], r["reason"]) for r in rows}


def _produce(
    broker: EmbeddedBroker, topic: str, items: list[tuple[bytes, int, str | None]]
) -> dict[tuple[int, int], tuple[bytes, str]]:
    """Send (value, kafka timestamp, dead-letter reason or None) round-robin over two
    partitions; returns the expected dead letters by (partition, offset)."""
    records, expected, next_offset = [], {}, [0, 0]
    for i, (value, kafka_ts, reason) in enumerate(items):
        partition = i % 2
        records.append(Record(value, partition, key=b"k%d" % i, timestamp_ms=kafka_ts))
        if reason is not None:
            expected[(partition, next_offset[partition])] = (value, reason)
        next_offset[partition] += 1
    send(broker.bootstrap_servers, topic, records)
    return expected


@pytest.mark.parametrize("kind", ["tumbling", "sliding"])  # native and state-API engines
def test_out_of_range_times_and_overflowing_sums_do_not_fail_the_run(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path, kind: str
) -> None:
    good = random_clicks(random.Random(13), 300, step_ms=400, disorder_ms=1_500)
    # Two BIGINTs whose sum overflows, in one window of one user: that sum is NULL.
    big = [{**good[40], "user_id": "z", "qty": 2**62}, {**good[41], "user_id": "z", "qty": 2**62}]
    # A good payload whose Kafka timestamp (2^62 ms) is outside any TIMESTAMP: counted.
    odd_kafka_ts = {**good[50], "user_id": "k"}
    events = [*good[:45], *big, odd_kafka_ts, *good[45:]]  # in time order, not late
    items: list[tuple[bytes, int, str | None]] = [
        (json.dumps(e).encode(), 2**62 if e is odd_kafka_ts else e["ts"], None) for e in events
    ]
    for i, ts in enumerate([9_000_000_000_000_000_000, -9_000_000_000_000_000_000, 2**53]):
        poison = json.dumps({"user_id": "a", "amount": 1.0, "ts": ts}).encode()
        items.insert(31 + 47 * i, (poison, good[0]["ts"], OUT_OF_RANGE.format(ts)))
    expected_dead = _produce(broker, topic, items)

    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        {**_window("ts", AGGREGATIONS), "kind": kind},
        source={"max_offsets_per_trigger": 90},  # several micro-batches
    )
    spec_file = workdir / "spec.toml"
    spec_file.write_text(spec.to_toml())
    assert main(["run", str(spec_file), "--available-now"]) == 0

    assert _dead_letters(spec) == expected_dead
    expected = reference_windows(
        events,
        kind=kind,
        time_key="ts",
        duration_ms=60_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - 5_000,
    )
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, expected)
    overflowed = [k for k, row in expected.items() if k[2] == "z" and row["qty_sum"] is None]
    assert overflowed and all(actual[k]["n"] == 2 for k in overflowed)


def test_kafka_timestamp_out_of_range_as_event_time_is_a_dead_letter(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    good = random_clicks(random.Random(17), 120, step_ms=700)
    items: list[tuple[bytes, int, str | None]] = [
        (json.dumps(e).encode(), e["ts"], None) for e in good
    ]
    reason = "missing event time: _event_ts is absent or NULL"
    items.insert(55, (b'{"user_id": "a", "amount": 2.0}', 2**62, reason))
    expected_dead = _produce(broker, topic, items)
    aggregations = [("count", None, "n"), ("sum", "amount", "amount_sum")]
    spec = make_spec(workdir, broker.bootstrap_servers, topic, _window("_event_ts", aggregations))
    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.dead_lettered == 1
    assert _dead_letters(spec) == expected_dead
    expected = reference_windows(
        good,
        time_key="ts",
        duration_ms=60_000,
        group_by=["user_id"],
        aggregations=aggregations,
        watermark_ms=max(e["ts"] for e in good) - 5_000,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


SQL_SCHEMA = "user_id STRING, amount DOUBLE, at_s STRING"
SQL = "SELECT user_id, amount, to_timestamp(at_s) AS at, _kafka FROM clicks"


@pytest.mark.parametrize("per_trigger", [None, 25])
def test_event_time_computed_in_sql_null_unparsable_or_future_is_a_dead_letter(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    per_trigger: int | None,
) -> None:
    good = random_clicks(random.Random(19), 150, step_ms=600, disorder_ms=2_000)
    for e in good:
        e["at_s"] = e.pop("at")
    null = "missing event time: at is NULL after [transform].sql (absent or unparsable)"
    far = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() + 86_400))
    skew = (
        f"event time at = {far}.000Z is more than max_event_time_skew_ms=300000 ahead of "
        "processing time"
    )
    items: list[tuple[bytes, int, str | None]] = [
        (json.dumps(e).encode(), e["ts"], None) for e in good
    ]
    for i, (payload, reason) in enumerate(
        [
            ({"user_id": "a", "amount": 1.0, "at_s": "yesterday"}, null),
            ({"user_id": "a", "amount": 1.0}, null),
            ({"user_id": "b", "amount": 1.0, "at_s": far}, skew),
        ]
    ):
        items.insert(20 + 41 * i, (json.dumps(payload).encode(), good[0]["ts"], reason))
    expected_dead = _produce(broker, topic, items)
    aggregations = [("count", None, "n"), ("sum", "amount", "amount_sum")]
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        _window("at", aggregations),
        sql=SQL,
        schema=SQL_SCHEMA,
        source={"max_offsets_per_trigger": per_trigger} if per_trigger else None,
    )
    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.dead_lettered == len(expected_dead) == 3
    dead = read_delta(spec.dead_letter_path()).to_pylist()
    assert {r["source"] for r in dead} == {"clicks"} and {r["topic"] for r in dead} == {topic}
    assert _dead_letters(spec) == expected_dead
    expected = reference_windows(
        good,
        time_key="ts",
        duration_ms=60_000,
        group_by=["user_id"],
        aggregations=aggregations,
        watermark_ms=max(e["ts"] for e in good) - 5_000,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


def test_event_time_computed_in_sql_without_kafka_position_is_refused(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        _window("at", [("count", None, "n")]),
        sql="SELECT user_id, to_timestamp(at_s) AS at FROM clicks",
        schema=SQL_SCHEMA,
    )
    with pytest.raises(PlanError) as error:
        PipelineRunner(spec, spark)
    assert error.value.key == "transform.sql"
    assert "select _kafka" in str(error.value)
