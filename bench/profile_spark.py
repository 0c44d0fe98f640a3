"""What Spark itself costs, without Kafka: ``python -m bench.profile_spark``.

Two measurements on ``local[2]``, each the second of two identical runs:

* **ingest**: a Python data source yielding pre-built ``pyarrow.RecordBatch``es (built
  once, so no reader work is timed) with the Kafka reader's columns, then fewer of them:
  what Spark pays to take a Python source's Arrow batches;
* **aggregate**: ``groupBy(window 60 s, user).agg(...)`` over 2M cached rows (1,000
  users) with count/sum/min/max/avg, then with first/last as ``min_by``/``max_by``: a
  string in an aggregation buffer moves Spark from hash to sort aggregation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

_CHUNK = 50_000
_UTC_US = pa.timestamp("us", tz="UTC")

#: Column groups of the Kafka reader's output (flow_jobs.kafka.schema) and their DDL.
GROUPS = {
    "value": "value BINARY",
    "key": "key BINARY",
    "topic": "topic STRING",
    "position": "partition INT, offset BIGINT, timestamp TIMESTAMP",
    "headers": "headers STRING",
    "stamps": "_event_ts TIMESTAMP, _late TIMESTAMP, _heartbeat TIMESTAMP",
    "decoded": "_decoded STRUCT<user_id: STRING, page: STRING, amount: DOUBLE, ts: BIGINT, "
    "__c: STRING>, _undecoded BOOLEAN",
}


def _batch(groups: list[str]) -> pa.RecordBatch:
    n, i = _CHUNK, np.arange(_CHUNK, dtype=np.int64)
    users = [f"u{k % 1000}" for k in range(n)]
    columns: dict[str, pa.Array] = {}
    if "value" in groups:
        columns["value"] = pa.array(
            [
                b'{"user_id": "%s", "page": "/p/%d", "amount": %.2f, "ts": %d}'
                % (u.encode(), k % 7, k * 0.5, 1_700_000_000_000 + k)
                for k, u in enumerate(users)
            ],
            pa.binary(),
        )
    if "key" in groups:
        columns["key"] = pa.array([u.encode() for u in users], pa.binary())
    if "topic" in groups:
        columns["topic"] = pa.array(["clicks"] * n)
    if "position" in groups:
        columns["partition"] = pa.array(np.zeros(n, np.int32))
        columns["offset"] = pa.array(i)
        columns["timestamp"] = pa.array(i * 1000, _UTC_US)
    if "headers" in groups:
        columns["headers"] = pa.nulls(n, pa.string())
    if "stamps" in groups:
        for name in ("_event_ts", "_late", "_heartbeat"):
            columns[name] = pa.nulls(n, _UTC_US)
    if "decoded" in groups:
        columns["_decoded"] = pa.StructArray.from_arrays(
            [
                pa.array(users),
                pa.array([f"/p/{k % 7}" for k in range(n)]),
                pa.array(i * 0.5),
                pa.array(i + 1_700_000_000_000),
                pa.nulls(n, pa.string()),
            ],
            names=["user_id", "page", "amount", "ts", "__c"],
        )
        columns["_undecoded"] = pa.array(np.zeros(n, bool))
    return pa.RecordBatch.from_pydict(columns)


class _Partition(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        self.index, self.rows = index, rows


class _Reader(DataSourceReader):
    def __init__(self, groups: list[str], rows: int) -> None:
        self.groups, self.rows = groups, rows

    def partitions(self) -> list[_Partition]:
        return [_Partition(0, self.rows // 2), _Partition(1, self.rows // 2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Partition)
        batch = _batch(self.groups)
        for _ in range(partition.rows // _CHUNK):
            yield batch


class PrebuiltArrow(DataSource):
    """``spark.read.format("prebuilt_arrow").option("groups", "value,key,...")``"""

    @classmethod
    def name(cls) -> str:
        return "prebuilt_arrow"

    def schema(self) -> str:
        groups = self.options["groups"].split(",")
        return ", ".join(ddl for name, ddl in GROUPS.items() if name in groups)

    def reader(self, schema: object) -> _Reader:
        return _Reader(self.options["groups"].split(","), int(self.options["rows"]))


def _timed(action) -> float:  # type: ignore[no-untyped-def]
    action()  # the first run warms the JVM's code and the Python workers
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.profile_spark", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(PrebuiltArrow)
    rows = args.rows - args.rows % (2 * _CHUNK)
    print(f"ingest: {rows:,} rows from a Python data source, every column hashed")
    for groups in (",".join(GROUPS), "position,stamps,decoded", "position,decoded", "value,key"):
        frame = spark.read.format("prebuilt_arrow").options(groups=groups, rows=rows).load()
        seconds = _timed(lambda f=frame: f.select(F.sum(F.hash(*f.columns))).collect())
        print(f"  {groups:50s} {rows / seconds:12,.0f} rows/s ({seconds:.2f} s)")

    events = (
        spark.range(rows, numPartitions=2)
        .select(
            F.concat(F.lit("u"), (F.col("id") % 1000).cast("string")).alias("user_id"),
            F.concat(F.lit("/p/"), (F.col("id") % 7).cast("string")).alias("page"),
            (F.col("id") * 0.5).alias("amount"),
            F.timestamp_millis(F.col("id") + 1_700_000_000_000).alias("et"),
            F.col("id").alias("position"),
        )
        .cache()
    )
    events.count()
    numeric = [
        F.count(F.lit(1)),
        F.sum("amount"),
        F.min("amount"),
        F.max("amount"),
        F.avg("amount"),
    ]
    print(f"aggregate: {rows:,} cached rows, 60 s windows by user")
    for label, aggregates in (
        ("count, sum, min, max, avg", numeric),
        (
            "... + first/last (min_by/max_by on time)",
            [*numeric, F.min_by("page", "et"), F.max_by("page", "et")],
        ),
        (
            "... + first/last ordered by (time, position)",
            [
                *numeric,
                F.min_by("page", F.struct("et", "position")),
                F.max_by("page", F.struct("et", "position")),
            ],
        ),
    ):
        query = events.groupBy(F.window("et", "60 seconds"), "user_id").agg(*aggregates)
        plan = query._jdf.queryExecution().executedPlan().toString()
        operator = next(
            k for k in ("ObjectHashAggregate", "SortAggregate", "HashAggregate") if k in plan
        )
        seconds = _timed(lambda q=query: q.write.format("noop").mode("overwrite").save())
        print(f"  {label:50s} {operator:20s} {rows / seconds:12,.0f} rows/s ({seconds:.2f} s)")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
