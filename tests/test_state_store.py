"""The Postgres state store: ledger rows, fingerprints and reset, Postgres and Kafka
targets, dead letters in the store — against real Postgres, Kafka, Spark and Delta."""

from __future__ import annotations

import itertools
import json
import os
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable
from psycopg import sql
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.io.state_store import IncompatibleSpec, StateStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
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

AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum"), ("max", "ts", "ts_max")]
LATENESS = 3_000
WINDOW: dict[str, Any] = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "event_time_column": "ts",
    "lateness_ms": LATENESS,
    "group_by": ["user_id"],
    "aggregations": [
        {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
    ],
}


def spec_with(workdir: Path, broker: EmbeddedBroker, topic: str, **tables: Any) -> PipelineSpec:
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW)
    doc = spec.to_document()
    doc.update(tables)
    return PipelineSpec.model_validate(doc)


def expected(events: list[dict[str, Any]], duration_ms: int = 10_000) -> dict:
    return reference_windows(
        events,
        time_key="ts",
        duration_ms=duration_ms,
        hop_ms=None,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )


def store() -> StateStore:
    return StateStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])


def read_postgres(
    table: str, key: list[str], url: str | None = None
) -> dict[tuple, dict[str, Any]]:
    """The Postgres target as {natural key: row}; fails on a duplicate natural key."""
    with psycopg.connect(url or os.environ["FLOW_STATE_STORE_URL"]) as conn:
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table)))
        names = [d.name for d in cur.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    out: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        k = tuple(row[c] for c in key)
        assert k not in out, f"duplicate natural key {k}"
        out[k] = {c: v for c, v in row.items() if c not in key}
    return out


def drop_last_commit(spec: PipelineSpec) -> int:
    """Simulate a crash after the target write and before Spark's commit log."""
    commits = Path(spec.checkpoint_location(), "commits")
    last = max(int(p.name) for p in commits.glob("[0-9]*"))
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_the_ledger_records_every_batch(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = random_clicks(random.Random(3), 600, step_ms=200, disorder_ms=2_000)
    send(broker.bootstrap_servers, topic, to_records(events[:300]))
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        WINDOW,
        source={"max_offsets_per_trigger": 100},
    )
    PipelineRunner(spec, spark).run(available_now=True)
    send(
        broker.bootstrap_servers,
        topic,
        [Record(r.value, (i + 300) % 2, r.key, r.timestamp_ms)
         for i, r in enumerate(to_records(events[300:]))],
    )  # fmt: skip
    PipelineRunner(spec, spark).run(available_now=True)

    rows = store().recent_batches(spec.name, limit=100)
    ids = [r["batch_id"] for r in rows]
    assert ids == list(range(len(ids))) and len(ids) >= 6, ids  # 100 rows a batch
    assert len({r["query_id"] for r in rows}) == 1
    assert sum(r["input_rows"] for r in rows) == len(events)
    target = read_windows(spec.target.path, spec.natural_key())
    assert sum(r["output_rows"] for r in rows) == len(target)
    last = rows[-1]
    assert last["end_offsets"] == {"clicks": {topic: {"0": 300, "1": 300}}}
    for before, after in itertools.pairwise(rows):
        assert after["start_offsets"] == before["end_offsets"]
    # Watermarks: the global one the last batch ran under, per source max ts - lateness.
    watermark_ms = max(e["ts"] for e in events) - LATENESS
    assert int(last["global_watermark"].timestamp() * 1000) == watermark_ms
    source_mark = datetime.fromisoformat(last["source_watermarks"]["clicks"])
    assert int(source_mark.timestamp() * 1000) == watermark_ms
    assert last["target_kind"] == "delta"
    assert int(rows[-2]["target_version"]) <= DeltaTable(spec.target.path).version()
    assert all(r["late_rows"] == 0 for r in rows)

    assert main(["state", "show", spec.name, "--limit", "3"]) == 0
    shown = capsys.readouterr().out
    assert f"{topic}" not in shown  # sources are shown by name
    assert "clicks:0=300,1=300" in shown and shown.count("\n") >= 5


def test_an_incompatible_spec_change_is_refused_until_reset(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = random_clicks(random.Random(8), 300, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW)
    PipelineRunner(spec, spark).run(available_now=True)

    # Safe changes resume: another target path, a throughput knob, a cap.
    safe = spec.model_copy(
        update={
            "target": spec.target.model_copy(update={"path": str(workdir / "elsewhere")}),
            "transform": spec.transform.model_copy(
                update={"window": spec.window.model_copy(update={"max_groups_per_window": 50})}
            ),
        }
    )
    assert PipelineRunner(safe, spark).run(available_now=True).input_rows == 0

    changed = spec.model_copy(
        update={
            "transform": spec.transform.model_copy(
                update={"window": spec.window.model_copy(update={"duration_ms": 5_000})}
            )
        }
    )
    with pytest.raises(IncompatibleSpec) as refused:
        PipelineRunner(changed, spark).run(available_now=True)
    message = str(refused.value)
    assert "transform.window.duration_ms: 10000 -> 5000" in message
    assert f"flow-jobs reset {spec.name}" in message
    changes = message.split(" — ")[1].split(". Revert")[0]
    assert changes == "transform.window.duration_ms: 10000 -> 5000"  # safe keys not named

    spec_file = workdir / "changed.toml"
    spec_file.write_text(changed.to_toml())
    assert main(["run", str(spec_file), "--available-now"]) == 1
    assert "transform.window.duration_ms" in capsys.readouterr().err

    checkpoint = Path(spec.checkpoint_location())
    assert main(["reset", str(spec_file)]) == 0
    kept = list(checkpoint.parent.glob(f"{checkpoint.name}.v0-*"))
    assert len(kept) == 1 and (kept[0] / "commits").is_dir()  # the old one is kept
    assert not checkpoint.exists()

    rerun = PipelineRunner(changed, spark).run(available_now=True)
    assert rerun.input_rows == len(events)  # a new generation re-reads the source
    versions = {r["state_version"] for r in store().recent_batches(spec.name, 100)}
    assert versions == {0, 1}
    actual = read_windows(spec.target.path, spec.natural_key())
    five_s = expected(events, duration_ms=5_000)
    # Version 1's 5 s windows are MERGEd beside version 0's 10 s windows.
    assert_same_windows({k: actual[k] for k in five_s if k in actual}, five_s)


def test_postgres_target_upserts_exactly_once(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(21), 700, step_ms=150, disorder_ms=2_500)
    send(broker.bootstrap_servers, topic, to_records(events))
    table = f"clicks_{os.environ['FLOW_STATE_STORE_SCHEMA']}"
    spec = spec_with(workdir, broker, topic, target={"kind": "postgres", "table": table})
    first = PipelineRunner(spec, spark).run(available_now=True)
    key = spec.natural_key()
    rows = read_postgres(table, key)
    assert_same_windows(rows, expected(events))  # NULL user_id is a key like any other
    assert first.windows_inserted == len(rows)

    # A crash between the Postgres commit and Spark's commit log: the replayed batch
    # finds its ledger row and writes nothing.
    drop_last_commit(spec)
    replay = PipelineRunner(spec, spark).run(available_now=True)
    assert replay.batches >= 1 and replay.windows_inserted == replay.windows_updated == 0
    assert read_postgres(table, key) == rows

    # A fresh checkpoint recomputes everything: each window is there, closed by the
    # earlier lineage, so the upsert neither doubles nor rewrites it.
    fresh = PipelineRunner(fresh_checkpoint(spec), spark).run(available_now=True)
    assert fresh.windows_inserted == 0 and fresh.windows_updated == 0
    assert read_postgres(table, key) == rows
    ledger = store().batch_ids(spec.name)
    assert len(ledger) == 2  # two checkpoints, two lineages of batch ids
    assert all(ids == list(range(len(ids))) for ids in ledger.values())


def test_kafka_target_produces_each_window_once_keyed_by_its_natural_key(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(4), 400, step_ms=150)
    send(broker.bootstrap_servers, topic, to_records(events))
    out = f"{topic}-out"
    broker.create_topic(out, partitions=1)
    spec = spec_with(
        workdir,
        broker,
        topic,
        target={"kind": "kafka", "topic": out, "bootstrap_servers": broker.bootstrap_servers},
    )
    PipelineRunner(spec, spark).run(available_now=True)
    drop_last_commit(spec)  # a replay after the ledger commit produces nothing again
    PipelineRunner(spec, spark).run(available_now=True)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": out,
            "enable.auto.commit": False,
        }
    )
    # Read to the end (tansu's high watermark hides the tail of a multi-record batch,
    # so the end is "nothing more within 3 s" after the expected count).
    consumer.assign([TopicPartition(out, 0, 0)])
    messages = []
    want = expected(events)
    while (msg := consumer.poll(30 if len(messages) < len(want) else 3)) is not None:
        assert msg.error() is None, msg.error()
        messages.append(msg)
    consumer.close()
    assert len(messages) == len(want)
    for msg in messages:
        row = json.loads(msg.value())
        key = json.loads(msg.key())
        assert key == [row["window_start"], row["window_end"], row["user_id"]]
        ((start, _end, user),) = [k for k in want if k[0].isoformat() == row["window_start"]
                                   and k[2] == row["user_id"]]  # fmt: skip
        assert row["n"] == want[(start, _end, user)]["n"]


def test_dead_letters_can_go_to_the_state_store(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(2), 50, step_ms=500)
    records = to_records(events)
    headers = (("trace", b"\x00\x01"), ("trace", None))
    records[7] = Record(b"{not json", 1, b"k", records[7].timestamp_ms, headers)
    send(broker.bootstrap_servers, topic, records)
    spec = spec_with(workdir, broker, topic, dead_letter={"kind": "state_store"})
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.dead_lettered == 1
    with psycopg.connect(os.environ["FLOW_STATE_STORE_URL"]) as conn:
        rows = conn.execute(
            sql.SQL(
                'SELECT topic, partition, "offset", value, header_keys, header_values FROM {}'
            ).format(sql.Identifier(os.environ["FLOW_STATE_STORE_SCHEMA"], "dead_letters"))
        ).fetchall()
    assert [(t, p, v, k, hv) for t, p, _o, v, k, hv in rows] == [
        (topic, 1, b"{not json", ["trace", "trace"], [b"\x00\x01", None])
    ]
    assert sum(r["dead_lettered_rows"] for r in store().recent_batches(spec.name)) == 1


def test_without_a_url_the_state_store_is_an_embedded_postgres(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FLOW_STATE_STORE_URL")
    events = random_clicks(random.Random(1), 100, step_ms=500)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec = spec_with(workdir, broker, topic, state_store={"embedded_dir": str(workdir / "pg")})
    PipelineRunner(spec, spark).run(available_now=True)
    assert (workdir / "pg" / "PG_VERSION").read_text().strip() == "16"
    import pgserver

    url = pgserver.get_server(workdir / "pg", cleanup_mode="stop").get_uri()
    ledger = StateStore(url, os.environ["FLOW_STATE_STORE_SCHEMA"])
    assert [r["batch_id"] for r in ledger.recent_batches(spec.name)] == [0, 1]
