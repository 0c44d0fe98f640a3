"""A target read back with one command (``flow-jobs target show``), and one target
commit said the same way by a batch's progress line, the run's summary, the ledger
(``state show``) and the Dagster materialization, for Delta and Postgres targets."""

from __future__ import annotations

import logging
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable
from psycopg import sql
from pyspark.sql import SparkSession

from assets.metadata import run_metadata
from flow_jobs.cli import main
from flow_jobs.cli_store import _cell
from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.secrets import redact
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import make_spec, random_clicks, send, to_records

WINDOW: dict[str, Any] = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "event_time_column": "ts",
    "lateness_ms": 1_000,
    "group_by": ["user_id"],
    "aggregations": [{"agg": "count", "as": "n"}, {"agg": "sum", "column": "amount",
                                                    "as": "amount_sum"}],
}  # fmt: skip


def spec_file(workdir: Path, spec: PipelineSpec, **tables: Any) -> tuple[PipelineSpec, Path]:
    spec = PipelineSpec.model_validate({**spec.to_document(), **tables})
    path = workdir / "spec.toml"
    path.write_text(spec.to_toml())
    return spec, path


def run(spec: PipelineSpec, spark: SparkSession, caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.INFO, "flow_jobs.progress")
    runner = PipelineRunner(spec, spark, spec_path="spec.toml")
    summary = runner.run(available_now=True)
    lines = [r.getMessage() for r in caplog.records if " batch " in r.getMessage()]
    return runner, summary, lines


def newest(rows: list[dict[str, Any]], key: list[str], n: int) -> list[dict[str, Any]]:
    """The ``n`` rows first by ``key`` descending, NULLs last (as the command orders
    them), in the order it prints them: reversed."""

    def by(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple((row[c] is not None, row[c] if row[c] is not None else "") for c in key)

    return sorted(rows, key=by, reverse=True)[:n][::-1]


def assert_printed(out: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Each row on a line of its own, its cells in the columns' order."""
    lines = [line for line in out.splitlines() if line.strip() and not set(line) <= {"─", " "}]
    body = lines[2:]  # the line saying where, the header
    assert len(body) == len(rows), out
    for line, row in zip(body, rows, strict=True):
        cells = [re.escape(_cell(row[c])) for c in columns]
        assert re.fullmatch(r"\s*" + r"\s+".join(cells) + r"\s*", line), (line, row)


def test_a_postgres_target_reads_back_and_says_its_commit_one_way(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = random_clicks(random.Random(12), 400, step_ms=150)
    send(broker.bootstrap_servers, topic, to_records(events))
    table = f"clicks_{os.environ['FLOW_STATE_STORE_SCHEMA']}"
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW,
                     source={"max_offsets_per_trigger": 150})  # fmt: skip
    spec, path = spec_file(workdir, spec, target={"kind": "postgres", "table": table})
    runner, summary, lines = run(spec, spark, caplog)

    store = LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
    ledger = store.recent_batches(spec.name, 100)
    with psycopg.connect(os.environ["FLOW_STATE_STORE_URL"]) as conn:
        transactions = {
            str(r[0])
            for r in conn.execute(
                sql.SQL("SELECT DISTINCT xmin::text FROM {}").format(sql.Identifier(table))
            )
        }
    written = [r for r in ledger if r["output_rows"]]
    assert len(written) >= 2
    # Each batch that wrote rows committed them in the transaction its ledger row names.
    assert transactions <= {r["target_version"] for r in written}
    newest_commit = f"Postgres transaction {ledger[-1]['target_version']}"
    assert summary.describe().endswith(f"last commit {newest_commit} (input drained)")
    committed = [line.split("committed in ")[1].split(";")[0] for line in lines
                 if "committed in" in line]  # fmt: skip
    assert committed == [f"Postgres transaction {r['target_version']}" for r in written]
    assert run_metadata(runner, spec, summary)["target_commit"] == newest_commit

    assert main(["state", "show", spec.name, "--limit", "100"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == (
        f"pipeline {spec.name}: ledger {store.schema}.batches in {redact(store.url)} (psql "
        "it, or --psql)"
    )
    said = [re.findall(r"Postgres transaction \d+", line) for line in shown]
    assert [s[0] for s in said if s] == [f"Postgres transaction {r['target_version']}"
                                         for r in ledger]  # fmt: skip

    assert main(["target", "show", str(path), "--limit", "5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"pipeline {spec.name}: target Postgres table public.{table} in {redact(store.url)} "
        f"(psql it, or --psql) (last commit {newest_commit}; the newest 5 by window_start, "
        "window_end, user_id; times UTC)"
    )
    with psycopg.connect(store.url, row_factory=psycopg.rows.dict_row) as conn:
        every = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(table))).fetchall()
    assert_printed(out, newest(every, spec.natural_key(), 5), spec.output_columns())

    # --psql: the user's psql on the same database, the target's schema first
    done = subprocess.run(
        [sys.executable, "-m", "flow_jobs.cli", "target", "show", str(path), "--psql"],
        input=f"SELECT count(*) AS windows FROM {table};\n",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^\s*{len(every)}\s*$", done.stdout, re.M), done.stdout


def test_a_delta_target_reads_back_and_says_its_commit_one_way(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = random_clicks(random.Random(13), 300, step_ms=150)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec, path = spec_file(workdir, make_spec(workdir, broker.bootstrap_servers, topic, WINDOW))
    runner, summary, lines = run(spec, spark, caplog)
    version = DeltaTable(spec.target.path).version()
    assert summary.describe().endswith(f"last commit Delta version {version} (input drained)")
    assert run_metadata(runner, spec, summary)["target_commit"] == f"Delta version {version}"
    committed = [line for line in lines if "committed in" in line]
    assert committed and f"committed in Delta version {version};" in committed[-1]

    assert main(["target", "show", str(path), "--limit", "4"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"pipeline {spec.name}: target Delta table {spec.target.path} (last commit Delta "
        f"version {version}; the newest 4 by window_start, window_end, user_id; times UTC)"
    )
    every = read_delta(spec.target.path).to_pylist()
    assert_printed(out, newest(every, spec.natural_key(), 4), spec.output_columns())


def test_a_kafka_target_says_where_to_read_it(
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FLOW_STATE_STORE_URL", postgres_url)
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", "t_kafka_" + os.urandom(4).hex())
    target = {"kind": "kafka", "topic": "windows", "bootstrap_servers": "kafka-1:9092"}
    spec, path = spec_file(tmp_path, make_spec(tmp_path, "b:9092", "clicks", WINDOW),
                           target=target)  # fmt: skip
    assert main(["target", "show", str(path), "--limit", "10"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"pipeline {spec.name}: target Kafka topic windows on kafka-1:9092 (last commit -); "
        "read it with a Kafka consumer, e.g. kcat -C -b kafka-1:9092 -t windows -o -10 -e: "
        "each message's key is its natural key as a JSON array"
    ]
