"""A target kind written in the tests only (``tests/plugins/jsonl_sink.py``) runs end
to end through the sink registry (``flow_jobs.sinks``): on the suite's broker, Spark
session and ledger, in one micro-batch and in tiny ones, it writes each window once,
equal to the reference computed from the events; a replayed batch finds its file and
writes nothing; ``validate --plan`` says how it writes; ``target show`` and a Dagster
materialization read it back.

The plug-in is imported here (the spec's ``plugins = [...]`` key is another change's):
importing registers it, as a spec naming it would."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import tests.plugins.jsonl_sink  # noqa: F401 - registers kind = "jsonl"
from assets.metadata import run_metadata
from flow_jobs.cli import main
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.sinks import SINKS
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.plugins.jsonl_sink import JsonLinesSink, JsonLinesTarget
from tests.support import (
    assert_same_windows,
    clicks_in_phases,
    make_spec,
    phase_window,
    send,
    to_records,
    tumbling_reference,
)
from tests.test_target_show import assert_printed


def jsonl_spec(workdir: Path, bootstrap: str, topic: str, per_batch: int | None) -> Path:
    """A spec file whose target is a folder of JSON lines files."""
    source = {"max_offsets_per_trigger": per_batch} if per_batch else {}
    doc = make_spec(workdir, bootstrap, topic, phase_window(), source=source).to_document()
    doc["target"] = {"kind": "jsonl", "path": str(workdir / "jsonl")}
    path = workdir / "spec.toml"
    path.write_text(PipelineSpec.model_validate(doc).to_toml())
    return path


def read_files(folder: Path, spec: PipelineSpec) -> dict[tuple, dict[str, Any]]:
    """Every file's rows as {natural key: row}, the window bounds as instants; fails on
    a natural key written twice."""
    w = spec.window
    out: dict[tuple, dict[str, Any]] = {}
    for file in sorted(folder.glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for column in (w.window_start_column, w.window_end_column):
                row[column] = datetime.fromisoformat(row[column])
            key = tuple(row[c] for c in spec.natural_key())
            assert key not in out, f"natural key {key} written twice ({file.name})"
            out[key] = {c: v for c, v in row.items() if c not in spec.natural_key()}
    return out


def test_the_plugin_is_a_target_kind_the_spec_reads() -> None:
    assert SINKS.get("jsonl") is JsonLinesSink
    spec = make_spec(Path("/tmp/unused"), "127.0.0.1:9092", "clicks", phase_window())
    doc = {**spec.to_document(), "target": {"kind": "jsonl", "path": "out"}}
    target = PipelineSpec.model_validate(doc).target
    assert isinstance(target, JsonLinesTarget) and target.path == "out"
    reread = PipelineSpec.model_validate(PipelineSpec.model_validate(doc).to_document())
    assert isinstance(reread.target, JsonLinesTarget)  # its kind written back


def test_threads_asking_first_all_find_every_built_in_sink() -> None:
    """The first threads to validate a spec (two pipelines started side by side) each
    wait for the built-ins to register: none finds the registry empty. A fresh
    interpreter, so this process's loaded built-ins do not hide it."""
    script = """
import threading
from flow_jobs.sinks import SINKS
barrier, seen = threading.Barrier(8), []
def ask():
    barrier.wait()
    seen.append(SINKS.names())
threads = [threading.Thread(target=ask) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(set(seen)))
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('delta', 'postgres', 'kafka', 'iceberg')]", done.stdout


@pytest.mark.parametrize("per_batch", [None, 41], ids=["one-batch", "tiny-batches"])
def test_a_sink_from_the_tests_writes_each_window_once_and_reads_back(
    per_batch: int | None,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = clicks_in_phases(f"jsonl-{per_batch}", (400,))[0]
    send(broker.bootstrap_servers, topic, to_records(events))
    path = jsonl_spec(workdir, broker.bootstrap_servers, topic, per_batch)
    folder = workdir / "jsonl"

    # validate --plan: the sink's own line and its one-line summary
    assert main(["validate", str(path), "--plan"]) == 0
    said = capsys.readouterr().out
    assert f"-> JSON lines into {folder}" in said
    (line,) = [line for line in said.splitlines() if line.strip().startswith("target jsonl")]
    assert f"JSON lines in {folder}/<batch id>-<query id>.jsonl" in line
    assert "then the batch's ledger row in the state store" in line  # once_by "target"

    caplog.set_level(logging.INFO, "flow_jobs.progress")
    spec = load_spec(path)
    runner = PipelineRunner(spec, spark)
    summary = runner.run(available_now=True)
    assert summary.input_rows == len(events) and summary.late_rows == 0
    written = read_files(folder, spec)
    assert_same_windows(written, tumbling_reference(events))

    # one file per batch that wrote rows, named by its batch id; the ledger keeps it
    store = LedgerStore.for_spec(spec)
    ledger = [r for r in store.recent_batches(spec.name, 1000) if r["output_rows"]]
    files = sorted(p.name for p in folder.glob("*.jsonl"))
    assert files == sorted(r["target_version"] for r in ledger)
    assert [int(f.split("-")[0]) for f in files] == sorted(r["batch_id"] for r in ledger)
    if per_batch:
        assert len(files) > 2, files
    newest = f"JSON lines file {ledger[-1]['target_version']}"
    assert summary.target_commit_text == newest
    progress = [r.getMessage() for r in caplog.records if "committed in" in r.getMessage()]
    assert progress and f"committed in {newest};" in progress[-1]

    # A crash after the batch's file and before Spark's commit log: the batch is
    # replayed and finds its file.
    commit_log = Path(spec.checkpoint_location(), "commits")
    last = max(int(p.name) for p in commit_log.glob("[0-9]*"))
    assert any(f.startswith(f"{last:08d}-") for f in files), "the replayed batch wrote nothing"
    before = {f: (folder / f).read_bytes() for f in files}
    (commit_log / str(last)).unlink()
    (commit_log / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum sidecar
    replay = PipelineRunner(spec, spark).run(available_now=True)
    assert replay.batches >= 1 and replay.windows_inserted == 0
    assert {f.name: f.read_bytes() for f in folder.glob("*.jsonl")} == before
    assert not list(folder.glob(".*.partial"))

    # target show and Dagster's materialization read it back, newest first
    assert main(["target", "show", str(path), "--limit", "5"]) == 0
    out = capsys.readouterr().out
    key = spec.natural_key()
    assert out.splitlines()[0] == (
        f"pipeline {spec.name}: target JSON lines files in {folder} (last commit {newest}; "
        f"the newest 5 by {', '.join(key)}; times UTC)"
    )
    rows = JsonLinesSink.newest_rows(spec.target, key, None, 1000)
    assert len(rows) == len(written)
    assert_printed(out, rows[:5][::-1], spec.output_columns())
    metadata = run_metadata(runner, spec, summary)
    assert metadata["target"] == f"JSON lines into {folder}"
    assert metadata["target_commit"] == newest
    assert "preview" in metadata
