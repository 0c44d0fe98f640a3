"""The hand-written PySpark job of ``make bench-compare``, as a script of its own, run in a
new process the way a Spark user runs theirs: ``python -m bench.hand_written '{json}'``.

The job is ``bench.compare.hand_written_window`` (or ``bench.run.hand_written_join``):
the same ``flow_kafka`` source as flow-jobs (spark-sql-kafka cannot be installed here),
``from_json``, ``withWatermark``, ``window`` / ``session_window`` (or the interval join),
append mode, each micro-batch appended to Delta with
``deltalake`` in ``foreachBatch``. Its session has the settings a careful user gives a
local job, the same as flow-jobs' own: ``local[*]``, one shuffle partition per core (not
Spark's 200), no UI; Spark's default state store, or with ``"state_store": "rocksdb"``
flow-jobs' own settings of it (the RocksDB provider, changelog checkpointing). The
last line printed is ``{"rows": N}``, the rows it read.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> int:
    args = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession

    from bench.compare import JOIN_TOPICS, hand_written_join, hand_written_window
    from flow_jobs.kafka.source import KafkaDataSource

    # Spark's Python workers run `python3` from PATH; in an activated virtualenv that is
    # this interpreter, which the bench's subprocess does not activate: say so.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cores = os.cpu_count() or 2
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("hand-written")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    if args.get("state_store") == "rocksdb":  # like for like: flow-jobs' provider
        from flow_jobs.runtime.session import DEFAULT_CONF

        for key, value in DEFAULT_CONF.items():
            if key.startswith("spark.sql.streaming.stateStore."):
                builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(KafkaDataSource)
    bootstrap, workdir, topic = args["bootstrap"], Path(args["workdir"]), args["topic"]
    if args["shape"] == "temporal":  # the topic is the orders topic
        from bench.temporal import hand_written_temporal

        rows = hand_written_temporal(spark, bootstrap, workdir, topic)
    elif args["shape"] in ("join", "join_window"):  # the topic is the orders topic
        payments, window = JOIN_TOPICS[topic][0], args["shape"] == "join_window"
        rows = hand_written_join(spark, bootstrap, workdir, topic, payments, window)["input"]
    else:
        rows = hand_written_window(spark, bootstrap, workdir, args["shape"], topic)
    spark.stop()
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
