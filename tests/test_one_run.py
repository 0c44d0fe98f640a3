"""One run per pipeline (issue 13): the run lock in the state store, and a checkpoint that
belongs to one pipeline — against real Postgres, Kafka and Spark."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli import EXIT_BUSY, main
from flow_jobs.io.checkpoint_claim import CHECKPOINT_MARKER, IncompatibleSpec
from flow_jobs.ledger.run_lock import PipelineBusy
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import make_spec, random_clicks, send, to_records

WINDOW = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "event_time_column": "ts",
    "lateness_ms": 1_000,
    "group_by": ["user_id"],
    "aggregations": [{"agg": "count", "as": "n"}],
}

# Another process that takes the pipeline's run lock, says so, and holds it until killed.
HOLDER = """
import os, sys
from flow_jobs.ledger.store import LedgerStore
store = LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])
with store.run_lock(sys.argv[1], "run"):
    print("held", flush=True)
    sys.stdin.read()
"""


def store() -> LedgerStore:
    return LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])


def wait_for_release(ledger: LedgerStore, name: str) -> None:
    """Block (no polling) until nobody holds the pipeline's lock, then let it go."""
    with psycopg.connect(os.environ["FLOW_STATE_STORE_URL"], autocommit=True) as conn:
        conn.execute("SET lock_timeout = '30s'")
        conn.execute("SELECT pg_advisory_lock(%s)", (ledger.lock_key(name),))
        conn.execute("SELECT pg_advisory_unlock(%s)", (ledger.lock_key(name),))


def test_a_second_run_or_reset_is_refused_while_a_run_holds_the_pipeline(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(5), 100)))
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW)
    spec_file = workdir / "spec.toml"
    spec_file.write_text(spec.to_toml())
    PipelineRunner(spec, spark).run(available_now=True)  # takes and releases the lock
    checkpoint = Path(spec.checkpoint_location())
    batches = store().batch_ids(spec.name)

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, spec.name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"

        runner = PipelineRunner(spec, spark)
        with pytest.raises(PipelineBusy) as busy:
            runner.run(available_now=True)
        message = str(busy.value)
        assert f"pipeline {spec.name} is busy: " in message
        assert f"'flow-jobs run pid {holder.pid}@" in message  # who holds it
        assert "\n" not in message
        assert not spark.streams.active  # refused before any query started
        assert runner.sink is None

        assert main(["run", str(spec_file), "--available-now"]) == EXIT_BUSY
        err = capsys.readouterr().err
        assert err.startswith(f"error: pipeline {spec.name} is busy: ")
        assert main(["reset", str(spec_file)]) == EXIT_BUSY
        assert "reset refused" in capsys.readouterr().err
        assert (checkpoint / "commits").is_dir()  # the reset moved nothing
        assert store().batch_ids(spec.name) == batches
    finally:
        holder.kill()  # no clean exit: Postgres ends the session and its lock
        holder.wait()
    wait_for_release(store(), spec.name)
    assert main(["reset", str(spec_file)]) == 0
    assert not checkpoint.exists()


def test_a_checkpoint_belongs_to_the_pipeline_that_started_it(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(6), 100)))
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW)
    PipelineRunner(spec, spark).run(available_now=True)
    checkpoint = Path(spec.checkpoint_location()).resolve()
    commits = sorted(p.name for p in (checkpoint / "commits").iterdir())

    # Another pipeline name, the same checkpoint location: refused, nothing registered.
    doc = spec.to_document()
    other = PipelineSpec.model_validate({**doc, "name": "another-pipeline"})
    with pytest.raises(IncompatibleSpec) as refused:
        PipelineRunner(other, spark).run(available_now=True)
    message = str(refused.value)
    assert f"checkpoint {checkpoint} belongs to pipeline {spec.name}" in message
    assert "its own [checkpoint] location" in message
    assert not spark.streams.active
    with psycopg.connect(os.environ["FLOW_STATE_STORE_URL"]) as conn:
        names = conn.execute(
            f"SELECT name FROM {os.environ['FLOW_STATE_STORE_SCHEMA']}.pipelines"
        ).fetchall()
    assert names == [(spec.name,)]
    marker = json.loads((checkpoint / CHECKPOINT_MARKER).read_text())
    assert marker["pipeline"] == spec.name

    # The same name with another window, its ledger in another schema (so the ledger
    # has never seen this name): the checkpoint's marker still refuses it.
    doc["transform"]["window"]["duration_ms"] = 5_000
    changed = PipelineSpec.model_validate(doc)
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", "t_" + uuid.uuid4().hex[:12])
    with pytest.raises(IncompatibleSpec) as refused:
        PipelineRunner(changed, spark).run(available_now=True)
    assert f"was started under spec fingerprint {marker['fingerprint']}" in str(refused.value)
    assert sorted(p.name for p in (checkpoint / "commits").iterdir()) == commits
