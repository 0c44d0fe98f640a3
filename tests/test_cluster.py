"""The same specs on a Spark standalone cluster and on ``local[*]`` (issue 14).

The cluster is a master and two workers from the PySpark wheel, each its own JVM with
its own work dir (``flow_jobs_dev.spark_cluster``). Its workers start without the
driver's virtual environment: their Python has neither flow-jobs nor pyarrow, so
executors run only what ``flow-jobs pack`` shipped. A driver process (``tests.cluster_run``)
materializes three pipelines through Dagster with the Spark resource pointed at the
cluster: a tumbling window, a sliding window (the state API) and a stream-stream join.
Their targets must equal the same specs run on the suite's local session, and a
malformed record must land in the dead-letter table and the ledger, with no folder
shared between executors and the driver. The join only inserts: its executors write its
Delta files (a shared ``file://`` table), and its last batch, replayed on the cluster,
commits nothing.

The executors' PATH holds only the archive's ``bin`` and the system folders, and the
driver's Python is not in them: an executor that started anything but the archive's
Python would fail the run here, as on machines without the driver's virtual environment.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.io.task_files import WRITTEN_BY
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.pack import pack
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from flow_jobs_dev.spark_cluster import StandaloneCluster
from tests.support import (
    BASE_MS,
    CLICK_SCHEMA,
    assert_same_windows,
    random_clicks,
    read_windows,
    send,
)

ROOT = Path(__file__).parent.parent
ORDERS = "order_id STRING, amount DOUBLE, ts BIGINT"
PAYMENTS = "order_id STRING, paid DOUBLE, ts BIGINT"
AGGREGATIONS = [
    {"agg": "count", "as": "n"},
    {"agg": "sum", "column": "amount", "as": "amount_sum"},
    {"agg": "max", "column": "amount", "as": "amount_max"},
    {"agg": "first", "column": "page", "as": "first_page"},
    {"agg": "last", "column": "page", "as": "last_page"},
]
WINDOWS = {
    "tumbling": {"kind": "tumbling", "duration_ms": 10_000, "lateness_ms": 2_000},
    "sliding": {"kind": "sliding", "duration_ms": 5_000, "lateness_ms": 2_000},
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneCluster, Path]]:
    root = tmp_path_factory.mktemp("cluster")
    archive = pack(root / "executor.tar.gz", compress_level=1)
    # The suite's JVM options (tests/conftest.py) for the cluster's JVMs too.
    java = os.environ.get("SPARK_SUBMIT_OPTS")
    with StandaloneCluster(root / "spark", 2, 1, java_options=java) as cluster:
        yield cluster, archive


def _clicks(broker: EmbeddedBroker, topic: str) -> str:
    """Keys on three partitions, disorder, equal times, a malformed record and one with
    no event time (two dead letters)."""
    rng = random.Random("cluster")
    events = random_clicks(rng, 600, step_ms=100, disorder_ms=1_500)
    for i in range(5, len(events), 37):
        events[i]["ts"] = events[i - 1]["ts"]  # a tie
    records = [
        Record(json.dumps(e).encode(), i % 3, (e["user_id"] or "").encode(), e["ts"])
        for i, e in enumerate(events)
    ]
    records.insert(200, Record(b'{"user_id": "a", "ts": ', 1, b"a", BASE_MS))
    records.insert(400, Record(b'{"user_id": "b", "amount": 1.0}', 2, b"b", BASE_MS))
    name = f"{topic}-clicks"
    broker.create_topic(name, partitions=3)
    send(broker.bootstrap_servers, name, records)
    return name


def _orders_and_payments(broker: EmbeddedBroker, topic: str) -> tuple[str, str]:
    rng = random.Random("cluster-join")
    orders, payments = [], []
    for i in range(300):
        ts = BASE_MS + i * 300 + rng.randint(0, 1_000)
        orders.append({"order_id": f"o{i % 90}", "amount": float(i), "ts": ts})
        for _ in range(rng.choice([0, 1, 2])):
            payments.append(
                {"order_id": f"o{i % 90}", "paid": 1.5, "ts": ts + rng.randint(-3_000, 6_000)}
            )
    payments.sort(key=lambda p: p["ts"] + rng.randint(0, 1_000))
    close = BASE_MS + 3_600_000  # the watermark passes every row
    orders.append({"order_id": "close", "amount": 0.0, "ts": close})
    payments.append({"order_id": "close-p", "paid": 0.0, "ts": close})
    from tests.support import send

    names = (f"{topic}-orders", f"{topic}-payments")
    for name, rows in zip(names, (orders, payments), strict=True):
        broker.create_topic(name, partitions=2)
        send(
            broker.bootstrap_servers,
            name,
            [
                Record(json.dumps(r).encode(), i % 2, timestamp_ms=r["ts"])
                for i, r in enumerate(rows)
            ],
        )
    return names


def _window_spec(name: str, where: Path, broker: EmbeddedBroker, topic: str, kind: str) -> dict:
    return {
        "name": name,
        "sources": [
            {
                "name": "clicks",
                "topic": topic,
                "bootstrap_servers": broker.bootstrap_servers,
                "schema": CLICK_SCHEMA,
                "max_offsets_per_trigger": 150,
            }
        ],
        "transform": {
            "window": {
                **WINDOWS[kind],
                "event_time_column": "ts",
                "group_by": ["user_id"],
                "aggregations": AGGREGATIONS if kind == "tumbling" else AGGREGATIONS[:3],
            }
        },
        "target": {"kind": "delta", "path": str(where / f"{name}_target")},
        "dead_letter": {"path": str(where / "dead_letters")},
    }


def _join_spec(name: str, where: Path, broker: EmbeddedBroker, topics: tuple[str, str]) -> dict:
    return {
        "name": name,
        "sources": [
            {
                "name": "orders",
                "topic": topics[0],
                "bootstrap_servers": broker.bootstrap_servers,
                "schema": ORDERS,
                "max_offsets_per_trigger": 100,
            },
            {
                "name": "payments",
                "topic": topics[1],
                "bootstrap_servers": broker.bootstrap_servers,
                "schema": PAYMENTS,
                "max_offsets_per_trigger": 100,
            },
        ],
        "transform": {
            "join": {
                "kind": "stream_stream_join",
                "how": "inner",
                "left_source": "orders",
                "right_source": "payments",
                "left_keys": ["order_id"],
                "right_keys": ["order_id"],
                "event_time_column": "ts",
                "lateness_ms": 5_000,
                "time_window_ms": 4_000,
            }
        },
        "target": {"kind": "delta", "path": str(where / f"{name}_target")},
        "dead_letter": {"path": str(where / "dead_letters")},
    }


def _rows(path: str) -> list[tuple]:
    table = read_delta(path)
    return sorted(tuple(sorted(r.items())) for r in table.to_pylist())


def test_three_pipeline_shapes_on_a_cluster_equal_local(
    cluster: tuple[StandaloneCluster, Path],
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
) -> None:
    standalone, archive = cluster
    clicks = _clicks(broker, topic)
    join_topics = _orders_and_payments(broker, topic)
    shapes = ("tumbling", "sliding", "join")

    def doc(shape: str, where: Path, name: str) -> dict[str, Any]:
        if shape == "join":
            return _join_spec(name, where, broker, join_topics)
        return _window_spec(name, where, broker, clicks, shape)

    # Locally, in the suite's session.
    local: dict[str, PipelineSpec] = {}
    for shape in shapes:
        where = workdir / "local" / shape
        spec = PipelineSpec.model_validate(
            {**doc(shape, where, f"local-{shape}"), "checkpoint": {"location": str(where / "cp")}}
        )
        PipelineRunner(spec, spark).run(available_now=True)
        local[shape] = spec

    # On the cluster: spec files that say nothing about it; the checkpoint as a URI
    # (executors write state there; a plain path is refused on a cluster).
    specs = workdir / "pipelines"
    specs.mkdir()
    remote: dict[str, PipelineSpec] = {}
    for shape in shapes:
        where = workdir / "cluster" / shape
        spec_doc = doc(shape, where, f"cluster-{shape}")
        if shape == "join":  # a URI: the executors write its inserts (shared storage)
            spec_doc["target"]["path"] = (where / "cluster-join_target").as_uri()
        spec = PipelineSpec.model_validate(
            {**spec_doc, "checkpoint": {"location": (where / "cp").as_uri()}}
        )
        (specs / f"{shape}.toml").write_text(spec.to_toml())
        remote[shape] = spec
    env = {**os.environ, "PYSPARK_PYTHON": "python-the-executors-must-not-use"}
    args = {
        "master": standalone.master_url,
        "archive": str(archive),
        "executors": standalone.workers,
        "specs": [str(specs / f"{shape}.toml") for shape in shapes],
        "replay": [[str(specs / "join.toml"), str(workdir / "cluster" / "join" / "cp")]],
    }
    log = workdir / "driver.log"
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "tests.cluster_run", json.dumps(args)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=900,
        )
    assert done.returncode == 0, log.read_text()[-5000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["success"], f"{report['failures']} (driver log: {log})"

    # Executors on both workers ran the archive's Python and imported flow_jobs from it.
    executors = report["executors"]
    workers = {Path(e["cwd"]).relative_to(standalone.root).parts[0] for e in executors}
    assert workers == {"worker-0", "worker-1"}, executors
    for e in executors:
        assert e["python"].endswith("flowenv/bin/flow-jobs-python"), e
        assert Path(e["flow_jobs"]).is_relative_to(Path(e["cwd"]) / "flowenv"), e

    for shape in ("tumbling", "sliding"):
        key = local[shape].natural_key()
        assert_same_windows(
            read_windows(remote[shape].target.path, key),
            read_windows(local[shape].target.path, key),
        )
    assert _rows(remote["join"].target.path) == _rows(local["join"].target.path)
    assert len(_rows(local["join"].target.path)) > 100
    # The join only inserts: its rows never came to the driver. Every commit is an
    # insert of files (no MERGE of rows the driver held), each file written by an
    # executor process in a worker's folder.
    joined = DeltaTable(remote["join"].target.path)
    writes = [c for c in joined.history() if c["operation"] != "CREATE TABLE"]
    assert writes and {c["operation"] for c in writes} == {"WRITE"}, writes
    writers = set()
    for uri in joined.file_uris():
        footer = pq.ParquetFile(uri.removeprefix("file://")).metadata.metadata
        written_by = json.loads(footer[WRITTEN_BY.encode()])
        writers.add(Path(written_by["cwd"]).relative_to(standalone.root).parts[0])
    assert writers <= {"worker-0", "worker-1"} and writers, writers
    # its last batch replayed on the cluster (its commit log entry lost) committed nothing
    before, after, replayed = report["replayed"]["cluster-join"]
    assert replayed and before == after == joined.version(), report["replayed"]
    folder = Path(remote["join"].target.path.removeprefix("file://"))
    named = {uri.rsplit("/", 1)[-1] for uri in joined.file_uris()}
    assert {p.name for p in folder.glob("*.parquet")} == named  # the replay's files removed
    # the windows (a plain path on a cluster) are the driver's to write: MERGEs
    windows = DeltaTable(remote["tumbling"].target.path).history()
    assert {c["operation"] for c in windows} == {"CREATE TABLE", "MERGE"}

    # Both dead letters of the tumbling run: in its table, counted in its ledger.
    dead = read_delta(remote["tumbling"].dead_letter_path()).to_pylist()
    assert sorted((d["partition"], d["value"]) for d in dead) == [
        (1, b'{"user_id": "a", "ts": '),
        (2, b'{"user_id": "b", "amount": 1.0}'),
    ]
    ledger = LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
    batches = ledger.recent_batches("cluster-tumbling", 100)
    assert sum(b["dead_lettered_rows"] for b in batches) == 2
    assert not (Path(remote["tumbling"].dead_letter_path() + "_staging")).exists()


def test_a_plain_checkpoint_path_is_refused_on_a_cluster(tmp_path: Path) -> None:
    """Executors write a query's state under its checkpoint: on a cluster a plain path
    would be each node's own disk. Refused at start, naming the key; a URI is taken as
    the user's word that the storage is shared; local masters take any path."""
    from flow_jobs.errors import PlanError
    from flow_jobs.runtime.session import refuse_unshared_paths

    doc = {
        "name": "p",
        "sources": [
            {"name": "clicks", "topic": "t", "bootstrap_servers": "b:9092", "schema": ORDERS}
        ],
        "transform": {
            "window": {
                **WINDOWS["tumbling"],
                "event_time_column": "ts",
                "group_by": ["order_id"],
                "aggregations": [{"agg": "count", "as": "n"}],
            }
        },
        "target": {"kind": "delta", "path": str(tmp_path / "target")},
    }
    plain = PipelineSpec.model_validate({**doc, "checkpoint": {"location": "/data/cp"}})
    with pytest.raises(PlanError, match=r"checkpoint\.location: '/data/cp' is a plain path"):
        refuse_unshared_paths(plain, "spark://master:7077")
    default = PipelineSpec.model_validate(doc)  # ./.flow/p/checkpoint
    with pytest.raises(PlanError, match=r"checkpoint\.location: .*\.flow/p/checkpoint"):
        refuse_unshared_paths(default, "spark://master:7077")
    refuse_unshared_paths(plain, "local[2]")
    shared = PipelineSpec.model_validate({**doc, "checkpoint": {"location": "file:///mnt/cp"}})
    refuse_unshared_paths(shared, "spark://master:7077")
