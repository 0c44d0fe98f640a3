"""[[transform.lookups]]: static tables joined in the SQL pre-stage, refreshed in a run."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import (
    BASE_MS,
    assert_same_windows,
    make_spec,
    random_clicks,
    read_windows,
    send,
    to_records,
)

TIERS = {"a": "gold", "b": "silver", "c": "gold", "d": "bronze"}
SQL = (
    "SELECT c.user_id, c.amount, c.ts, COALESCE(u.tier, 'none') AS tier "
    "FROM clicks c LEFT JOIN users u ON c.user_id = u.user_id"
)
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum")]


def _table(tiers: dict[str, str]) -> pa.Table:
    return pa.table({"user_id": list(tiers), "tier": list(tiers.values())})


def _write(
    kind: str, where: Path, tiers: dict[str, str], postgres_url: str, table: str
) -> dict[str, Any]:
    """Write the users table as ``kind``; return the lookup's spec keys. A file is
    written beside and renamed into place, as a file a run reads should be: a refresh
    that read it half-written would fail the run (it did once, refreshing every 1 ms)."""
    if kind == "parquet":
        pq.write_table(_table(tiers), where / ".users.parquet.tmp")
        os.replace(where / ".users.parquet.tmp", where / "users.parquet")
        return {"path": str(where / "users.parquet")}
    if kind == "csv":
        pacsv.write_csv(_table(tiers), where / ".users.csv.tmp")
        os.replace(where / ".users.csv.tmp", where / "users.csv")
        return {"path": str(where / "users.csv"), "schema": "user_id STRING, tier STRING"}
    if kind == "delta":
        write_deltalake(str(where / "users_delta"), _table(tiers), mode="overwrite")
        return {"path": str(where / "users_delta")}
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} (user_id text PRIMARY KEY, tier varchar(20))")
        for user, tier in tiers.items():
            conn.execute(f"INSERT INTO {table} VALUES (%s, %s)", (user, tier))
    return {"url": postgres_url, "table": table}


def _spec(
    workdir: Path, broker: EmbeddedBroker, topic: str, lookup: dict[str, Any]
) -> PipelineSpec:
    window = {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "event_time_column": "ts",
        "lateness_ms": 2_000,
        "group_by": ["tier"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
    }
    spec = make_spec(workdir, broker.bootstrap_servers, topic, window, sql=SQL)
    doc = spec.to_document()
    doc["transform"]["lookups"] = [{"name": "users", **lookup}]
    doc["runtime"] = {"trigger_interval_ms": 100}
    return PipelineSpec.model_validate(doc)


def _expected(events: list[dict[str, Any]], tiers: Callable[[dict], dict[str, str]]) -> dict:
    joined = [{**e, "tier": tiers(e).get(e["user_id"], "none")} for e in events]
    return reference_windows(
        joined,
        time_key="ts",
        duration_ms=60_000,
        group_by=["tier"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - 2_000,
    )


@pytest.mark.parametrize("kind", ["parquet", "csv", "delta", "postgres"])
def test_lookup_joins_in_the_pre_stage(
    kind: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    postgres_url: str,
) -> None:
    events = random_clicks(random.Random(kind), 400, step_ms=500, disorder_ms=1_000)
    send(broker.bootstrap_servers, topic, to_records(events))
    table = f"lookup_users_{uuid.uuid4().hex[:8]}"
    lookup = {"kind": kind, **_write(kind, workdir, TIERS, postgres_url, table)}
    spec = _spec(workdir, broker, topic, lookup)
    PipelineRunner(spec, spark).run(available_now=True)
    actual = read_windows(spec.target.path, spec.natural_key())
    assert_same_windows(actual, _expected(events, lambda e: TIERS))
    assert {key[2] for key in actual} == {"gold", "silver", "bronze", "none"}


@pytest.mark.parametrize(
    ("kind", "interval_ms", "refreshed"),
    [("parquet", 1, True), ("delta", 1, True), ("parquet", 3_600_000, False)],
)
def test_lookup_refreshes_within_a_run(
    kind: str,
    interval_ms: int,
    refreshed: bool,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
) -> None:
    """Minute 0 is read with the first table; the table changes; minute 1 is read after a
    refresh (with a short interval) or still with the cached table (a long one)."""
    minute = BASE_MS - BASE_MS % 60_000
    before, after = TIERS, {**TIERS, "a": "platinum", "b": "gold"}
    lookup = {
        "kind": kind,
        "refresh_interval_ms": interval_ms,
        **_write(kind, workdir, before, "", ""),
    }
    spec = _spec(workdir, broker, topic, lookup)
    runner = PipelineRunner(spec, spark, stop_event=threading.Event())
    thread = threading.Thread(target=runner.run, daemon=True)

    def batch(start: int, users: str) -> list[dict[str, Any]]:
        return [{"user_id": u, "amount": 1.0, "ts": start + 1_000 * i} for i, u in enumerate(users)]

    def produce(rows: list[dict[str, Any]], first_offset: int) -> None:
        send(
            broker.bootstrap_servers,
            topic,
            [
                Record(json.dumps(r).encode(), (first_offset + i) % 2, timestamp_ms=r["ts"])
                for i, r in enumerate(rows)
            ],
        )

    def await_rows(n: int) -> None:
        deadline = time.monotonic() + 120
        while not (runner.progress and runner.progress.input_rows() >= n):
            assert time.monotonic() < deadline, "the pipeline did not read the rows"
            time.sleep(0.05)

    first, second = batch(minute, "abcd"), batch(minute + 60_000, "abcd")
    closing = [{"user_id": "d", "amount": 1.0, "ts": minute + 185_000}]
    thread.start()
    try:
        produce(first, 0)
        await_rows(len(first))
        _write(kind, workdir, after, "", "")
        changed = time.monotonic()  # a snapshot read from now on sees the new table
        if refreshed:  # wait for a refresh after the change (the runner's own clock)
            deadline = time.monotonic() + 60
            while runner.compiled.lookups[0].refreshed_at <= changed:
                assert time.monotonic() < deadline, "the lookup was not refreshed"
                time.sleep(0.05)
        produce(second + closing, len(first))
        await_rows(len(first) + len(second) + 1)
        deadline = time.monotonic() + 60  # the closing no-data batch emits minute 1
        while len(read_windows(spec.target.path, spec.natural_key())) < 6:
            assert time.monotonic() < deadline, "minute 1 was not emitted"
            time.sleep(0.05)
    finally:
        runner.stop_event.set()
        thread.join(60)

    second_tiers = after if refreshed else before
    expected = _expected(
        first + second + closing, lambda e: before if e["ts"] < minute + 60_000 else second_tiers
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)
