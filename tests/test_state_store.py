"""The Postgres state store: ledger rows, fingerprints and reset, Postgres and Kafka
targets, dead letters in the store — against real Postgres, Kafka, Spark and Delta."""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from deltalake import DeltaTable
from psycopg import sql
from psycopg.types.json import Jsonb
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.io.checkpoint_claim import CHECKPOINT_MARKER, IncompatibleSpec
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.fingerprint import ORDER_KEYS, fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import (
    aggregation_specs,
    assert_same_windows,
    by_natural_key,
    drop_last_commit,
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


def store() -> LedgerStore:
    return LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])


def read_postgres(
    table: str, key: list[str], url: str | None = None
) -> dict[tuple, dict[str, Any]]:
    """The Postgres target as {natural key: row}; fails on a duplicate natural key."""
    with psycopg.connect(url or os.environ["FLOW_STATE_STORE_URL"]) as conn:
        # "schema.table", or a table on the search path (the test's state-store schema)
        name = sql.Identifier(*table.split("."))
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(name))
        names = [d.name for d in cur.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    return by_natural_key(rows, key)


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
    assert "(gen: the checkpoint generation; `flow-jobs reset` starts the next)" in shown
    assert "replayed" not in shown  # no batch was: no word of it


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
    assert f"`flow-jobs reset {spec.name} --spec SPEC.toml`" in message
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
    ledger = LedgerStore(url, os.environ["FLOW_STATE_STORE_SCHEMA"])
    assert [r["batch_id"] for r in ledger.recent_batches(spec.name)] == [0, 1]


# -- the order of aggregations and of sources ----------------------------------------------

ORDERED_AGGREGATIONS = [("sum", "amount", "total"), ("max", "amount", "hi")]


def _ordered_spec(workdir: Path, broker: EmbeddedBroker, topic: str, order: list) -> PipelineSpec:
    window = {**WINDOW, "aggregations": aggregation_specs(order)}
    return make_spec(workdir, broker.bootstrap_servers, topic, window)


def test_a_reorder_of_aggregations_is_refused_while_windows_are_open(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Swapping ``sum(amount) as total`` and ``max(amount) as hi`` keeps the state's
    types (two DOUBLE buffers), which Spark accepts (tests/test_spark_contracts.py):
    each window open at the restart would fold new rows into the other's buffer. The
    fingerprint's order field refuses it, also beside a change that is safe on its own
    (another target path: with the same one, the Delta table's column order would refuse
    it, less plainly), and the checkpoint then resumes unharmed."""
    rng = random.Random(29)
    events = random_clicks(rng, 400, step_ms=100, disorder_ms=1_500, null_rate=0.1)
    send(broker.bootstrap_servers, topic, to_records(events[:250]))
    spec = _ordered_spec(workdir, broker, topic, ORDERED_AGGREGATIONS)
    PipelineRunner(spec, spark).run(available_now=True)
    watermark = max(e["ts"] for e in events[:250]) - LATENESS
    # Rows in windows the watermark has not closed: their buffers are in the state.
    assert any((e["ts"] // 10_000 + 1) * 10_000 > watermark for e in events[:250])

    swapped = _ordered_spec(workdir, broker, topic, ORDERED_AGGREGATIONS[::-1])
    moved = swapped.model_copy(
        update={"target": swapped.target.model_copy(update={"path": str(workdir / "moved")})}
    )
    for changed in (moved, swapped):
        with pytest.raises(IncompatibleSpec) as refused:
            PipelineRunner(changed, spark).run(available_now=True)
        message = str(refused.value)
        changes = message.split(" — ")[1].split(". Revert")[0]
        assert changes == 'transform.window.aggregations.order: ["total", "hi"] -> ["hi", "total"]'
        assert f"`flow-jobs reset {spec.name} --spec SPEC.toml`" in message
    assert not (workdir / "moved").exists()  # refused before anything was written

    send(broker.bootstrap_servers, topic, to_records(events[250:]))
    resumed = PipelineRunner(spec, spark).run(available_now=True)
    assert resumed.input_rows == len(events) - 250
    reference = reference_windows(
        events,
        time_key="ts",
        duration_ms=10_000,
        group_by=["user_id"],
        aggregations=ORDERED_AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), reference)


def test_a_reorder_of_sources_resumes_each_topic_from_its_own_offsets(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Spark's offset log maps offsets to sources by their position in the plan, which
    ``[transform].sql`` decides, not the order of ``[[sources]]``: that order is not
    fingerprinted (flow_jobs.spec.fingerprint), and a reorder resumes each topic where
    it stood (read from another topic's offsets, a source would start again at 0)."""
    topics = {"left": f"{topic}-l", "right": f"{topic}-r"}
    for name in topics.values():
        broker.create_topic(name, partitions=2)
    rng = random.Random(291)
    events = {side: random_clicks(rng, 200, step_ms=250, disorder_ms=1_000) for side in topics}
    for side, name in topics.items():
        send(broker.bootstrap_servers, name, to_records(events[side][:120]))

    def spec_of(order: list[str]) -> PipelineSpec:
        doc = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW).to_document()
        source = doc["sources"][0]
        doc["sources"] = [{**source, "name": side, "topic": topics[side]} for side in order]
        doc["transform"]["sql"] = (
            "SELECT user_id, amount, ts FROM left UNION ALL SELECT user_id, amount, ts FROM right"
        )
        return PipelineSpec.model_validate(doc)

    PipelineRunner(spec_of(["left", "right"]), spark).run(available_now=True)
    for side, name in topics.items():
        send(broker.bootstrap_servers, name, to_records(events[side][120:]))
    reordered = spec_of(["right", "left"])
    resumed = PipelineRunner(reordered, spark).run(available_now=True)

    assert resumed.input_rows == 2 * 80
    every = events["left"] + events["right"]
    watermark = min(max(e["ts"] for e in rows) for rows in events.values()) - LATENESS
    assert_same_windows(
        read_windows(reordered.target.path, reordered.natural_key()),
        reference_windows(
            every,
            time_key="ts",
            duration_ms=10_000,
            group_by=["user_id"],
            aggregations=AGGREGATIONS,
            watermark_ms=watermark,
        ),
    )


# -- checkpoints registered before the order of aggregations was fingerprinted --------------


def _earlier(spec: PipelineSpec) -> tuple[str, dict[str, Any]]:
    """The fingerprint and fields a flow-jobs without the order fields stored for spec."""
    fields = {k: v for k, v in fingerprint_fields(spec).items() if k not in ORDER_KEYS}
    return fingerprint_of(fields), fields


def _register_as_earlier(ledger: LedgerStore, spec: PipelineSpec) -> str:
    """What an earlier flow-jobs left: its ledger row and its checkpoint marker."""
    earlier, fields = _earlier(spec)
    with ledger.connect() as conn:
        conn.execute(
            ledger.q(
                "INSERT INTO {s}.pipelines (name, fingerprint, fingerprint_fields) "
                "VALUES (%s, %s, %s)"
            ),
            (spec.name, earlier, Jsonb(fields)),
        )
    checkpoint = Path(spec.checkpoint_location())
    checkpoint.mkdir(parents=True)
    marker = {"pipeline": spec.name, "fingerprint": earlier, "claimed_at": "2026-11-01T10:00:00"}
    (checkpoint / CHECKPOINT_MARKER).write_text(json.dumps(marker), encoding="utf-8")
    return earlier


@pytest.fixture
def ledger(postgres_url: str) -> Iterator[LedgerStore]:
    """A state store in a schema of its own (no Spark, no broker)."""
    schema = "t_" + uuid.uuid4().hex[:12]
    store = LedgerStore(postgres_url, schema)
    store.migrate()
    yield store
    with store.connect() as conn:
        conn.execute(store.q("DROP SCHEMA {s} CASCADE"))
    store.close()


def _ordered(workdir: Path, order: list) -> PipelineSpec:
    window = {**WINDOW, "aggregations": aggregation_specs(order)}
    return make_spec(workdir, "127.0.0.1:9092", "clicks", window)


def test_an_upgrade_accepts_a_checkpoint_registered_without_the_order_once(
    ledger: LedgerStore, workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The ledger row and the marker an earlier flow-jobs wrote are accepted and take
    the fingerprint with the order, so the next reorder is refused."""
    spec = _ordered(workdir, ORDERED_AGGREGATIONS)
    earlier = _register_as_earlier(ledger, spec)
    with caplog.at_level(logging.WARNING, logger="flow_jobs.ledger.store"):
        state = ledger.open_pipeline(spec)
    current = fingerprint_of(fingerprint_fields(spec))
    assert state.fingerprint == current != earlier
    assert "a reorder made since cannot be told" in caplog.text
    with ledger.connect() as conn:
        stored, fields = conn.execute(
            ledger.q("SELECT fingerprint, fingerprint_fields FROM {s}.pipelines WHERE name = %s"),
            (spec.name,),
        ).fetchone()
    assert (stored, fields) == (current, fingerprint_fields(spec))
    marker = json.loads((Path(spec.checkpoint_location()) / CHECKPOINT_MARKER).read_text())
    assert marker["fingerprint"] == current and marker["earlier_fingerprint"] == earlier
    assert marker["claimed_at"] == "2026-11-01T10:00:00"  # still the same claim

    assert ledger.open_pipeline(spec).fingerprint == current  # and again, unchanged
    with pytest.raises(IncompatibleSpec) as refused:
        ledger.open_pipeline(_ordered(workdir, ORDERED_AGGREGATIONS[::-1]))
    assert 'transform.window.aggregations.order: ["total", "hi"] -> ["hi", "total"]' in str(
        refused.value
    )


def test_an_upgrade_cannot_see_a_reorder_made_with_it(ledger: LedgerStore, workdir: Path) -> None:
    """The documented limitation: the earlier fingerprint holds no order, so a spec
    reordered before the first run of the new flow-jobs is taken as the checkpoint's."""
    _register_as_earlier(ledger, _ordered(workdir, ORDERED_AGGREGATIONS))
    swapped = _ordered(workdir, ORDERED_AGGREGATIONS[::-1])
    assert ledger.open_pipeline(swapped).fingerprint == fingerprint_of(fingerprint_fields(swapped))


def test_an_upgrade_with_another_change_is_refused_naming_only_that_change(
    ledger: LedgerStore, workdir: Path
) -> None:
    spec = _ordered(workdir, ORDERED_AGGREGATIONS)
    earlier = _register_as_earlier(ledger, spec)
    changed = spec.model_copy(
        update={
            "transform": spec.transform.model_copy(
                update={"window": spec.window.model_copy(update={"duration_ms": 5_000})}
            )
        }
    )
    with pytest.raises(IncompatibleSpec) as refused:
        ledger.open_pipeline(changed)
    changes = str(refused.value).split(" — ")[1].split(". Revert")[0]
    assert changes == "transform.window.duration_ms: 10000 -> 5000"  # no order: none stored
    marker = json.loads((Path(spec.checkpoint_location()) / CHECKPOINT_MARKER).read_text())
    assert marker["fingerprint"] == earlier  # a refusal rewrites nothing
    assert ledger.open_pipeline(spec).fingerprint != earlier  # reverted: the upgrade


def test_a_marker_without_the_order_is_upgraded_where_the_ledger_has_no_row(
    ledger: LedgerStore, workdir: Path
) -> None:
    """A checkpoint whose ledger is elsewhere (or was lost): its marker alone decides."""
    spec = _ordered(workdir, ORDERED_AGGREGATIONS)
    _register_as_earlier(ledger, spec)
    with ledger.connect() as conn:
        conn.execute(ledger.q("DELETE FROM {s}.pipelines WHERE name = %s"), (spec.name,))
    # Another spec of the name: its fingerprint, earlier or current, is not the marker's.
    other = _ordered(workdir, [*ORDERED_AGGREGATIONS, ("min", "amount", "lo")])
    with pytest.raises(IncompatibleSpec, match="was started under spec fingerprint"):
        ledger.open_pipeline(other)
    current = fingerprint_of(fingerprint_fields(spec))
    assert ledger.open_pipeline(spec).fingerprint == current
    marker = json.loads((Path(spec.checkpoint_location()) / CHECKPOINT_MARKER).read_text())
    assert marker["fingerprint"] == current


def test_the_ledger_table_explains_its_star_only_where_a_row_has_one() -> None:
    from flow_jobs.cli_store import batch_notes

    gen = "(gen: the checkpoint generation; `flow-jobs reset` starts the next)"
    star = "(* a replayed batch: its write was already committed)"
    assert batch_notes([{"replayed": False}, {"replayed": False}]) == [gen]
    assert batch_notes([{"replayed": False}, {"replayed": True}]) == [gen, star]


def test_a_read_waits_while_the_pool_has_no_connection_to_give(
    ledger: LedgerStore, caplog: pytest.LogCaptureFixture
) -> None:
    """After a server restart the pool's refills back off, and on a busy machine a read
    can outwait the pool's own 5 s (seen in CI: ``PoolTimeout`` from ``recent_batches``).
    Here every connection of the pool is held elsewhere until the read says it waits: it
    then gets one and answers, instead of failing."""
    import threading
    from contextlib import ExitStack

    from flow_jobs.ledger import pool

    caplog.set_level(logging.WARNING, logger="flow_jobs.io.waits")
    ledger.migrate()  # the pool is open
    held, done = threading.Event(), threading.Event()

    def hold_every_connection() -> None:
        with ExitStack() as stack:
            for _ in range(pool.MAX_CONNECTIONS):
                stack.enter_context(ledger.connect())
            held.set()
            done.wait(60)

    holder = threading.Thread(target=hold_every_connection)
    holder.start()
    try:
        assert held.wait(30)

        def release_once_waiting() -> None:
            for _ in range(600):
                if "while reading recent batches" in caplog.text:
                    break
                threading.Event().wait(0.1)
            done.set()

        threading.Thread(target=release_once_waiting, daemon=True).start()
        assert ledger.recent_batches("nobody") == []
    finally:
        done.set()
        holder.join(30)
    assert "state store unreachable while reading recent batches" in caplog.text
    assert "state store back after" in caplog.text
