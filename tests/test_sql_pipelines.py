"""A pipeline in SQL and its TOML twin, end to end (issue 49): for every window kind
with a SQL form, the query in Flink's spelling (a whole ``.sql`` pipeline file) and in
Spark's (``[transform].sql`` of a TOML spec) run on the real stack (the embedded
broker, Spark, Delta) beside the TOML the spec reference gives as their twin, on the
same messy topic: keys over three partitions, equal event times, disorder within the
lateness, NULLs and late rows; in tiny micro-batches and as one. The targets are
identical, row for row, and so are the fingerprints."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import load_spec, toml_twin
from flow_jobs.spec.fingerprint import fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import BASE_MS, random_clicks, read_windows, send, to_records
from tests.test_sql_spelling import _flink_from, _spark_group, _twin

SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
LATENESS_MS = 3_000
#: (kind, a, b) as tests/test_sql_spelling.py's _twin reads them
KINDS = {
    "tumbling": (10_000, 1),
    "hopping": (5_000, 3),
    "cumulate": (5_000, 4),
    "session": (2_000, 1),
}
#: (Flink's spelling, Spark's, the aggregation's TOML)
AGGREGATES = [
    ("COUNT(*)", "count(*)", {"agg": "count"}, "n"),
    ("COUNT(qty)", "count(qty)", {"agg": "count", "column": "qty"}, "n_qty"),
    ("SUM(amount)", "sum(amount)", {"agg": "sum", "column": "amount"}, "amount_sum"),
    ("AVG(amount)", "avg(amount)", {"agg": "avg", "column": "amount"}, "amount_avg"),
    ("MAX(qty)", "max(qty)", {"agg": "max", "column": "qty"}, "qty_max"),
    (
        "FIRST_VALUE(page)",
        "min_by(page, ts) FILTER (WHERE page IS NOT NULL)",
        {"agg": "first", "column": "page"},
        "first_page",
    ),
    (
        "LAST_VALUE(page)",
        "max_by(page, ts) FILTER (WHERE page IS NOT NULL)",
        {"agg": "last", "column": "page"},
        "last_page",
    ),
    (
        "APPROX_COUNT_DISTINCT(page)",
        "approx_count_distinct(page)",
        {"agg": "count_distinct", "column": "page"},
        "pages",
    ),
]
WHERE = "amount IS NULL OR amount > 0"


def _events(rng: random.Random) -> list[dict[str, Any]]:
    """Disorder within the lateness, equal times, NULL keys and values, pauses (so
    sessions end), then a few rows far behind the rest: late in tiny micro-batches."""
    events = random_clicks(rng, 360, step_ms=300, disorder_ms=2_000)
    for i, e in enumerate(events):
        e["ts"] += (i // 90) * 6_000
        if i >= 2 and rng.random() < 0.15:
            e["ts"] = events[i - rng.randint(1, 2)]["ts"]
    late = random_clicks(rng, 6, step_ms=100, start_ms=BASE_MS)
    return events + late


def _flink_file(kind: str, workdir: Path, bootstrap: str, topic: str, tiny: bool) -> Path:
    a, b = KINDS[kind]
    keys = ["user_id"]
    aggregates = ", ".join(f"{f} AS {n}" for f, _, _, n in AGGREGATES)
    trigger = "\n  , 'max_offsets_per_trigger' = '60'" if tiny else ""
    text = f"""
SET 'pipeline.name' = 'sql-{kind}';
SET 'checkpoint.location' = '{workdir}/checkpoint';
SET 'dead_letter.path' = '{workdir}/dead_letters';
CREATE TABLE clicks (
  user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '{LATENESS_MS // 1000}' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{topic}',
  'properties.bootstrap.servers' = '{bootstrap}', 'format' = 'json'{trigger});
CREATE TABLE out WITH ('kind' = 'delta', 'path' = '{workdir}/target');
INSERT INTO out
SELECT window_start, window_end, user_id, {aggregates}
FROM TABLE({_flink_from(kind, a, b, keys)})
WHERE {WHERE}
GROUP BY window_start, window_end, user_id;
"""
    path = workdir / f"{kind}.sql"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _document(
    kind: str, workdir: Path, bootstrap: str, topic: str, tiny: bool, spark: bool
) -> dict[str, Any]:
    a, b = KINDS[kind]
    source: dict[str, Any] = {
        "name": "clicks",
        "topic": topic,
        "bootstrap_servers": bootstrap,
        "format": "json",
        "schema": SCHEMA,
        **({"max_offsets_per_trigger": 60} if tiny else {}),
    }
    if spark:  # Spark's spelling: the whole query in [transform].sql
        struct = "session_window" if kind == "session" else "window"
        aggregates = ", ".join(f"{s} AS {n}" for _, s, _, n in AGGREGATES)
        transform: dict[str, Any] = {
            "sql": f"SELECT {struct}.start AS window_start, {struct}.end AS window_end, "
            f"user_id, {aggregates} FROM clicks WHERE {WHERE} "
            f"GROUP BY {_spark_group(kind, a, b)}, user_id",
            "window": {"lateness_ms": LATENESS_MS},
        }
    else:  # the twin, from the spec reference's table
        transform = {
            "sql": f"SELECT * FROM clicks WHERE {WHERE}",
            "window": {
                **_twin(kind, a, b),
                "event_time_column": "ts",
                "lateness_ms": LATENESS_MS,
                "group_by": ["user_id"],
                "aggregations": [{**t, "as": n} for _, _, t, n in AGGREGATES],
            },
        }
    return {
        "name": f"sql-{kind}",
        "sources": [source],
        "transform": transform,
        "target": {"kind": "delta", "path": str(workdir / "target")},
        "checkpoint": {"location": str(workdir / "checkpoint")},
        "dead_letter": {"path": str(workdir / "dead_letters")},
    }


def _toml(document: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(document))
    return path


def _fingerprint(spec: PipelineSpec) -> str:
    return fingerprint_of(fingerprint_fields(spec))


@pytest.mark.parametrize("kind", list(KINDS))
def test_sql_and_its_toml_twin_write_the_same_table(
    kind: str, spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    rng = random.Random(f"sql-{kind}")
    topic = f"sql-{kind}-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=3)
    send(broker.bootstrap_servers, topic, to_records(_events(rng), partitions=3))
    bootstrap = broker.bootstrap_servers

    runs: dict[str, PipelineSpec] = {}
    for tiny in (True, False):
        cut = "tiny" if tiny else "one"
        runs[f"flink-{cut}"] = load_spec(
            _flink_file(kind, workdir / f"flink-{cut}", bootstrap, topic, tiny)
        )
        twin = workdir / f"toml-{cut}"
        runs[f"toml-{cut}"] = load_spec(
            _toml(_document(kind, twin, bootstrap, topic, tiny, spark=False), twin / "p.toml")
        )
        if kind != "cumulate":  # Spark has no cumulating window
            spelled = workdir / f"spark-{cut}"
            runs[f"spark-{cut}"] = load_spec(
                _toml(_document(kind, spelled, bootstrap, topic, tiny, True), spelled / "p.toml")
            )
    tables = {}
    for name, spec in runs.items():
        summary = PipelineRunner(spec, spark).run(available_now=True)
        if name.endswith("tiny"):
            assert summary.batches >= 5 and summary.late_rows > 0, (name, summary)
        tables[name] = read_windows(spec.target.path, spec.natural_key())
    assert tables["toml-tiny"] and tables["toml-one"]
    for name, table in tables.items():
        cut = name.split("-")[1]
        assert table == tables[f"toml-{cut}"], name
        assert _fingerprint(runs[name]) == _fingerprint(runs[f"toml-{cut}"]), name


def test_validate_plan_of_a_sql_pipeline_prints_its_toml_twin(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    from flow_jobs.cli import main
    from tests.test_sql_spelling import EXAMPLE

    assert main(["validate", "--plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    twin = out.split("as TOML (the same spec, plan and fingerprint; flow-jobs sql-to-toml):\n")[1]
    twin = twin.split("plan (each part of the pipeline -> what runs it):")[0]
    assert twin.strip() == toml_twin(EXAMPLE).strip()
    assert "window: tumbling 60000 ms" in out
    assert "[transform].sql" in out  # the WHERE, a pre-stage the reader folds behind


def test_the_cli_runs_inspects_and_resets_a_sql_pipeline(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``flow-jobs run``, ``inspect`` and ``reset`` take a ``.sql`` file as they take a
    TOML one (in this process, on the shared session)."""
    from flow_jobs.cli import main

    rng = random.Random("sql-cli")
    topic = f"sql-cli-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=2)
    events = random_clicks(rng, 200, step_ms=300, keys=("a", "b"))
    send(broker.bootstrap_servers, topic, to_records(events, partitions=2))
    path = _flink_file("tumbling", workdir, broker.bootstrap_servers, topic, tiny=False)
    assert main(["run", str(path), "--available-now"]) == 0
    out = capsys.readouterr().out
    assert "200 rows in" in out and "input drained" in out, out
    closed = read_windows(str(workdir / "target"), ["window_start", "window_end", "user_id"])
    assert closed
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "sql-tumbling" in out and "open" in out, out
    assert main(["reset", "sql-tumbling", "--spec", str(path)]) == 0
    assert "pipeline sql-tumbling: state version 1 starts with the next run" in (
        capsys.readouterr().out
    )
