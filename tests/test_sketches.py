"""count_distinct sketches are Apache DataSketches HLL: downstream rollups can union
windows with the datasketches package, and both engines write the same format."""

from __future__ import annotations

import json
import random
from pathlib import Path

from datasketches import hll_sketch, hll_union, tgt_hll_type
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import BASE_MS, make_spec, read_windows, send

PRECISION = 12  # standard error 1.04 / sqrt(2^12) = 1.6%
TOLERANCE = 0.05  # 3 standard errors


def test_two_windows_sketches_merge_to_the_union(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    minute = BASE_MS - BASE_MS % 60_000
    rng = random.Random(12)
    first = [rng.randrange(0, 30_000) for _ in range(6_000)]
    second = [rng.randrange(20_000, 60_000) for _ in range(8_000)]
    rows = [(v, minute + i % 50_000) for i, v in enumerate(first)]
    rows += [(v, minute + 60_000 + i % 50_000) for i, v in enumerate(second)]
    rows.append((0, minute + 190_000))  # closes both windows
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(json.dumps({"visitor": v, "ts": ts}).encode(), i % 2, timestamp_ms=ts)
            for i, (v, ts) in enumerate(rows)
        ],
    )
    window = {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "event_time_column": "ts",
        "aggregations": [
            {
                "agg": "count_distinct",
                "column": "visitor",
                "as": "visitors",
                "hll_precision": PRECISION,
                "keep_sketch": True,
            }
        ],
    }
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, window, schema="visitor BIGINT, ts BIGINT"
    )
    PipelineRunner(spec, spark).run(available_now=True)

    windows = sorted(read_windows(spec.target.path, spec.natural_key()).items())
    assert len(windows) == 2
    union = hll_union(PRECISION)
    for (_key, row), exact in zip(windows, (set(first), set(second)), strict=True):
        sketch = hll_sketch.deserialize(row["visitors_sketch"])
        assert (
            sketch.get_estimate() == row["visitors"]
            or round(sketch.get_estimate()) == row["visitors"]
        )
        assert abs(row["visitors"] - len(exact)) <= TOLERANCE * len(exact)
        union.update(sketch)
    exact_union = len(set(first) | set(second))
    assert abs(union.get_result().get_estimate() - exact_union) <= TOLERANCE * exact_union


def test_python_sketches_hash_like_spark(spark: SparkSession) -> None:
    """The state-API engine builds its sketches in Python: the same items must give the
    same hash coupons as Spark's, or a union of both would count every item twice."""
    from pyspark.sql import functions as F

    for values, ddl in (
        ([f"page-{i}" for i in range(5_000)], "STRING"),
        ([i * 7_919 for i in range(5_000)], "BIGINT"),
    ):
        frame = spark.createDataFrame([(v,) for v in values], f"v {ddl}").repartition(3)
        from_spark = hll_sketch.deserialize(frame.agg(F.hll_sketch_agg("v", PRECISION)).first()[0])
        from_python = hll_sketch(PRECISION, tgt_hll_type.HLL_8)
        for v in values:
            from_python.update(v)
        union = hll_union(PRECISION)
        union.update(from_spark)
        union.update(from_python)
        for estimate in (
            from_spark.get_estimate(),
            from_python.get_estimate(),
            union.get_result().get_estimate(),
        ):
            assert abs(estimate - len(values)) <= TOLERANCE * len(values), (ddl, estimate)
