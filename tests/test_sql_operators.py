"""Top-N, deduplication, the interval join and the temporal join written in Flink SQL
(issue 49), end to end beside the TOML the spec reference gives as their twins: the
same messy topics (several partitions, equal times, disorder, NULL keys, duplicates,
late rows), each spelling in tiny micro-batches and as one; the targets are identical
row for row and the fingerprints equal. The rules themselves are held to independent
references in tests/test_top_n.py, tests/test_dedup.py, tests/test_joins.py and
tests/test_temporal_join.py."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import load_spec
from flow_jobs.spec.fingerprint import fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import BASE_MS, random_clicks, send, to_records
from tests.test_joins import _closing, _streams
from tests.test_temporal_join import Topic, _orders, _rates

CLICKS = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"


def _source_sql(
    name: str, topic: str, bootstrap: str, columns: str, lateness_ms: int, tiny: bool
) -> str:
    trigger = ", 'max_offsets_per_trigger' = '50'" if tiny else ""
    return (
        f"CREATE TABLE {name} ({columns},\n  WATERMARK FOR ts AS ts - INTERVAL "
        f"'{lateness_ms}' MILLISECOND)\nWITH ('topic' = '{topic}', 'bootstrap_servers' = "
        f"'{bootstrap}'{trigger});\n"
    )


def _paths_sql(workdir: Path, name: str) -> str:
    return (
        f"SET 'pipeline.name' = '{name}';\n"
        f"SET 'checkpoint.location' = '{workdir}/checkpoint';\n"
        f"SET 'dead_letter.path' = '{workdir}/dead_letters';\n"
        f"CREATE TABLE out WITH ('kind' = 'delta', 'path' = '{workdir}/target');\n"
    )


def _source_toml(name: str, topic: str, bootstrap: str, columns: str, tiny: bool) -> dict[str, Any]:
    return {
        "name": name,
        "topic": topic,
        "bootstrap_servers": bootstrap,
        "schema": columns,
        **({"max_offsets_per_trigger": 50} if tiny else {}),
    }


def _paths_toml(workdir: Path, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "target": {"kind": "delta", "path": f"{workdir}/target"},
        "checkpoint": {"location": f"{workdir}/checkpoint"},
        "dead_letter": {"path": f"{workdir}/dead_letters"},
    }


def _write(workdir: Path, name: str, text: str) -> PipelineSpec:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / name).write_text(text)
    return load_spec(workdir / name)


def _rows(path: str) -> list[tuple]:
    """The target's rows, sorted; NaN as a string (it equals nothing, itself included)."""

    def plain(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    table = read_delta(path).to_pylist()
    return sorted((tuple(plain(v) for v in row.values()) for row in table), key=repr)


def _same_tables(spark: SparkSession, runs: dict[str, PipelineSpec]) -> None:
    """Each spelling's run equals its twin's of the same cut (``sql-tiny`` against
    ``toml-tiny``), and the fingerprints are equal."""
    tables = {}
    for name, spec in runs.items():
        summary = PipelineRunner(spec, spark).run(available_now=True)
        if name.endswith("tiny"):
            assert summary.batches >= 4, (name, summary)
        tables[name] = _rows(spec.target.path)
    for cut in ("tiny", "one"):
        assert tables[f"toml-{cut}"], f"the {cut} twin wrote nothing: the test proves nothing"
        assert tables[f"sql-{cut}"] == tables[f"toml-{cut}"], cut
        assert fingerprint_of(fingerprint_fields(runs[f"sql-{cut}"])) == fingerprint_of(
            fingerprint_fields(runs[f"toml-{cut}"])
        )


@pytest.mark.parametrize("case", ["top_n", "dedup"])
def test_window_top_n_and_dedup_in_sql_equal_their_twins(
    case: str, spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    rng = random.Random(f"sql-{case}")
    topic = f"sql-{case.replace('_', '-')}-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=3)
    events = random_clicks(
        rng, 300, step_ms=200, disorder_ms=1_500, keys=("a", "b", "c", "d", "e", None)
    )
    for i in range(3, len(events)):  # equal times, and records sent twice (dedup's work)
        if rng.random() < 0.1:
            events[i]["ts"] = events[i - 1]["ts"]
        if rng.random() < 0.1:
            events[i] = {**events[i - 2], "amount": events[i]["amount"]}
    events += random_clicks(rng, 4, step_ms=50, start_ms=BASE_MS)  # late in tiny batches
    send(broker.bootstrap_servers, topic, to_records(events, partitions=3))
    bootstrap = broker.bootstrap_servers
    aggregates = "COUNT(*) AS n, SUM(amount) AS amount_sum"
    tvf = "TUMBLE(TABLE {t}, DESCRIPTOR(ts), INTERVAL '6' SECOND)"
    runs: dict[str, PipelineSpec] = {}
    for tiny in (True, False):
        cut = "tiny" if tiny else "one"
        here = workdir / f"sql-{cut}"
        text = _paths_sql(here, f"sql-{case}") + _source_sql(
            "clicks", topic, bootstrap, CLICKS, 2_000, tiny
        )
        window: dict[str, Any] = {
            "kind": "tumbling",
            "duration_ms": 6_000,
            "event_time_column": "ts",
            "lateness_ms": 2_000,
            "group_by": ["user_id"],
            "aggregations": [
                {"agg": "count", "as": "n"},
                {"agg": "sum", "column": "amount", "as": "amount_sum"},
            ],
        }
        transform: dict[str, Any] = {"window": window}
        windowed = (
            f"SELECT window_start, window_end, user_id, {aggregates} FROM TABLE({{t}}) "
            "GROUP BY window_start, window_end, user_id"
        )
        if case == "top_n":
            text += (
                "INSERT INTO out SELECT window_start, window_end, user_id, n, amount_sum FROM (\n"
                "  SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
                "ORDER BY n DESC, amount_sum ASC) AS rownum\n"
                f"  FROM ({windowed.format(t=tvf.format(t='clicks'))})\n) WHERE rownum <= 2;\n"
            )
            window["top_n"] = {"n": 2, "order_by": ["n DESC", "amount_sum ASC"]}
        else:
            text += (
                "SET 'transform.dedup.once.within_ms' = '1500';\n"
                "CREATE VIEW once AS SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
                "user_id, page ORDER BY ts ASC) AS rn FROM clicks) WHERE rn = 1;\n"
                f"INSERT INTO out {windowed.format(t=tvf.format(t='once'))};\n"
            )
            transform["dedup"] = [
                {"source": "clicks", "keys": ["user_id", "page"], "within_ms": 1500}
            ]
        runs[f"sql-{cut}"] = _write(here, "p.sql", text)
        twin = workdir / f"toml-{cut}"
        document = {
            **_paths_toml(twin, f"sql-{case}"),
            "sources": [_source_toml("clicks", topic, bootstrap, CLICKS, tiny)],
            "transform": transform,
        }
        runs[f"toml-{cut}"] = _write(twin, "p.toml", tomli_w.dumps(document))
    _same_tables(spark, runs)


def test_an_interval_join_in_sql_equals_its_twin(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    rng = random.Random("sql-join")
    orders_topic, payments_topic = (f"sql-join-{s}-{rng.randrange(1 << 30):x}" for s in "op")
    orders, payments = _streams(rng, 200)
    close_l, close_r = _closing()
    for topic, rows in ((orders_topic, [*orders, close_l]), (payments_topic, [*payments, close_r])):
        broker.create_topic(topic, partitions=2)
        records = [
            Record(json.dumps(r).encode(), i % 2, timestamp_ms=r["ts"]) for i, r in enumerate(rows)
        ]
        send(broker.bootstrap_servers, topic, records)
    bootstrap = broker.bootstrap_servers
    order_columns = "order_id STRING, region STRING, amount DOUBLE, ts BIGINT"
    payment_columns = "order_id STRING, region STRING, paid DOUBLE, ts BIGINT"
    runs: dict[str, PipelineSpec] = {}
    for tiny in (True, False):
        cut = "tiny" if tiny else "one"
        here = workdir / f"sql-{cut}"
        text = (
            _paths_sql(here, "sql-join")
            + _source_sql("orders", orders_topic, bootstrap, order_columns, 10_000, tiny)
            + _source_sql("payments", payments_topic, bootstrap, payment_columns, 10_000, tiny)
            + "INSERT INTO out SELECT o.order_id, o.region, o.amount, o.ts, p.paid, "
            "p.ts AS paid_ts\n"
            "FROM orders AS o FULL OUTER JOIN payments AS p\n"
            "  ON o.order_id = p.order_id AND o.region = p.region\n"
            "  AND p.ts BETWEEN o.ts - INTERVAL '1' SECOND AND o.ts + INTERVAL '5' SECOND;\n"
        )
        runs[f"sql-{cut}"] = _write(here, "p.sql", text)
        twin = workdir / f"toml-{cut}"
        document = {
            **_paths_toml(twin, "sql-join"),
            "sources": [
                _source_toml("orders", orders_topic, bootstrap, order_columns, tiny),
                _source_toml("payments", payments_topic, bootstrap, payment_columns, tiny),
            ],
            "transform": {
                "join": {
                    "kind": "stream_stream_join",
                    "left_source": "orders",
                    "right_source": "payments",
                    "left_keys": ["order_id", "region"],
                    "right_keys": ["order_id", "region"],
                    "how": "full",
                    "lower_bound_ms": -1_000,
                    "upper_bound_ms": 5_000,
                    "event_time_column": "ts",
                    "lateness_ms": 10_000,
                    "output_left_columns": ["order_id", "region", "amount", "ts"],
                    "output_right_columns": {"paid": "paid", "ts": "paid_ts"},
                }
            },
        }
        runs[f"toml-{cut}"] = _write(twin, "p.toml", tomli_w.dumps(document))
    _same_tables(spark, runs)


def test_a_temporal_join_in_sql_equals_its_twin(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    rng = random.Random("sql-temporal")
    names = [f"sql-temporal-{s}-{rng.randrange(1 << 30):x}" for s in ("orders", "rates")]
    orders = _orders(rng, 160, BASE_MS + 2_000, 1)
    rates = _rates(rng, 40, BASE_MS, 500)
    for name, events, key in ((names[0], orders, "order_id"), (names[1], rates, "currency")):
        broker.create_topic(name, partitions=3)
        send(broker.bootstrap_servers, name, Topic(name).records(events, key))
    bootstrap = broker.bootstrap_servers
    order_columns = "order_id BIGINT, currency STRING, amount DOUBLE, ts BIGINT"
    rate_columns = "currency STRING, rate DOUBLE, ts BIGINT"
    runs: dict[str, PipelineSpec] = {}
    for tiny in (True, False):
        cut = "tiny" if tiny else "one"
        here = workdir / f"sql-{cut}"
        text = (
            _paths_sql(here, "sql-temporal")
            + _source_sql("orders", names[0], bootstrap, order_columns, 2_000, tiny)
            + _source_sql("rates", names[1], bootstrap, rate_columns, 2_000, tiny)
            + "INSERT INTO out SELECT o.order_id, o.currency, o.amount, o.ts, r.rate, "
            "r.ts AS rate_ts\nFROM orders AS o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r\n"
            "  ON o.currency = r.currency;\n"
        )
        runs[f"sql-{cut}"] = _write(here, "p.sql", text)
        twin = workdir / f"toml-{cut}"
        document = {
            **_paths_toml(twin, "sql-temporal"),
            "sources": [
                _source_toml("orders", names[0], bootstrap, order_columns, tiny),
                _source_toml("rates", names[1], bootstrap, rate_columns, tiny),
            ],
            "transform": {
                "temporal_join": {
                    "stream_source": "orders",
                    "versions_source": "rates",
                    "stream_keys": ["currency"],
                    "version_keys": ["currency"],
                    "how": "left",
                    "event_time_column": "ts",
                    "lateness_ms": 2_000,
                    "output_stream_columns": ["order_id", "currency", "amount", "ts"],
                    "output_version_columns": {"rate": "rate", "ts": "rate_ts"},
                }
            },
        }
        runs[f"toml-{cut}"] = _write(twin, "p.toml", tomli_w.dumps(document))
    _same_tables(spark, runs)
