"""Build the suite's class-data-sharing archive: ``python -m tests.jvm_classes PATH``.

Every Spark JVM the suite starts (the session of each xdist worker, each CLI run and
Dagster run it starts as a process, each cluster driver) loads and verifies the same
thousands of classes from Spark's jars before its first query: a large part of such a
JVM's CPU up to its first result (BENCHMARKS.md, "The suite's own JVMs").
Java's application class-data sharing (JEP 350) keeps them parsed and verified in an
archive that each JVM maps instead. This runs the kinds of query the suite runs (a
Python streaming source, a watermarked window on RocksDB, the state API, a
stream-stream join, an observation, foreachBatch) in a JVM that writes the classes it
loaded to ``PATH`` when it exits (``-XX:ArchiveClassesAtExit``).

``tests/conftest.py`` hands ``-XX:SharedArchiveFile=PATH`` to the suite's JVMs where the
archive exists; a JVM whose JDK or class path differs from this one's maps nothing and
loads its classes as usual (``-Xshare:auto``, Java's default): the archive changes how
fast a JVM starts, never what a query computes.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Every Spark JVM of the suite: C1 only and one collector thread (``tests/conftest.py``
#: says why), and compiled code kept rather than swept for space: each query's generated
#: classes fill the code cache, and its sweeper thread took more CPU than the compiler
#: (BENCHMARKS.md, "How long make test takes").
JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    " -XX:-UseCodeCacheFlushing -XX:ReservedCodeCacheSize=512m"
)
#: A JVM mapping the archive. A JVM that cannot (another class path, another JDK) would
#: print a warning on stdout, where the CLI's output goes: Java's CDS logs are off.
SHARED_CLASSES = "-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def _queries(folder: Path) -> None:
    import pandas as pd
    from pyspark import SparkContext
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
    from pyspark.sql.types import LongType, StructField, StructType

    from flow_jobs.runtime.session import build_spark_session

    class Counter(DataSource):
        @classmethod
        def name(cls) -> str:
            return "jvm_classes_counter"

        def schema(self) -> str:
            return "k string, v bigint, ts timestamp"

        def streamReader(self, schema: StructType) -> DataSourceStreamReader:
            return CounterReader()

    class CounterReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            return {"n": 40}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            return [InputPartition(i) for i in range(start["n"], end["n"], 20)]

        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
            import datetime as dt

            for i in range(partition.value, partition.value + 20):
                yield (f"k{i % 3}", i, dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i))

    class Last(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            schema = StructType([StructField("v", LongType())])
            self.last = handle.getValueState("last", schema)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n = sum(len(frame) for frame in rows)
            self.last.update((n,))
            yield pd.DataFrame({"k": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    spark = build_spark_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.sql.adaptive.enabled": "false",
            # no maintenance thread left to fail as the session stops
            "spark.sql.streaming.stateStore.maintenanceInterval": "1h",
        },
        app_name="jvm-classes",
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Counter)
    rows = folder / "rows"
    rows.mkdir()
    (rows / "a.json").write_text(
        "\n".join(
            json.dumps({"k": f"k{i % 3}", "v": i, "ts": f"2026-01-01T00:00:{i:02d}Z"})
            for i in range(40)
        )
    )
    files = spark.readStream.schema("k string, v bigint, ts timestamp").json(str(rows))
    counted = spark.readStream.format("jvm_classes_counter").load()

    def batch(frame: Any, batch_id: int) -> None:
        frame.toArrow()

    def run(name: str, frame: Any, mode: str = "append") -> None:
        query = (
            frame.writeStream.outputMode(mode)
            .option("checkpointLocation", str(folder / name))
            .foreachBatch(batch)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    windows = (
        counted.observe("jvm_classes", F.collect_list(F.struct("k", "v")).alias("rows"))
        .withWatermark("ts", "5 seconds")
        .groupBy(F.window("ts", "10 seconds"), "k")
        .agg(
            F.count("*"),
            F.try_sum("v"),
            F.max_by("v", "ts"),
            F.approx_count_distinct("v"),
            F.collect_list("v"),
        )
    )
    run("window", windows)
    state = files.groupBy("k").transformWithStateInPandas(
        Last(), "k string, n bigint", "append", "None"
    )
    run("state", state)
    left = files.withWatermark("ts", "5 seconds").alias("l")
    right = counted.withWatermark("ts", "5 seconds").alias("r")
    joined = left.join(
        right,
        F.expr("l.k = r.k AND r.ts BETWEEN l.ts - INTERVAL 2 SECONDS AND l.ts"),
        "leftOuter",
    )
    run("join", joined.select("l.k", "l.v", F.col("r.v").alias("rv")))
    # The JVM writes the archive as it exits, which it does when its stdin closes.
    jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
    spark.stop()
    jvm.stdin.close()
    jvm.wait(timeout=300)


def main(argv: list[str]) -> int:
    (path,) = argv
    target = Path(path).resolve()
    target.unlink(missing_ok=True)
    # CDS's own warnings (a signed jar's classes are left out) are for no one here
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"
    os.environ["SPARK_SUBMIT_OPTS"] = f"{JVM_OPTIONS} -XX:ArchiveClassesAtExit={target} {quiet}"
    with tempfile.TemporaryDirectory() as folder:
        _queries(Path(folder))
    if not target.exists():
        # a JDK without dynamic archives: the suite's JVMs load their classes as usual
        print(f"no class archive written to {target}: the suite runs without one")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
