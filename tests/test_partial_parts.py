"""An aggregator from outside flow_jobs pre-aggregates with no engine change (issue 48).

The plug-in, ``tests/plugins/variance.py``, is a sample ``variance`` as a user's package
would write it: a partial part of its own (the sum of squares, ``sumsq``) beside two
built-in ones (``nn``, ``dsum``), each registered by name, and an aggregator registered
under ``agg = "variance"``. The unit half (no Spark) checks that the spec takes it, that
the plan asks the reader for its parts and names the plug-in's module for the reader's
processes to import, and that the generic folding (``flow_jobs.kafka.folding``) folds it:
its partials, merged over blocks of any size, give the variance of the rows. The
end-to-end half runs it through the broker and Spark with pre-aggregation on and off:
the same windows, with partials reaching Spark (``tests/test_plugin_aggregator.py``
runs the rest: tiny batches, the state API, ``--plan``, the fingerprint, ``inspect``).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

import tests.plugins.variance  # noqa: F401  registers variance and sumsq
from flow_jobs.combine.decide import foldable
from flow_jobs.kafka.combine import PARTIAL, CombinePlan, partial_type
from flow_jobs.kafka.folding import Folder
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import BASE_MS, assert_same_windows, make_spec, read_windows, send
from tests.test_combine import NOW_MS, PAYLOAD, combine, range_rows, reader_table

# -- the unit half: the generic reader folds it ---------------------------------------------

SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
SPARK_PAYLOAD = StructType(
    [
        StructField("user_id", StringType()),
        StructField("page", StringType()),
        StructField("amount", DoubleType()),
        StructField("qty", LongType()),
        StructField("ts", LongType()),
    ]
)
AGGREGATIONS = [
    {"agg": "variance", "column": "amount", "as": "amount_var"},
    {"agg": "avg", "column": "amount", "as": "amount_avg"},  # shares nn and dsum
    {"agg": "variance", "column": "qty", "as": "qty_var"},
    {"agg": "count", "as": "n"},
]


def _window(workdir: Path, **extra: Any) -> Any:
    window = {
        "kind": "tumbling",
        "duration_ms": 20_000,
        "event_time_column": "ts",
        "lateness_ms": 4_000,
        "group_by": ["user_id"],
        "aggregations": AGGREGATIONS,
        **extra,
    }
    return make_spec(workdir, "localhost:9092", "t", window, schema=SCHEMA)


def test_the_plan_asks_the_reader_for_a_plug_in_aggregators_parts(tmp_path: Path) -> None:
    plan = foldable(_window(tmp_path), SPARK_PAYLOAD)
    assert isinstance(plan, CombinePlan), plan
    assert dict(plan.fields) == {"amount": ("nn", "dsum", "sumsq"), "qty": ("nn", "dsum", "sumsq")}
    assert plan.imports == ("tests.plugins.variance",)  # the reader's processes import it
    assert CombinePlan.from_json(plan.to_json()) == plan
    ptype = partial_type(plan, PAYLOAD)
    assert ptype.names == ["n", "nn0", "dsum0", "sumsq0", "nn1", "dsum1", "sumsq1"]


def test_a_reader_process_finds_the_plug_in_part_through_the_plan(tmp_path: Path) -> None:
    """A fresh process (as Spark starts for the Kafka source) knows the built-in parts
    only; the plan's ``imports`` bring in the plug-in's."""
    plan = foldable(_window(tmp_path), SPARK_PAYLOAD)
    assert isinstance(plan, CombinePlan)
    script = (
        "import sys, pyarrow as pa\n"
        "from flow_jobs.kafka.combine import CombinePlan, partial_type\n"
        "from flow_jobs.partial_parts import PARTIAL_PARTS\n"
        "assert 'sumsq' not in PARTIAL_PARTS\n"
        "plan = CombinePlan.from_json(sys.argv[1])\n"
        "payload = pa.schema([('amount', pa.float64()), ('qty', pa.int64())])\n"
        "print(partial_type(plan, payload).field('sumsq1').type)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, plan.to_json()],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    assert out.stdout.strip() == "double"
    missing = json.loads(plan.to_json()) | {"imports": []}
    failed = subprocess.run(
        [sys.executable, "-c", script, json.dumps(missing)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert failed.returncode != 0
    assert "no partial part 'sumsq' is registered" in failed.stderr


def _rows(seed: int, n: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "user_id": rng.choice(["a", "b", None]),
            "amount": rng.choice([None, 0.5, -2.25, 3.0, 7.75, 100.125]),
            "qty": rng.choice([None, 1, 2, -3, 9]),
            "ts": BASE_MS + rng.randrange(0, 60_000),
        }
        for _ in range(n)
    ]


def _variance(n: int, total: float, squares: float) -> float | None:
    return None if n < 2 else (squares - total * total / n) / (n - 1)


def _merged(partials: pa.Table, pane_ms: int) -> dict[tuple, dict[str, float | None]]:
    """{(pane, user): {field: variance}} of partials merged by key, as Spark merges them
    (the parts summed)."""
    sums: dict[tuple, list[float]] = {}
    for row in partials.filter(partials.column(PARTIAL).is_valid()).to_pylist():
        p, payload = row[PARTIAL], row["_decoded"]
        key = (payload["ts"] // pane_ms, payload["user_id"])
        parts = [p["nn0"], p["dsum0"] or 0.0, p["sumsq0"] or 0.0]
        parts += [p["nn1"], p["dsum1"] or 0.0, p["sumsq1"] or 0.0]
        sums[key] = [a + b for a, b in zip(sums.get(key, [0.0] * 6), parts, strict=True)]
    return {
        k: {"amount": _variance(int(s[0]), s[1], s[2]), "qty": _variance(int(s[3]), s[4], s[5])}
        for k, s in sums.items()
    }


def _reference(rows: list[dict[str, Any]], pane_ms: int) -> dict[tuple, dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["ts"] // pane_ms, r["user_id"]), []).append(r)
    out = {}
    for key, members in groups.items():
        out[key] = {}
        for f in ("amount", "qty"):
            xs = [float(r[f]) for r in members if r[f] is not None]
            out[key][f] = statistics.variance(xs) if len(xs) > 1 else None
    return out


@pytest.mark.parametrize("block", [1, 7, 1_000])
def test_the_generic_folding_folds_a_plug_in_aggregator(tmp_path: Path, block: int) -> None:
    """The reader folds variance's parts, its own among them, in blocks of any size; the
    partials merged give each pane's variance of the rows."""
    plan = foldable(_window(tmp_path), SPARK_PAYLOAD)
    assert isinstance(plan, CombinePlan)
    rows = _rows(block, 120)
    payloads = [json.dumps({k: v for k, v in r.items() if v is not None}).encode() for r in rows]
    table = reader_table(payloads, list(range(len(rows))))
    whole = combine(table, plan, NOW_MS, None)
    assert whole.column(PARTIAL).null_count == 0, "every row folds"
    folder = Folder(plan, PAYLOAD, range_rows(table, plan), NOW_MS, None, block_rows=block)
    emitted = []
    for start in range(0, table.num_rows, 5):
        piece = table.slice(start, 5)
        folder.add(
            piece.column("_decoded").combine_chunks(),
            piece.column("_undecoded").to_numpy().astype(bool),
            piece.column("offset").to_numpy(),
            None,
        )
        if folder.full:
            emitted.append(folder.emit())
    emitted.append(folder.emit())
    blocks = pa.concat_tables([t for t in emitted if t is not None])
    want = _reference(rows, plan.pane_ms)
    for got in (_merged(whole, plan.pane_ms), _merged(blocks, plan.pane_ms)):
        assert got.keys() == want.keys()
        for key, fields in want.items():
            for f, value in fields.items():
                if value is None:
                    assert got[key][f] is None, (key, f)
                else:
                    assert math.isclose(got[key][f], value, rel_tol=1e-9, abs_tol=1e-9), (key, f)


# -- the end-to-end half: the broker, the reader and Spark -----------------------------------


def _stream(rng: random.Random, n: int) -> list[Record]:
    """Values whose sums and squares are exact in DOUBLE (multiples of 1/4, small), so
    folding in any order gives the very same variances."""
    records = []
    for i in range(n):
        ts = BASE_MS + (i // 3) * 500 - rng.choice([0, 0, 1_000])
        doc = {
            "user_id": rng.choice(["a", "b", "c", None]),
            "amount": rng.choice([None, 0.5, -2.25, 3.0, 7.75, 100.125]),
            "qty": rng.choice([None, 1, 2, -3, 9]),
            "ts": ts,
        }
        value = json.dumps({k: v for k, v in doc.items() if v is not None})
        records.append(Record(value=value.encode(), partition=i % 3, timestamp_ms=ts))
    return records


def _run(
    spark: SparkSession, workdir: Path, bootstrap: str, topic: str, pre_aggregate: bool
) -> tuple[dict[tuple, dict], int]:
    tag = "on" if pre_aggregate else "off"
    window = {
        "kind": "tumbling",
        "duration_ms": 20_000,
        "event_time_column": "ts",
        "lateness_ms": 4_000,
        "group_by": ["user_id"],
        "aggregations": AGGREGATIONS,
        "pre_aggregate": pre_aggregate,
    }
    spec = make_spec(workdir / tag, bootstrap, topic, window, name=f"variance-{tag}", schema=SCHEMA)
    runner = PipelineRunner(spec, spark)
    runner.run(available_now=True)
    spark_rows = sum(int(p.get("numInputRows", 0)) for p in runner.progress.progress.values())
    return read_windows(spec.target.path, spec.natural_key()), spark_rows


def test_a_plug_in_aggregator_is_the_same_with_and_without_pre_aggregation(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    topic = f"variance-{random.randrange(10**6)}"
    broker.create_topic(topic, partitions=3)
    records = _stream(random.Random("variance"), 600)
    send(broker.bootstrap_servers, topic, records)

    on, spark_on = _run(spark, workdir, broker.bootstrap_servers, topic, pre_aggregate=True)
    off, spark_off = _run(spark, workdir, broker.bootstrap_servers, topic, pre_aggregate=False)

    assert spark_off == len(records)
    assert spark_on < len(records), "no partial reached Spark: nothing was folded"
    assert_same_windows(on, off)
    # and each window's variance is its rows' (no row is late: disorder < lateness)
    docs = [json.loads(r.value) for r in records]
    for (start, _, user), row in off.items():
        start_ms = int(start.timestamp() * 1000)
        members = [d for d in docs if d.get("user_id") == user and 0 <= d["ts"] - start_ms < 20_000]
        assert row["n"] == len(members), (start, user)
        for field in ("amount", "qty"):
            xs = [float(d[field]) for d in members if field in d]
            want = statistics.variance(xs) if len(xs) > 1 else None
            got = row[f"{field}_var"]
            assert (got is None) == (want is None), (start, user, field)
            if want is not None:
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (start, user, field)
    assert sum(r["amount_var"] is not None for r in off.values()) > 5
