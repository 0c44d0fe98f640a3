"""The Iceberg target (``kind = "iceberg"``): the same windows as the Delta target on
the same messy stream, each batch committed once (a replayed batch, a restart and a
fresh lineage commit nothing twice), read back with pyiceberg's own catalog."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.errors import TargetSchemaError, TargetUnavailable
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.sinks import newest_rows
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.service import free_port
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    fresh_checkpoint,
    iceberg_table,
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
    ("first", "page", "first_page"),
    ("collect", "qty", "qty_list"),
]
LATENESS = 4_000
WINDOW = {
    "kind": "hopping",
    "duration_ms": 20_000,
    "hop_ms": 10_000,
    "event_time_column": "ts",
    "lateness_ms": LATENESS,
    "group_by": ["user_id"],
    "aggregations": [
        {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
    ],
}


def _spec(
    workdir: Path, broker: EmbeddedBroker, topic: str, target: dict[str, Any], tiny: bool
) -> PipelineSpec:
    source = {"max_offsets_per_trigger": 150} if tiny else None
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW, source=source)
    return PipelineSpec.model_validate({**spec.to_document(), "target": target})


def _expected(events: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return reference_windows(
        events,
        kind="hopping",
        time_key="ts",
        duration_ms=20_000,
        hop_ms=10_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )


def test_iceberg_holds_the_delta_target_s_windows_and_commits_each_batch_once(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Three partitions, NULL keys, disorder past the lateness (late rows), equal event
    times; the Iceberg pipeline in tiny micro-batches, the Delta one in one per run; a
    restart between two halves, a replayed batch, then a fresh checkpoint lineage."""
    topic = f"iceberg-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=3)
    rng = random.Random(51)
    events = random_clicks(rng, 1_200, step_ms=60, disorder_ms=LATENESS - 1_000)
    for i in range(5, len(events), 9):
        events[i]["ts"] = events[i - 1]["ts"]  # equal event times
    half = len(events) // 2
    # late rows in the second half: far behind the first half's watermark, so late
    # under any cut, counted and kept out of every window
    late = [{**e, "amount": 1_000.0} for e in events[:40:8]]
    second = list(events[half:])
    for row in late:
        second.insert(rng.randrange(len(second) + 1), row)
    target = iceberg_target(
        workdir, "hop", partition_by=["day(window_start)", "bucket(4, user_id)"]
    )
    iceberg = _spec(workdir / "iceberg", broker, topic, target, tiny=True)
    delta_target = {"kind": "delta", "path": str(workdir / "d")}
    delta = _spec(workdir / "delta", broker, topic, delta_target, tiny=False)
    key = iceberg.natural_key()

    send(broker.bootstrap_servers, topic, to_records(events[:half], partitions=3))
    first = PipelineRunner(iceberg, spark).run(available_now=True)
    assert first.batches > 2  # tiny micro-batches
    PipelineRunner(delta, spark).run(available_now=True)
    send(broker.bootstrap_servers, topic, to_records(second, partitions=3))
    second_run = PipelineRunner(iceberg, spark).run(available_now=True)  # a restart
    assert first.late_rows + second_run.late_rows == len(late)
    assert PipelineRunner(delta, spark).run(available_now=True).late_rows == len(late)

    rows = read_iceberg(target, key)
    assert_same_windows(rows, _expected(events))
    assert_same_windows(rows, read_windows(workdir / "d", key))  # (sums to rounding)

    table = iceberg_table(target)
    assert [f.name for f in table.spec().fields] == ["window_start_day", "user_id_bucket"]
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties
    assert summary["flow-jobs.pipeline"] == iceberg.name
    ledger = LedgerStore.for_spec(iceberg)
    batches = ledger.recent_batches(iceberg.name, limit=1_000)
    wrote = max(b["batch_id"] for b in batches if b["output_rows"])
    assert summary["flow-jobs.batch-id"] == str(wrote)  # a batch of no rows commits none
    newest = max(batches, key=lambda b: b["batch_id"])
    assert newest["target_version"] == str(snapshot.snapshot_id)  # one version everywhere

    # A crash after the commit, before Spark's commit log: the batch is replayed, and
    # the batch id in the table's properties makes the replay commit nothing.
    # (The batches after the last one that wrote rows are forgotten too, so that one is
    # the batch Spark replays.)
    checkpoint = Path(iceberg.checkpoint_location())
    for n in range(wrote, newest["batch_id"] + 1):
        for log in ("commits", "offsets")[: 1 if n == wrote else 2]:
            (checkpoint / log / str(n)).unlink()
            (checkpoint / log / f".{n}.crc").unlink(missing_ok=True)  # Hadoop's sidecar
    replay = PipelineRunner(iceberg, spark).run(available_now=True)
    assert replay.batches >= 1 and replay.input_rows > 0
    assert replay.windows_inserted == replay.windows_updated == 0
    assert iceberg_table(target).current_snapshot().snapshot_id == snapshot.snapshot_id

    # A fresh lineage recomputes everything: the windows an earlier lineage closed are
    # all there and stay as they are.
    fresh = PipelineRunner(fresh_checkpoint(iceberg), spark).run(available_now=True)
    assert fresh.windows_inserted == fresh.windows_updated == 0
    assert read_iceberg(target, key) == rows

    # flow-jobs target show's read-back: the newest windows first
    shown = newest_rows(iceberg, key, ledger, 3)
    newest_start = max(k[0] for k in rows)
    assert [r["window_start"] for r in shown] == [newest_start] * len(shown)
    assert len(shown) == 3


def test_a_table_with_other_columns_is_refused_at_start(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    target = iceberg_target(workdir, "other")
    spec = _spec(workdir, broker, topic, target, tiny=False)
    PipelineRunner(spec, spark).run(available_now=True)  # no data: the table is created
    assert iceberg_table(target).current_snapshot() is None
    narrower = PipelineSpec.model_validate(
        {
            **spec.to_document(),
            "name": "narrower",
            "checkpoint": {"location": str(workdir / "narrower")},
            "transform": {"window": {**WINDOW, "aggregations": WINDOW["aggregations"][:1]}},
        }
    )
    with pytest.raises(TargetSchemaError, match=r"Iceberg table .*\.other has columns"):
        PipelineRunner(narrower, spark).run(available_now=True)


def test_an_unreachable_rest_catalog_stops_the_run_in_one_line_without_its_secret(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    secret = "S3cr3t-t0ken-51"
    port = free_port()  # nothing answers there
    target = {
        "kind": "iceberg",
        "table": "analytics.windows",
        "catalog": {
            "kind": "rest",
            "uri": f"http://flow:{secret}@127.0.0.1:{port}/catalog",
            "properties": {"token": secret},
        },
    }
    spec = _spec(workdir, broker, topic, target, tiny=False)
    with pytest.raises(TargetUnavailable) as raised:
        PipelineRunner(spec, spark).run(available_now=True)
    said = str(raised.value)
    assert said.startswith("Iceberg rest catalog 'flow_jobs' cannot be opened: "), said
    assert said.endswith("; check target.catalog") and "\n" not in said, said
    assert secret not in said and secret not in repr(spec), said
