"""Stream-stream joins equal an independent reference; state stays bounded; chaining."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.errors import PlanError
from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.reference_join import reference_join
from tests.support import (
    BASE_MS,
    aggregation_specs,
    assert_same_windows,
    fresh_checkpoint,
    read_windows,
    send,
)

ORDERS = "order_id STRING, region STRING, amount DOUBLE, ts BIGINT"
PAYMENTS = "order_id STRING, region STRING, paid DOUBLE, ts BIGINT"
KEYS = ["order_id", "region"]
COMPARED = [
    "left_order_id",
    "left_region",
    "left_amount",
    "left_ts",
    "right_order_id",
    "right_region",
    "right_paid",
    "right_ts",
]
LATENESS = 10_000


def _streams(rng: random.Random, n: int = 300) -> tuple[list[dict], list[dict]]:
    """Orders and payments: repeated keys (several matches), NULL keys, payments before,
    inside and outside the bounds, unrelated payments, each stream out of order within
    1.5 s."""
    orders, payments = [], []
    for i in range(n):
        order = {
            "order_id": None if rng.random() < 0.05 else f"o{i % 110}",
            "region": rng.choice(["eu", "us"]),
            "amount": round(rng.uniform(1, 500), 2),
            "ts": BASE_MS + i * 400 + rng.randint(0, 1_500),
        }
        orders.append(order)
        for _ in range(rng.choice([0, 1, 1, 2])):
            payments.append(
                {
                    "order_id": order["order_id"] if rng.random() > 0.05 else None,
                    "region": order["region"],
                    "paid": round(rng.uniform(1, 500), 2),
                    "ts": order["ts"] + rng.randint(-3_000, 7_000),
                }
            )
    for i in range(20):  # payments for no order
        payments.append(
            {
                "order_id": f"x{i}",
                "region": "eu",
                "paid": 1.0,
                "ts": BASE_MS + rng.randint(0, n * 400),
            }
        )
    payments.sort(key=lambda p: p["ts"] + rng.randint(0, 1_500))
    return orders, payments


def _closing() -> tuple[dict, dict]:
    """One row per side, far ahead, matching nothing: the watermark passes every row."""
    late = BASE_MS + 3_600_000
    return (
        {"order_id": "close-l", "region": "eu", "amount": 0.0, "ts": late},
        {"order_id": "close-r", "region": "eu", "paid": 0.0, "ts": late},
    )


def _send(broker: EmbeddedBroker, topic: str, rows: list[dict]) -> None:
    """Each row as JSON; a row's ``_headers`` become the record's Kafka headers."""
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(
                json.dumps({k: v for k, v in r.items() if k != "_headers"}).encode(),
                i % 2,
                timestamp_ms=r["ts"],
                headers=r.get("_headers", ()),
            )
            for i, r in enumerate(rows)
        ],
    )


def _spec(
    workdir: Path,
    broker: EmbeddedBroker,
    topics: tuple[str, str],
    join: dict[str, Any],
    window: dict[str, Any] | None = None,
    per_trigger: int = 120,
) -> PipelineSpec:
    transform: dict[str, Any] = {
        "join": {
            "kind": "stream_stream_join",
            "left_source": "orders",
            "right_source": "payments",
            "left_keys": KEYS,
            "right_keys": KEYS,
            "event_time_column": "ts",
            "lateness_ms": LATENESS,
            **join,
        }
    }
    if window:
        transform |= {"window": window, "chain": ["join", "window"]}
    return PipelineSpec.model_validate(
        {
            "name": "join-check",
            "sources": [
                {
                    "name": "orders",
                    "topic": topics[0],
                    "bootstrap_servers": broker.bootstrap_servers,
                    "schema": ORDERS,
                    "max_offsets_per_trigger": per_trigger,
                },
                {
                    "name": "payments",
                    "topic": topics[1],
                    "bootstrap_servers": broker.bootstrap_servers,
                    "schema": PAYMENTS,
                    "max_offsets_per_trigger": per_trigger,
                },
            ],
            "transform": transform,
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


@pytest.fixture
def topics(broker: EmbeddedBroker, topic: str) -> tuple[str, str]:
    broker.create_topic(topic + "-pay", partitions=2)
    return topic, topic + "-pay"


def _load(rng_seed: str, broker: EmbeddedBroker, topics: tuple[str, str]) -> tuple[list, list]:
    orders, payments = _streams(random.Random(rng_seed))
    close_l, close_r = _closing()
    _send(broker, topics[0], [*orders, close_l])
    _send(broker, topics[1], [*payments, close_r])
    return orders, payments


# A symmetric left join runs through the CLI below (the shipped spec).
CASES = {
    "inner": {"how": "inner", "time_window_ms": 4_000},
    "right": {"how": "right", "time_window_ms": 4_000},
    "full": {"how": "full", "time_window_ms": 4_000},
    "asymmetric-left": {"how": "left", "lower_bound_ms": 0, "upper_bound_ms": 5_000},
    "asymmetric-full-negative": {"how": "full", "lower_bound_ms": -6_000, "upper_bound_ms": -500},
}


@pytest.mark.parametrize("case", list(CASES))
def test_join_equals_reference(
    case: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topics: tuple[str, str],
    workdir: Path,
) -> None:
    orders, payments = _load(case, broker, topics)
    spec = _spec(workdir, broker, topics, CASES[case])
    runner = PipelineRunner(spec, spark)
    summary = runner.run(available_now=True)

    assert summary.late_rows == 0
    assert summary.batches >= 4
    table = read_delta(spec.target.path)
    assert table.column_names == [
        "left_order_id",
        "left_region",
        "left_amount",
        "left_ts",
        "left__event_ts",
        "right_order_id",
        "right_region",
        "right_paid",
        "right_ts",
        "right__event_ts",
        "join_row_id",
    ]
    rows = table.to_pylist()
    lower, upper = spec.transform.join.bounds if spec.transform.join else (0, 0)
    expected = reference_join(
        orders,
        payments,
        left_keys=KEYS,
        right_keys=KEYS,
        left_time="ts",
        right_time="ts",
        lower=lower,
        upper=upper,
        how=CASES[case]["how"],
        left_columns=["order_id", "region", "amount", "ts"],
        right_columns=["order_id", "region", "paid", "ts"],
    )
    actual = sorted(
        (tuple(r[c] for c in COMPARED) for r in rows),
        key=lambda t: tuple((v is None, v if v is not None else 0) for v in t),
    )
    assert expected, "the reference produced no row: the test would prove nothing"
    assert actual == expected
    assert len({r["join_row_id"] for r in rows}) == len(rows)
    natural = {tuple(r[c] for c in runner.compiled.natural_key) for r in rows}
    assert len(natural) == len(rows)


def test_a_deduplicated_side_joins_as_its_records_without_the_resent_ones(
    spark: SparkSession, broker: EmbeddedBroker, topics: tuple[str, str], workdir: Path
) -> None:
    """``[[transform.dedup]]`` on the payments (at-least-once: some sent twice, the copy
    a little later in Kafka): the join equals the reference join of the orders with the
    payments as if each was sent once, and each copy is counted as a duplicate."""
    rng = random.Random("dedup-join")
    orders, payments = _streams(rng)
    resent = [dict(p) for p in rng.sample(payments, 25)]
    sent = list(payments)
    for copy in resent:  # a few positions after its first send
        sent.insert(min(len(sent), sent.index(copy) + rng.randint(1, 3)), dict(copy))
    close_l, close_r = _closing()
    _send(broker, topics[0], [*orders, close_l])
    _send(broker, topics[1], [*sent, close_r])
    dedup = {"source": "payments", "keys": ["order_id", "paid"], "within_ms": 0}
    doc = _spec(workdir, broker, topics, CASES["inner"]).to_document()
    doc["transform"]["dedup"] = [dedup]
    spec = PipelineSpec.model_validate(doc)
    summary = PipelineRunner(spec, spark).run(available_now=True)

    # within_ms = 0: a payment repeats one of the same order, amount and time
    once = list({(p["order_id"], p["paid"], p["ts"]): p for p in sent}.values())
    assert summary.duplicates == len(sent) - len(once) >= 25
    assert summary.late_rows == 0
    lower, upper = spec.transform.join.bounds if spec.transform.join else (0, 0)
    expected = reference_join(
        orders,
        once,
        left_keys=KEYS,
        right_keys=KEYS,
        left_time="ts",
        right_time="ts",
        lower=lower,
        upper=upper,
        how="inner",
        left_columns=["order_id", "region", "amount", "ts"],
        right_columns=["order_id", "region", "paid", "ts"],
    )
    actual = sorted(
        (tuple(r[c] for c in COMPARED) for r in read_delta(spec.target.path).to_pylist()),
        key=lambda t: tuple((v is None, v if v is not None else 0) for v in t),
    )
    assert expected and actual == expected


def test_join_state_is_evicted_and_replays_do_not_duplicate(
    spark: SparkSession, broker: EmbeddedBroker, topics: tuple[str, str], workdir: Path
) -> None:
    orders, payments = _load("eviction", broker, topics)
    # 30 records per source and trigger: ~12 s of orders per micro-batch
    spec = _spec(workdir, broker, topics, {"how": "full", "time_window_ms": 4_000}, per_trigger=30)
    runner = PipelineRunner(spec, spark)
    runner.run(available_now=True)
    joins = [
        next(op for op in p["stateOperators"] if op["operatorName"] == "symmetricHashJoin")
        for _, p in sorted(runner.progress.progress.items())
    ]
    total = len(orders) + len(payments) + 2
    peak = max(op["numRowsTotal"] for op in joins)
    # Buffered rows stay within one micro-batch plus the watermark horizon (lateness +
    # bounds: ~14 s, ~35 orders and their payments), not the whole input.
    assert peak < 0.35 * total, (peak, total)
    assert joins[-1]["numRowsTotal"] <= 4  # after the closing rows, only they remain
    before = read_delta(spec.target.path).to_pylist()

    # a fresh checkpoint (a new folder: see fresh_checkpoint) re-reads everything, here
    # in one micro-batch: the same rows, none doubled, whatever the cut
    doc = fresh_checkpoint(spec).to_document()
    for source in doc["sources"]:
        source.pop("max_offsets_per_trigger")
    PipelineRunner(PipelineSpec.model_validate(doc), spark).run(available_now=True)
    after = read_delta(spec.target.path).to_pylist()
    key = lambda r: r["join_row_id"]  # noqa: E731
    assert sorted(after, key=key) == sorted(before, key=key)


def _pairs_within_4s(
    orders: list[dict], payments: list[dict], how: str, left_columns: list[str]
) -> list[tuple]:
    """The reference join of ``time_window_ms = 4000``: (left columns..., paid)."""
    return reference_join(
        orders,
        payments,
        left_keys=KEYS,
        right_keys=KEYS,
        left_time="ts",
        right_time="ts",
        lower=-4_000,
        upper=4_000,
        how=how,
        left_columns=left_columns,
        right_columns=["paid"],
    )


def test_window_after_a_join(
    spark: SparkSession, broker: EmbeddedBroker, topics: tuple[str, str], workdir: Path
) -> None:
    orders, payments = _load("chain", broker, topics)
    aggregations = [
        ("count", None, "payments"),
        ("sum", "right_paid", "paid"),
        ("max", "left_amount", "max_order"),
    ]
    window = {
        "kind": "tumbling",
        "duration_ms": 20_000,
        "event_time_column": "left_ts",
        "group_by": ["left_region"],
        "aggregations": aggregation_specs(aggregations),
    }
    spec = _spec(workdir, broker, topics, {"how": "inner", "time_window_ms": 4_000}, window)
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.late_rows == 0

    pairs = _pairs_within_4s(orders, payments, "inner", ["region", "amount", "ts"])
    joined = [
        {"left_region": r, "left_amount": a, "left_ts": t, "right_paid": p} for r, a, t, p in pairs
    ]
    expected = reference_windows(
        joined,
        time_key="left_ts",
        duration_ms=20_000,
        group_by=["left_region"],
        aggregations=aggregations,
        watermark_ms=2**62,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


@pytest.mark.parametrize(
    "kind",
    [
        {"kind": "tumbling", "duration_ms": 20_000},
        {"kind": "count_tumbling", "count": 4, "lateness_ms": LATENESS},
    ],
    ids=["tumbling", "count_tumbling"],
)
def test_window_after_a_left_join_keeps_every_joined_row(
    kind: dict[str, Any],
    spark: SparkSession,
    broker: EmbeddedBroker,
    topics: tuple[str, str],
    workdir: Path,
) -> None:
    """Unmatched left rows come out of the join only once the right side's watermark
    passes their bounds; the window must still count them (issue 11, item 8), and a
    count window runs after a join (no ``_kafka``: ties by the row's hash)."""
    orders, payments = _load(f"left-{kind['kind']}", broker, topics)
    # what the tie order of equal times cannot change (several payments of one order
    # share its time)
    aggregations = [
        ("count", None, "rows"),
        ("count", "right_paid", "paid_rows"),
        ("min", "left_ts", "first_ts"),
    ]
    window = {
        **kind,
        "event_time_column": "left_ts",
        "group_by": ["left_region"],
        "aggregations": aggregation_specs(aggregations),
    }
    spec = _spec(workdir, broker, topics, {"how": "left", "time_window_ms": 4_000}, window)
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.late_rows == 0

    pairs = _pairs_within_4s(orders, payments, "left", ["region", "ts"])
    assert any(p is None for *_, p in pairs), "no unmatched order: the test proves nothing"
    joined = [{"left_region": r, "left_ts": t, "right_paid": p, "_arrival": 0} for r, t, p in pairs]
    close_ts = _closing()[0]["ts"]  # the closing row joins nothing: it stays open
    expected = reference_windows(
        joined,
        kind=kind["kind"],
        time_key="left_ts",
        duration_ms=kind.get("duration_ms"),
        count=kind.get("count"),
        group_by=["left_region"],
        aggregations=aggregations,
        watermark_ms=close_ts - LATENESS - 1,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


def test_output_columns_can_be_chosen_and_renamed(
    spark: SparkSession, broker: EmbeddedBroker, topics: tuple[str, str], workdir: Path
) -> None:
    orders, payments = _load("renames", broker, topics)
    join = {
        "how": "inner",
        "time_window_ms": 4_000,
        "output_left_columns": {"order_id": "order", "amount": "order_amount", "ts": "ordered_at"},
        "output_right_columns": ["paid", "ts"],
    }
    spec = _spec(workdir, broker, topics, join)
    runner = PipelineRunner(spec, spark)
    runner.run(available_now=True)
    assert runner.compiled.natural_key == ("order", "ordered_at", "ts", "join_row_id")
    table = read_delta(spec.target.path)
    assert table.column_names == [
        "order",
        "order_amount",
        "ordered_at",
        "paid",
        "ts",
        "join_row_id",
    ]
    expected = reference_join(
        orders,
        payments,
        left_keys=KEYS,
        right_keys=KEYS,
        left_time="ts",
        right_time="ts",
        lower=-4_000,
        upper=4_000,
        how="inner",
        left_columns=["order_id", "amount", "ts"],
        right_columns=["paid", "ts"],
    )
    got = sorted(tuple(r[c] for c in table.column_names[:-1]) for r in table.to_pylist())
    assert got == sorted(expected)


def test_colliding_output_columns_are_refused(
    spark: SparkSession, broker: EmbeddedBroker, topics: tuple[str, str], workdir: Path
) -> None:
    join = {
        "how": "inner",
        "time_window_ms": 1_000,
        "output_left_columns": ["ts"],
        "output_right_columns": ["ts"],
    }
    with pytest.raises(PlanError, match="output column 'ts' appears twice"):
        PipelineRunner(_spec(workdir, broker, topics, join), spark)


@pytest.mark.parametrize("how", ["left"])  # the other kinds: test_join_equals_reference
def test_shipped_join_spec_runs_through_the_cli(
    how: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topics: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pipelines/orders_payments_join.toml, its how set through ${JOIN_HOW}."""
    from flow_jobs.cli import main
    from flow_jobs.spec import load_spec

    rng = random.Random(how)
    orders = [
        {
            "order_id": None if i % 17 == 0 else f"o{i % 60}",
            "customer": f"c{i % 7}",
            "amount": float(i),
            "ts": BASE_MS + 20_000 * i,
        }
        for i in range(120)
    ]
    payments = [
        {
            "payment_id": f"p{j}",
            "order_id": o["order_id"],
            "paid": float(j),
            "ts": o["ts"] + rng.randint(-90_000, 2_400_000),
        }
        for j, o in enumerate(orders)
        if rng.random() < 0.8
    ]
    payments.sort(key=lambda p: p["ts"] + rng.randint(0, 1_500))
    _send(
        broker,
        topics[0],
        [
            *orders,
            {"order_id": "close", "customer": "-", "amount": 0.0, "ts": BASE_MS + 86_400_000},
        ],
    )
    _send(
        broker,
        topics[1],
        [
            *payments,
            {"payment_id": "close", "order_id": "close-r", "paid": 0.0, "ts": BASE_MS + 86_400_000},
        ],
    )
    for name, value in (
        ("KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap_servers),
        ("ORDERS_TOPIC", topics[0]),
        ("PAYMENTS_TOPIC", topics[1]),
        ("JOIN_HOW", how),
        ("FLOW_DATA_DIR", str(tmp_path)),
    ):
        monkeypatch.setenv(name, value)
    path = Path(__file__).parent.parent / "pipelines" / "orders_payments_join.toml"
    assert main(["run", str(path), "--available-now"]) == 0, capsys.readouterr().err[-2000:]

    spec = load_spec(path)
    columns = ["left_order_id", "left_amount", "left_ts", "right_payment_id", "right_ts"]
    rows = read_delta(spec.target.path).to_pylist()
    expected = reference_join(
        orders,
        payments,
        left_keys=["order_id"],
        right_keys=["order_id"],
        left_time="ts",
        right_time="ts",
        lower=-60_000,
        upper=1_800_000,
        how=how,
        left_columns=["order_id", "amount", "ts"],
        right_columns=["payment_id", "ts"],
    )
    assert expected
    assert (
        sorted(
            (tuple(r[c] for c in columns) for r in rows),
            key=lambda t: tuple((v is None, v if v is not None else 0) for v in t),
        )
        == expected
    )


@pytest.mark.parametrize(
    ("how", "time_column", "message"),
    [
        ("left", "right_ts", "use one of left_ts"),
        ("full", "left_ts", "a window after a full outer join has no event time on every row"),
    ],
)
def test_a_window_needs_an_event_time_on_every_joined_row(
    how: str,
    time_column: str,
    message: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topics: tuple[str, str],
    workdir: Path,
) -> None:
    window = {
        "kind": "tumbling",
        "duration_ms": 20_000,
        "event_time_column": time_column,
        "aggregations": [{"agg": "count", "as": "n"}],
    }
    spec = _spec(workdir, broker, topics, {"how": how, "time_window_ms": 4_000}, window)
    with pytest.raises(PlanError, match=message):
        PipelineRunner(spec, spark)


def test_late_rows_of_a_join_are_counted_per_row_and_dead_lettered(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topics: tuple[str, str],
    workdir: Path,
) -> None:
    """late_data = "dlq" on a join, into a dead_letter_topic, over two runs of one
    checkpoint. Run 1 leaves the watermark at 9 s (the lower side's 19 s less 10 s of
    lateness). Run 2 brings on-time pairs and, on both sides, rows at or below 9 s: late
    by the rule (docs/spec-reference.md, "Late rows"), each counted once under its
    source, none joined, each a message with its original key, value and Kafka headers
    (repeated names, binary values, in order) and its position in flow.* headers.
    Spark's join then has nothing left to drop (no "_operator" count), and the
    dead-letter table gets none of them."""

    def order(name: str, second: float) -> dict:
        return {"order_id": name, "region": "eu", "amount": 1.0, "ts": BASE_MS + int(second * 1000)}

    def payment(name: str, second: float) -> dict:
        return {"order_id": name, "region": "eu", "paid": 2.0, "ts": BASE_MS + int(second * 1000)}

    spec = _spec(workdir, broker, topics, {"how": "inner", "time_window_ms": 4_000})
    doc = spec.to_document()
    dead_topic = f"{topics[0]}-late"
    broker.create_topic(dead_topic, partitions=1)
    doc["transform"]["join"] |= {"late_data": "dlq", "dead_letter_topic": dead_topic}
    spec = PipelineSpec.model_validate(doc)
    _send(broker, topics[0], [order(f"o{i}", i) for i in range(20)])
    _send(broker, topics[1], [payment(f"o{i}", i + 0.5) for i in range(20)])
    first = PipelineRunner(spec, spark).run(available_now=True)
    assert first.late_rows == 0 and first.watermark == "2023-11-14T22:13:29.000Z"

    traced = (("trace", b"\x00\xff"), ("trace", b"two"), ("empty", None))
    late_orders = [
        {**order("late-a", 1), "_headers": traced},
        order("o2", 9),
        order("late-b", 8.999),
    ]
    late_payments = [payment("o30", 9), payment("late-c", 3)]  # o30 is on time: unmatched
    on_time_orders = [order(f"o{i}", i) for i in range(20, 40)]
    on_time_payments = [payment(f"o{i}", i + 0.5) for i in range(20, 40)]
    _send(broker, topics[0], [*on_time_orders[:10], *late_orders, *on_time_orders[10:]])
    _send(broker, topics[1], [*late_payments, *on_time_payments])
    second = PipelineRunner(spec, spark).run(available_now=True)

    assert second.late_rows == 5
    assert second.dead_lettered == 5
    ledger = LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
    late_by_source: Counter[str] = Counter()
    for row in ledger.recent_batches(spec.name, 1_000):
        late_by_source.update(row["source_late_rows"] or {})
    assert late_by_source == Counter({"orders": 3, "payments": 2})
    joined = read_delta(spec.target.path).to_pylist()
    assert {(r["left_order_id"], r["left_ts"]) for r in joined} == {
        (o["order_id"], o["ts"]) for o in [order(f"o{i}", i) for i in range(40)]
    }
    assert read_delta(spec.dead_letter_path()).num_rows == 0
    messages = _consume(broker.bootstrap_servers, dead_topic)
    assert len(messages) == 5
    sent = {"orders": late_orders, "payments": late_payments}
    for value, key, raw in messages:
        assert key is None  # the records had none
        headers = {k: v.decode() for k, v in raw if k.startswith("flow.")}
        source = headers["flow.source"]
        row = json.loads(value)  # the original bytes, verbatim
        assert row in [{k: v for k, v in r.items() if k != "_headers"} for r in sent[source]]
        own = [(k, v) for k, v in raw if not k.startswith("flow.")]
        assert own == (list(traced) if row["order_id"] == "late-a" else [])
        assert headers["flow.topic"] == topics[0 if source == "orders" else 1]
        assert headers["flow.reason"].startswith("late: event time ts = ")
        assert int(headers["flow.offset"]) >= 0 and headers["flow.partition"] in ("0", "1")
    positions = {
        tuple(v for k, v in raw if k in ("flow.topic", "flow.partition", "flow.offset"))
        for *_, raw in messages
    }
    assert len(positions) == 5


def _consume(
    bootstrap: str, topic: str
) -> list[tuple[bytes, bytes | None, list[tuple[str, bytes | None]]]]:
    """Every message of a one-partition topic: (value, key, headers in order)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "t", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            m = consumer.poll(10)
            assert m is not None, "no end of partition within 10 s"
            if m.error():
                break  # the end of the partition
            out.append((m.value(), m.key(), list(m.headers() or [])))
    finally:
        consumer.close()
    return out
