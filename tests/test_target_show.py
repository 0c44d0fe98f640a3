"""One target commit, said the same way by a batch's progress line, the run's summary,
the ledger (``state show``) and the Dagster materialization, for Delta and Postgres
targets."""

from __future__ import annotations

import logging
import os
import random
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from deltalake import DeltaTable
from psycopg import sql
from pyspark.sql import SparkSession

from assets.metadata import run_metadata
from flow_jobs.cli import main
from flow_jobs.io.state_store import StateStore
from flow_jobs.runtime.runner import PipelineRunner
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


def test_a_postgres_target_says_its_commit_one_way(
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
    spec, _path = spec_file(workdir, spec, target={"kind": "postgres", "table": table})
    runner, summary, lines = run(spec, spark, caplog)

    store = StateStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
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
    said = [re.findall(r"Postgres transaction \d+", line) for line in shown]
    assert [s[0] for s in said if s] == [f"Postgres transaction {r['target_version']}"
                                         for r in ledger]  # fmt: skip


def test_a_delta_target_says_its_commit_one_way(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = random_clicks(random.Random(13), 300, step_ms=150)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec, _path = spec_file(workdir, make_spec(workdir, broker.bootstrap_servers, topic, WINDOW))
    runner, summary, lines = run(spec, spark, caplog)
    version = DeltaTable(spec.target.path).version()
    assert summary.describe().endswith(f"last commit Delta version {version} (input drained)")
    assert run_metadata(runner, spec, summary)["target_commit"] == f"Delta version {version}"
    committed = [line for line in lines if "committed in" in line]
    assert committed and f"committed in Delta version {version};" in committed[-1]
