"""Debezium change events (``format = "debezium"``): a mirror keeps a target table equal
to the source table, and a temporal join reads a CDC table as its versions.

The reference is a table in Python changed by the same operations the events describe
(docs/spec-reference.md, "format = \\"debezium\\"" and "[transform.mirror]"): a create or
a snapshot read inserts the after-image, an update replaces the row with it, a delete
removes the row; the changes of one key apply in the order the database made them
(``source.ts_ms``, then their Kafka offset: Debezium keys a table's records by primary
key, so one key's changes are in one partition, in order). A Debezium tombstone (a NULL
value after a delete) changes nothing.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.mirror.step import last_changes
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import (
    BASE_MS,
    by_natural_key,
    fresh_checkpoint,
    iceberg_target,
    read_iceberg,
    send,
)
from tests.test_poison_pills import _dead_letters
from tests.test_state_store import read_postgres

PARTITIONS = 3
ROW_DDL = "id BIGINT, name STRING, email STRING, balance DOUBLE, updated_at BIGINT"
#: the schema Kafka Connect's JsonConverter sends beside a payload (schemas.enable)
CONNECT_SCHEMA = {
    "type": "struct",
    "name": "dbserver1.public.customers.Envelope",
    "optional": False,
    "fields": [
        {"type": "struct", "field": "before", "optional": True, "fields": []},
        {"type": "struct", "field": "after", "optional": True, "fields": []},
        {"type": "struct", "field": "source", "optional": False, "fields": []},
        {"type": "string", "field": "op", "optional": False},
        {"type": "int64", "field": "ts_ms", "optional": True},
    ],
}

Row = dict[str, Any]


# -- the changes and their reference -------------------------------------------------------


class Table:
    """A table in Python and the Debezium records of its changes, keyed by id."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rows: dict[int, Row] = {}
        self.changes: list[tuple[str, Row | None, Row | None, int]] = []
        self.clock = BASE_MS
        self.next_id = 1

    def _row(self, key: int) -> Row:
        rng = self.rng
        return {
            "id": key,
            "name": rng.choice(["ann", "bo", "cy", None, "dé ✓"]),
            "email": None if rng.random() < 0.2 else f"u{key}@x.io",
            "balance": rng.choice([0.0, -1.5, 1e300, round(rng.uniform(-100, 100), 2), None]),
            "updated_at": self.clock,
        }

    def tick(self, same: bool = False) -> int:
        if not same:  # several changes of one transaction share the database's time
            self.clock += self.rng.randint(1, 40)
        return self.clock

    def snapshot(self, n: int) -> None:
        for _ in range(n):
            self.tick(same=self.rng.random() < 0.5)
            self._apply("r", None, self._row(self.next_id))
            self.next_id += 1

    def change(self, n: int) -> None:
        rng = self.rng
        for _ in range(n):
            self.tick(same=rng.random() < 0.3)
            live = sorted(self.rows)
            what = rng.random()
            if not live or what < 0.3:
                key = self.next_id if rng.random() < 0.8 or not self._gone() else self._gone()
                self.next_id = max(self.next_id, key + 1)
                self._apply("c", None, self._row(key))
            elif what < 0.75:
                key = rng.choice(live)
                self._apply("u", self.rows[key], {**self._row(key), "id": key})
            else:
                key = rng.choice(live)
                self._apply("d", self.rows[key], None)

    def _gone(self) -> int | None:
        """A deleted key (its row comes back with a create), if any."""
        gone = sorted({b["id"] for op, b, _, _ in self.changes if op == "d"} - set(self.rows))
        return self.rng.choice(gone) if gone else None

    def _apply(self, op: str, before: Row | None, after: Row | None) -> None:
        self.changes.append((op, before, after, self.clock))
        if op == "d":
            assert before is not None
            del self.rows[before["id"]]
        else:
            assert after is not None
            self.rows[after["id"]] = after

    def records(self, start: int, wrap: str, tombstones: bool = True) -> list[Record]:
        """The changes from ``start`` on as Debezium's JSON records: ``wrap`` "bare",
        "payload" (schemas.enable) or "mixed"; each delete followed by its tombstone."""
        out = []
        for i, (op, before, after, ts) in enumerate(self.changes[start:], start):
            key = (before or after or {})["id"]
            envelope = {
                "before": before,
                "after": after,
                "source": {
                    "version": "2.7.0.Final",
                    "connector": "postgresql",
                    "name": "dbserver1",
                    "ts_ms": ts,
                    "snapshot": "true" if op == "r" else "false",
                    "db": "inventory",
                    "table": "customers",
                    "lsn": 1000 + i,
                },
                "op": op,
                "ts_ms": ts + 7,  # the connector saw it a little later
                "transaction": None,
            }
            wrapped = wrap == "payload" or (wrap == "mixed" and i % 2 == 1)
            value = {"schema": CONNECT_SCHEMA, "payload": envelope} if wrapped else envelope
            partition = key % PARTITIONS
            record_key = json.dumps({"id": key}).encode()
            out.append(Record(json.dumps(value).encode(), partition, record_key, ts + 7))
            if op == "d" and tombstones:
                out.append(Record(None, partition, record_key, ts + 7))
        return out


def _mirror_spec(
    workdir: Path, bootstrap: str, topic: str, target: dict[str, Any], **source: Any
) -> PipelineSpec:
    schema = {"schema": ROW_DDL} if source.get("schema", ...) is not None else {}
    source.pop("schema", None)
    return PipelineSpec.model_validate(
        {
            "name": f"mirror-{workdir.name}",
            "sources": [
                {
                    "name": "customers",
                    "topic": topic,
                    "bootstrap_servers": bootstrap,
                    "format": "debezium",
                    **schema,
                    **source,
                }
            ],
            "transform": {"mirror": {"key": ["id"]}},
            "target": target,
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


def _read(spec: PipelineSpec, target: dict[str, Any], url: str) -> dict[tuple, Row]:
    if target["kind"] == "delta":
        return by_natural_key(read_delta(target["path"]).to_pylist(), ["id"])
    if target["kind"] == "iceberg":
        return read_iceberg(target, ["id"])
    return read_postgres(f"{spec.target.schema_name}.{spec.target.table}", ["id"], url)  # type: ignore[attr-defined]


def _expected(table: Table) -> dict[tuple, Row]:
    return {(k,): {c: v for c, v in r.items() if c != "id"} for k, r in table.rows.items()}


@pytest.fixture
def changes_topic(broker: EmbeddedBroker) -> Iterator[str]:
    name = f"customers-{random.randrange(10**9)}"
    broker.create_topic(name, partitions=PARTITIONS)
    yield name


def test_a_mirror_equals_the_source_table_after_snapshot_changes_and_restarts(
    spark: SparkSession,
    broker: EmbeddedBroker,
    changes_topic: str,
    workdir: Path,
    postgres_url: str,
) -> None:
    """A snapshot (``r``), then creates, updates (two of one key at the same database
    time), deletes with their tombstones and keys deleted and created again, in both
    JSON envelopes in one topic, over three partitions; a run after each of three
    phases on one checkpoint (restarts), as one micro-batch (Delta, Postgres, Iceberg)
    and as batches of 5 records (Delta): after each run every target equals the table.
    A fresh checkpoint over the whole topic leaves the same table; an undecodable
    change, a truncate and a change without its image are dead letters, one each."""
    rng = random.Random("mirror")
    table = Table(rng)
    bootstrap = broker.bootstrap_servers
    targets = {
        "one": {"kind": "delta", "path": str(workdir / "one" / "target")},
        "tiny": {"kind": "delta", "path": str(workdir / "tiny" / "target")},
        "pg": {
            "kind": "postgres",
            "table": "customers_mirror",
            "schema": os.environ["FLOW_STATE_STORE_SCHEMA"],
        },
        "ice": iceberg_target(workdir, "customers_mirror"),
    }
    specs = {
        tag: _mirror_spec(
            workdir / tag,
            bootstrap,
            changes_topic,
            target,
            **({"max_offsets_per_trigger": 5} if tag == "tiny" else {}),
        )
        for tag, target in targets.items()
    }
    sent = 0
    phases = [(25, 0), (0, 60), (0, 60)]
    for phase, (snapshot, changes) in enumerate(phases):
        table.snapshot(snapshot)
        table.change(changes)
        send(bootstrap, changes_topic, table.records(sent, "mixed"))
        sent = len(table.changes)
        if phase == 1:  # bad changes: a truncate, a create without after, not JSON
            bad = [
                {"before": None, "after": None, "op": "t", "ts_ms": 1, "source": {"ts_ms": 1}},
                {"before": None, "after": None, "op": "c", "ts_ms": 1, "source": {"ts_ms": 1}},
            ]
            records = [Record(json.dumps(b).encode(), 0, b'{"id":0}', BASE_MS) for b in bad]
            send(bootstrap, changes_topic, [*records, Record(b"{nope", 1, None, BASE_MS)])
        for tag, spec in specs.items():
            PipelineRunner(spec, spark).run(available_now=True)
            assert _read(spec, targets[tag], postgres_url) == _expected(table), (phase, tag)
    ops = {op for op, *_ in table.changes}
    assert ops == {"r", "c", "u", "d"}
    assert any(
        a[0] == "c" and any(b[0] == "d" and b[1]["id"] == a[2]["id"] for b in table.changes[:i])
        for i, a in enumerate(table.changes)
    ), "a deleted key is created again"
    reasons = sorted(r for _, r in _dead_letters(specs["one"]).values())
    assert len(reasons) == 3, reasons
    assert reasons[0] == "Debezium op 'c' without its after image"
    assert reasons[1].startswith("Debezium op 't': a row change is one of c, r, u, d")
    assert reasons[2].startswith("malformed JSON")
    again = fresh_checkpoint(specs["one"])
    PipelineRunner(again, spark).run(available_now=True)
    assert _read(again, targets["one"], postgres_url) == _expected(table)


def _value_schema() -> dict[str, Any]:
    """Debezium's Avro value schema of the customers table (its envelope, as the
    connector registers it, trimmed of the source block's connector-specific fields)."""
    optional = [
        {"name": n, "type": ["null", t], "default": None}
        for n, t in (("name", "string"), ("email", "string"), ("balance", "double"))
    ]
    value = {
        "type": "record",
        "name": "Value",
        "fields": [
            {"name": "id", "type": "long"},
            *optional,
            {"name": "updated_at", "type": "long"},
        ],
        "connect.name": "dbserver1.public.customers.Value",
    }
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "snapshot", "type": [{"type": "string"}, "null"], "default": "false"},
            {"name": "db", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "lsn", "type": ["null", "long"], "default": None},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "dbserver1.public.customers",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
        "connect.name": "dbserver1.public.customers.Envelope",
    }


def test_a_mirror_of_debezium_avro_through_the_registry_equals_the_table(
    spark: SparkSession,
    broker: EmbeddedBroker,
    changes_topic: str,
    workdir: Path,
) -> None:
    """Debezium's Avro envelope, written by confluent-kafka's AvroSerializer under the
    dev registry: the mirror's Delta table equals the table after a snapshot and after
    a second phase of changes (a restart), as one micro-batch and as batches of 4."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from flow_jobs_dev.schema_registry import EmbeddedSchemaRegistry

    rng = random.Random("avro-mirror")
    table = Table(rng)
    bootstrap = broker.bootstrap_servers
    with EmbeddedSchemaRegistry() as registry:
        client = SchemaRegistryClient({"url": registry.url})
        serialize = AvroSerializer(client, json.dumps(_value_schema()))
        context = SerializationContext(changes_topic, MessageField.VALUE)
        specs = {
            tag: _mirror_spec(
                workdir / tag,
                bootstrap,
                changes_topic,
                {"kind": "delta", "path": str(workdir / tag / "target")},
                schema=None,
                schema_registry={"url": registry.url},
                **({"max_offsets_per_trigger": 4} if tag == "tiny" else {}),
            )
            for tag in ("one", "tiny")
        }
        sent = 0
        for snapshot, changes in [(15, 10), (0, 50)]:
            table.snapshot(snapshot)
            table.change(changes)
            records = []
            for record in table.records(sent, "bare"):
                if record.value is None:
                    records.append(record)
                    continue
                envelope = json.loads(record.value)
                envelope["source"] = {
                    k: envelope["source"][k]
                    for k in ("version", "connector", "name", "ts_ms", "snapshot", "db", "table")
                } | {"lsn": envelope["source"]["lsn"]}
                del envelope["transaction"]
                value = serialize(envelope, context)
                records.append(Record(value, record.partition, record.key, record.timestamp_ms))
            send(bootstrap, changes_topic, records)
            sent = len(table.changes)
            for tag, spec in specs.items():
                PipelineRunner(spec, spark).run(available_now=True)
                rows = by_natural_key(read_delta(spec.target.path).to_pylist(), ["id"])
                assert rows == _expected(table), tag
    assert {op for op, *_ in table.changes} == {"r", "c", "u", "d"}


CURRENCIES = ("EUR", "USD", "GBP")


def _rate_changes(rng: random.Random, n: int, start: int) -> list[dict[str, Any]]:
    """Changes of a rates table (currency, rate): creates, updates (some at equal
    database times), deletes, and currencies created again after their delete."""
    rows: dict[str, float] = {}
    out, t = [], start
    for i in range(n):
        t += rng.choice([0, 150, 300, 450])
        currency = CURRENCIES[i % 3] if i < 3 else rng.choice(CURRENCIES)
        before = {"currency": currency, "rate": rows[currency]} if currency in rows else None
        if before is not None and rng.random() < 0.2:
            op, after = "d", None
            del rows[currency]
        else:
            op = "r" if i < 3 else ("u" if before else "c")
            rows[currency] = round(rng.uniform(0.5, 2.0), 4)
            after = {"currency": currency, "rate": rows[currency]}
        out.append({"op": op, "before": before, "after": after, "ts": t})
    return out


def _rate_records(changes: list[dict[str, Any]], offsets: list[int]) -> list[Record]:
    out = []
    for c in changes:
        currency = (c["before"] or c["after"])["currency"]
        p = CURRENCIES.index(currency) % PARTITIONS
        c["_at"] = (p, offsets[p])
        offsets[p] += 1
        envelope = {
            "before": c["before"],
            "after": c["after"],
            "op": c["op"],
            "ts_ms": c["ts"] + 3,
            "source": {"ts_ms": c["ts"], "connector": "mysql", "table": "rates"},
        }
        if len(out) % 2:
            envelope = {"schema": CONNECT_SCHEMA, "payload": envelope}
        key = json.dumps({"currency": currency}).encode()
        out.append(Record(json.dumps(envelope).encode(), p, key, c["ts"] + 3))
        if c["op"] == "d":  # Debezium's tombstone follows each delete
            out.append(Record(None, p, key, c["ts"] + 3))
            offsets[p] += 1
    return out


def test_a_temporal_join_takes_a_debezium_table_as_its_versions(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Orders (JSON events, three partitions, NULL currencies, equal times) joined
    with the version of a Debezium rates table valid at each order's time, placed by
    the database's time (``_source_ts``): an update is a new version, a delete ends
    the currency's until it is created again. Two phases on one checkpoint (a
    restart), batches of 30 records: the rows are the reference's, each once."""
    rng = random.Random("cdc-temporal")
    names = (f"orders-{rng.randrange(10**9)}", f"rates-{rng.randrange(10**9)}")
    for name in names:
        broker.create_topic(name, partitions=PARTITIONS)
    bootstrap = broker.bootstrap_servers

    def source(name: str, topic: str, **keys: Any) -> dict[str, Any]:
        return {
            "name": name,
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "max_offsets_per_trigger": 30,
            **keys,
        }

    spec = PipelineSpec.model_validate(
        {
            "name": "cdc-temporal",
            "sources": [
                source("orders", names[0], schema="order_id BIGINT, currency STRING, ts BIGINT"),
                source("rates", names[1], format="debezium", schema="currency STRING, rate DOUBLE"),
            ],
            "transform": {
                "temporal_join": {
                    "stream_source": "orders",
                    "versions_source": "rates",
                    "stream_keys": ["currency"],
                    "version_keys": ["currency"],
                    "how": "left",
                    "stream_event_time_column": "ts",
                    "version_event_time_column": "_source_ts",
                    "lateness_ms": 3_000,
                    "output_stream_columns": ["order_id", "currency", "ts"],
                    "output_version_columns": {"rate": "rate", "_op": "rate_op"},
                }
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )
    offsets, order_offsets = [0] * PARTITIONS, 0
    changes: list[dict[str, Any]] = []
    orders: list[dict[str, Any]] = []
    start = BASE_MS
    late = 0
    for phase in range(2):
        new_changes = (
            _rate_changes(rng, 40, start - 1_000)
            if phase == 0
            else _rate_changes(rng, 40, max(c["ts"] for c in changes))
        )
        if phase == 1:  # the currencies as phase 0 left them: no fresh snapshot
            for c in new_changes[:3]:
                c["op"] = "u" if c["before"] else "c"
        changes += new_changes
        new_orders = []
        for i in range(150):
            ts = start + i * 100 - (100 if i % 7 == 3 else 0)  # equal times now and then
            new_orders.append(
                {"order_id": len(orders) + i, "currency": rng.choice([*CURRENCIES, None]), "ts": ts}
            )
        orders += new_orders
        start = new_orders[-1]["ts"] + 100
        send(bootstrap, names[1], _rate_records(new_changes, offsets))
        send(
            bootstrap,
            names[0],
            [
                Record(json.dumps(o).encode(), (order_offsets + i) % PARTITIONS, None, o["ts"])
                for i, o in enumerate(new_orders)
            ],
        )
        order_offsets += len(new_orders)
        late += PipelineRunner(spec, spark).run(available_now=True).late_rows
    assert late == 0
    watermark = min(max(o["ts"] for o in orders), max(c["ts"] for c in changes)) - 3_000
    released = [o for o in orders if o["ts"] <= watermark]
    assert 0 < len(released) < len(orders)

    def version(currency: str | None, t: int) -> dict[str, Any] | None:
        if currency is None:
            return None
        earlier = [
            c for c in changes
            if (c["before"] or c["after"])["currency"] == currency and c["ts"] <= t
        ]  # fmt: skip
        last = max(earlier, key=lambda c: (c["ts"], c["_at"]), default=None)
        return None if last is None or last["op"] == "d" else last

    expected = set()
    for o in released:
        v = version(o["currency"], o["ts"])
        expected.add((o["order_id"], o["currency"], o["ts"], v and v["after"]["rate"],
                      v and v["op"]))  # fmt: skip
    assert any(e[3] is None and e[1] is not None for e in expected), "a deleted rate's gap"
    rows = read_delta(spec.target.path).to_pylist()
    got = [(r["order_id"], r["currency"], r["ts"], r["rate"], r["rate_op"]) for r in rows]
    assert len(got) == len(set(got))
    assert set(got) == expected


def test_last_changes_keeps_each_keys_last_change_by_time_then_position() -> None:
    """The batch step alone: random changes of a few keys (NULL among them), equal
    times; each key's row is the one with the highest (time, partition, offset)."""
    import pyarrow as pa

    rng = random.Random("last")
    for _ in range(200):
        rows = [
            {
                "id": rng.choice([1, 2, 3, None]),
                "v": i,
                "__flow_delete": rng.random() < 0.3,
                "__flow_change_ts": rng.choice([None, 5, 6, 7]),
                "__flow_change_partition": 0,
                "__flow_change_offset": i,
            }
            for i in range(rng.randint(0, 12))
        ]
        out = last_changes(pa.Table.from_pylist(rows) if rows else _empty(), ("id",))
        expected: dict[Any, Row] = {}
        for r in sorted(rows, key=lambda r: (r["__flow_change_ts"] or -1, r["v"])):
            expected[r["id"]] = {"id": r["id"], "v": r["v"], "__flow_delete": r["__flow_delete"]}
        assert sorted(out.to_pylist(), key=lambda r: r["v"]) == sorted(
            expected.values(), key=lambda r: r["v"]
        )


def _empty() -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array([], pa.int64()),
            "v": pa.array([], pa.int64()),
            "__flow_delete": pa.array([], pa.bool_()),
            "__flow_change_ts": pa.array([], pa.int64()),
            "__flow_change_partition": pa.array([], pa.int64()),
            "__flow_change_offset": pa.array([], pa.int64()),
        }
    )


# -- spec rules ------------------------------------------------------------------------------


def _doc(transform: dict[str, Any], target: str = "delta", **source: Any) -> dict[str, Any]:
    return {
        "name": "cdc-rules",
        "sources": [
            {
                "name": "customers",
                "topic": "customers",
                "bootstrap_servers": "127.0.0.1:9092",
                "format": "debezium",
                "schema": ROW_DDL,
                **source,
            }
        ],
        "transform": transform,
        "target": {"kind": target, **({"path": "/tmp/x"} if target == "delta" else {})}
        | ({"topic": "out", "bootstrap_servers": "127.0.0.1:9092"} if target == "kafka" else {}),
    }


_WINDOW = {
    "kind": "tumbling",
    "duration_ms": 60_000,
    "event_time_column": "_source_ts",
    "group_by": ["name"],
    "aggregations": [{"agg": "count", "as": "n"}],
}


@pytest.mark.parametrize(
    ("transform", "extra", "message"),
    [
        (
            {"window": _WINDOW},
            {},
            "sources[0].format: 'customers' is format = \"debezium\": its records are changes "
            "of a table's rows (an update replaces a row, a delete takes one back), and a "
            "window would read each as one more event: it has no retraction",
        ),
        ({"append": {}}, {}, "and an append would read each as one more event"),
        ({"mirror": {"key": ["nope"]}}, {}, "'nope' is not a column of source 'customers'"),
        ({"mirror": {"key": []}}, {}, "key is empty"),
        (
            {"mirror": {"key": ["id"]}, "sql": "SELECT * FROM customers"},
            {},
            "mirror] with sql is not",
        ),
        ({"mirror": {"key": ["id"]}}, {"target": "kafka"}, 'kind = "kafka" cannot take a mirror'),
        ({"mirror": {"key": ["id"]}}, {"schema": None}, "the Spark DDL of the table's row"),
        ({"mirror": {"key": ["id"]}}, {"schema": ROW_DDL + ", _op STRING"}, "named '_op'"),
        ({"mirror": {"key": ["id"]}}, {"subject": "x"}, "subject is only for Debezium's Avro"),
    ],
)
def test_a_change_source_is_read_only_by_what_takes_changes(
    transform: dict[str, Any], extra: dict[str, Any], message: str
) -> None:
    """A window, a join or an append over changes is refused at validate, with why."""
    from pydantic import ValidationError

    sql = transform.pop("sql", None)
    target = extra.pop("target", "delta")
    doc = _doc({**transform, **({"sql": sql} if sql else {})}, target, **extra)
    if extra.get("schema", ...) is None:
        doc["sources"][0].pop("schema")
    with pytest.raises(ValidationError) as raised:
        PipelineSpec.model_validate(doc)
    assert message in str(raised.value)


def test_a_mirror_spec_is_valid_and_its_plan_says_how() -> None:
    spec = PipelineSpec.model_validate(_doc({"mirror": {"key": ["id"]}}))
    assert spec.transform.mirror is not None
    assert spec.sources[0].changes


@pytest.mark.parametrize("kind", ["delta", "postgres", "iceberg"])
def test_a_mirrors_plan_says_how_each_change_is_read_and_written(
    kind: str, spark: SparkSession, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``validate --plan`` of a mirror: its source line says Debezium's JSON envelopes,
    its mirror line the order of changes, its target line the deletes, each checked
    against the compiled query and the writer (``check_plan_lines``)."""
    from tests.test_plan_description import check_plan_lines

    monkeypatch.setenv("FLOW_DATA_DIR", str(workdir))
    target = {
        "delta": {"kind": "delta", "path": str(workdir / "target")},
        "postgres": {"kind": "postgres", "table": "customers"},
        "iceberg": iceberg_target(workdir, "customers"),
    }[kind]
    spec = _mirror_spec(workdir, "127.0.0.1:9092", "customers", target)
    by_part = check_plan_lines(PipelineRunner(spec, spark), spark)
    read = by_part["source customers"]
    assert "Debezium change events: JSON envelopes, bare or as Kafka Connect's" in read
    assert "Debezium's tombstones (after a delete) are skipped" in read
    assert (
        "last change of a key (by _source_ts, then Kafka position)"
        in by_part["mirror the table by (id)"]
    )
    assert "the last of each key kept" in by_part["the last change of each key"]
    assert "customers:key" in by_part["dead letters"]  # the changes without their key
