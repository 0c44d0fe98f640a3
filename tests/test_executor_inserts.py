"""A batch that only inserts is written by the executors (``[target] inserts_from``):
each task writes its rows as a Parquet file into the Delta table's folder and the driver
commits the files' add actions with the batch's application transaction. The table
equals the driver's MERGE on the same data; a replayed batch commits nothing and
leaves no file behind; a table another lineage wrote is MERGEd, never appended to.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from flow_jobs.io.task_files import WRITTEN_BY
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.sinks.delta.files import QUERY_ID, file_stats
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import (
    assert_same_windows,
    drop_last_commit,
    fresh_checkpoint,
    iceberg_target,
    make_spec,
    random_clicks,
    read_windows,
    send,
    to_records,
)

WINDOW = {
    "kind": "tumbling",
    "duration_ms": 5_000,
    "event_time_column": "ts",
    "lateness_ms": 1_000,
    "group_by": ["user_id"],
    "aggregations": [
        {"agg": "count", "as": "n"},
        {"agg": "sum", "column": "amount", "as": "amount_sum"},
        {"agg": "max", "column": "qty", "as": "qty_max"},
    ],
}


def _spec(workdir: Path, bootstrap: str, topic: str, inserts_from: str) -> PipelineSpec:
    doc = make_spec(workdir, bootstrap, topic, WINDOW, name=f"ins-{inserts_from}").to_document()
    doc["sources"][0]["max_offsets_per_trigger"] = 60
    doc["target"]["inserts_from"] = inserts_from
    return PipelineSpec.model_validate(doc)


def _written(path: str) -> tuple[list[dict[str, Any]], set[str]]:
    """The table's commits after its creation, and its data files' names."""
    table = DeltaTable(path)
    commits = [c for c in table.history() if c["operation"] != "CREATE TABLE"]
    return commits, {uri.rsplit("/", 1)[-1] for uri in table.file_uris()}


def test_executors_write_the_windows_the_driver_would_and_a_replay_adds_nothing(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """Windows over keys on two partitions, disorder, NULLs, in batches of 60 records:
    every commit is an executor insert of this query (no MERGE), every file was written
    by a Python worker (not this, the driver's, process) and carries Delta's statistics,
    and the windows equal the driver's MERGE of the same spec. A batch replayed after a
    lost commit log entry commits nothing and leaves no file of its own behind; a fresh
    checkpoint on the same table MERGEs (the table holds another lineage's rows)."""
    events = random_clicks(random.Random("inserts"), 500, step_ms=100, disorder_ms=800)
    send(broker.bootstrap_servers, topic, to_records(events))
    specs = {
        how: _spec(workdir / how, broker.bootstrap_servers, topic, how)
        for how in ("executors", "driver")
    }
    for spec in specs.values():
        PipelineRunner(spec, spark).run(available_now=True)
    path = specs["executors"].target.path
    key = specs["executors"].natural_key()
    windows = read_windows(path, key)
    assert_same_windows(windows, read_windows(specs["driver"].target.path, key))

    commits, files = _written(path)
    assert len(commits) > 3
    assert {c["operation"] for c in commits} == {"WRITE"}
    lineage = {c[QUERY_ID] for c in commits}
    assert len(lineage) == 1
    driver_commits, _ = _written(specs["driver"].target.path)
    assert {c["operation"] for c in driver_commits} == {"MERGE"}
    on_disk = {p.name for p in Path(path).glob("*.parquet")}
    assert on_disk == files  # no file left out of the log
    for name in files:
        metadata = pq.ParquetFile(Path(path, name)).metadata
        writer = json.loads(metadata.metadata[WRITTEN_BY.encode()])
        assert writer["pid"] != os.getpid(), "a file the driver wrote"
    actions = DeltaTable(path).get_add_actions(flatten=True)
    stats = {n: actions.column(n).to_pylist() for n in actions.schema.names}
    assert all(v is not None for v in stats["min.window_start"]), stats
    assert sum(stats["num_records"]) == len(windows)

    # a crash after the commit, before Spark's commit log: the batch runs again
    drop_last_commit(specs["executors"])
    version = DeltaTable(path).version()
    replay = PipelineRunner(specs["executors"], spark).run(available_now=True)
    assert replay.batches >= 1 and replay.windows_inserted == 0
    assert DeltaTable(path).version() == version
    assert {p.name for p in Path(path).glob("*.parquet")} == files
    assert read_windows(path, key) == windows

    fresh = PipelineRunner(fresh_checkpoint(specs["executors"]), spark).run(available_now=True)
    assert fresh.windows_inserted == 0
    assert read_windows(path, key) == windows
    # the fresh lineage's batches went the MERGE way: no insert of its own
    assert {c[QUERY_ID] for c in _written(path)[0] if c["operation"] == "WRITE"} == lineage


def test_executors_write_an_iceberg_table_s_inserts_once(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """The same windows into Iceberg: every snapshot adds the executors' files (read back
    with pyiceberg, equal to the Delta MERGE's windows), and a replayed batch adds none."""
    from flow_jobs.sinks.iceberg.files import WRITE
    from tests.support import iceberg_table, read_iceberg

    events = random_clicks(random.Random("ice-inserts"), 400, step_ms=100, disorder_ms=800)
    send(broker.bootstrap_servers, topic, to_records(events))
    delta = _spec(workdir / "delta", broker.bootstrap_servers, topic, "driver")
    doc = _spec(workdir / "ice", broker.bootstrap_servers, topic, "executors").to_document()
    doc["target"] = iceberg_target(workdir, "inserted")
    ice = PipelineSpec.model_validate(doc)
    for spec in (delta, ice):
        PipelineRunner(spec, spark).run(available_now=True)
    key = delta.natural_key()
    assert_same_windows(read_iceberg(doc["target"], key), read_windows(delta.target.path, key))
    table = iceberg_table(doc["target"])
    snapshots = table.snapshots()
    assert len(snapshots) > 3
    assert {s.summary.get(WRITE) for s in snapshots} == {"files"}
    assert {s.summary.operation.value for s in snapshots} == {"append"}

    drop_last_commit(ice)
    data = Path(table.location().removeprefix("file://"), "data")
    files = {p.name for p in data.glob("*.parquet")}
    replay = PipelineRunner(ice, spark).run(available_now=True)
    assert replay.batches >= 1 and replay.windows_inserted == 0
    assert len(iceberg_table(doc["target"]).snapshots()) == len(snapshots)
    assert {p.name for p in data.glob("*.parquet")} == files


def test_a_file_s_statistics_bound_its_rows_as_delta_compares_them(tmp_path: Path) -> None:
    """Minimums and maximums of integers, instants and dates across row groups, an
    instant's maximum rounded up to the millisecond; NULL counts; no bounds for strings
    or floats (Parquet's leave NaN out)."""
    import pyarrow as pa

    table = pa.table(
        {
            "n": pa.array([3, None, -7, 12], pa.int64()),
            "t": pa.array([1_000_500, 2_000_001, None, 999], pa.timestamp("us", tz="UTC")),
            "d": pa.array([19_000, 19_001, 18_999, None], pa.date32()),
            "x": pa.array([1.5, float("nan"), 0.0, None]),
            "s": pa.array(["b", "a", None, "c"]),
        }
    )
    file = tmp_path / "f.parquet"
    pq.write_table(table, file, row_group_size=2)
    stats = json.loads(file_stats(pq.ParquetFile(file).metadata, 4))
    assert stats["numRecords"] == 4
    assert stats["minValues"] == {"n": -7, "t": "1970-01-01T00:00:00.000Z", "d": "2022-01-07"}
    assert stats["maxValues"] == {"n": 12, "t": "1970-01-01T00:00:02.001Z", "d": "2022-01-09"}
    assert stats["nullCount"] == {"n": 1, "t": 1, "d": 1, "x": 1, "s": 1}
