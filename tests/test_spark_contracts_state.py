"""Spark's contracts on operator state that flow-jobs relies on, pinned against the Spark
we ship.

Each test states one behaviour of Spark (not of flow-jobs) and names the code in
flow-jobs that depends on it: a Spark upgrade that changes the behaviour fails here,
where the cause is plain. The queries are tiny and read JSON files, one file per
micro-batch, with ``processAllAvailable`` between them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

pytestmark = pytest.mark.spark

# -- state schema ---------------------------------------------------------------------


def _add(folder: Path, n: int, rows: list[dict[str, Any]]) -> None:
    """A file the stream reads whole (written aside, then renamed into the folder)."""
    staging = folder.parent / f".{folder.name}-{n}.tmp"
    staging.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    staging.rename(folder / f"{n:04d}.json")


def _run(
    spark: SparkSession, folder: Path, checkpoint: Path, aggregations: list[Column]
) -> list[dict[str, Any]]:
    """One run of a windowed aggregation over the folder's new files, on ``checkpoint``;
    the rows it emitted (update mode: each batch's changed windows)."""
    emitted: list[dict[str, Any]] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        emitted.extend({c: row[c] for c in ("k", "total", "hi")} for row in batch.collect())

    frame = (
        spark.readStream.schema("k STRING, t TIMESTAMP, x DOUBLE")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .withWatermark("t", "1 hour")  # every window stays open: its buffers in state
        .groupBy(F.window("t", "10 seconds"), "k")
        # No projection after it: a select would push its column order into the
        # aggregate (the optimizer collapses the two), hiding the agg(...) order.
        .agg(*aggregations)
    )
    query = (
        frame.writeStream.outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        query.awaitTermination()
    return emitted


def test_aggregation_buffers_of_one_type_that_swap_places_resume_mixed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark checks a restarted aggregation's state against the new query's by the
    buffers' types, in ``agg(...)`` order, not by their names: ``sum(x)`` and ``max(x)``
    of a DOUBLE swapped are accepted (no ``STATE_STORE_*_SCHEMA_NOT_COMPATIBLE``), and an
    open window then folds new rows into the other aggregate's buffer. What depends on
    it: the fingerprint's ``transform.window.aggregations.order``
    (``flow_jobs.spec.fingerprint``), which refuses such a restart, since Spark won't."""
    folder, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    folder.mkdir()
    total, hi = F.sum("x").alias("total"), F.max("x").alias("hi")
    _add(folder, 0, [{"k": "a", "t": "1970-01-01T00:00:01Z", "x": x} for x in (1.0, 2.0)])
    first = _run(spark, folder, checkpoint, [total, hi])
    assert first == [{"k": "a", "total": 3.0, "hi": 2.0}]

    _add(folder, 1, [{"k": "a", "t": "1970-01-01T00:00:02Z", "x": 2.5}])
    swapped = _run(spark, folder, checkpoint, [hi, total])  # no error: accepted
    # By name it would be total 5.5, hi 2.5. By position the max reads the sum's buffer
    # (max(3.0, 2.5)) and the sum the max's (2.0 + 2.5).
    assert swapped == [{"k": "a", "total": 4.5, "hi": 3.0}]
