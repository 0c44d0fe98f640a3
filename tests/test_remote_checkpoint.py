"""A checkpoint behind a URI keeps every guarantee a local one gives.

flow-jobs reads Spark's offset log, commit log and its own marker files from the
checkpoint (``flow_jobs.io.checkpoint_files``). Here the checkpoint is a ``viewfs://``
URI (the ``mounted`` fixture: Hadoop's view file system over a local folder), which
goes through Hadoop's ``FileSystem`` as ``hdfs://`` or ``s3a://`` would: the ledger's
watermarks and offsets, late rows stamped and dead-lettered, pre-aggregation's mark,
the checkpoint's claim, and a reset that never overwrites a window an earlier lineage
closed (docs/spec-reference.md, ``[checkpoint]``) — each compared with a local path.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.combine.decide import MARKER
from flow_jobs.errors import PlanError
from flow_jobs.io.checkpoint_claim import CHECKPOINT_MARKER
from flow_jobs.io.checkpoint_files import (
    HadoopCheckpointFiles,
    LocalCheckpointFiles,
    checkpoint_files,
)
from flow_jobs.io.checkpoint_gateway import (
    gateway_file,
    publish_driver_gateway,
    withdraw_driver_gateway,
)
from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.checkpoint import describe_batch_in_flight, has_committed_batch
from flow_jobs.runtime.idleness import run_start
from flow_jobs.runtime.inspect import inspect_state
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.runtime.session import CHECKPOINT_FILE_MANAGER, LOCAL_CHECKPOINT_FILE_MANAGER
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.conftest import MountedStorage
from tests.reference import reference_windows
from tests.support import (
    BASE_MS,
    assert_same_windows,
    fresh_checkpoint,
    make_spec,
    random_clicks,
    read_windows,
    send,
    stamped_before_first,
    tamper_windows,
    to_records,
)

LATENESS = 3_000
WINDOW_MS = 10_000
#: Arrow decodes every field (a TIMESTAMP field would keep the reader from folding).
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum"), ("max", "qty", "qty_max")]


def _window(**extra: Any) -> dict[str, Any]:
    return {
        "kind": "tumbling",
        "duration_ms": WINDOW_MS,
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
        **extra,
    }


def _at(spec: PipelineSpec, location: str) -> PipelineSpec:
    doc = spec.to_document()
    doc["checkpoint"] = {"location": location}
    return PipelineSpec.model_validate(doc)


def _reference(events: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return reference_windows(
        events,
        time_key="ts",
        duration_ms=WINDOW_MS,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )


# -- the files -----------------------------------------------------------------------


def test_a_local_checkpoint_is_written_through_file_system_a_uri_as_spark_chooses(
    spark: SparkSession, mounted: MountedStorage, workdir: Path
) -> None:
    """A plain-path checkpoint gets Spark's ``FileSystem``-based writer (Hadoop's
    ``FileContext`` starts a process per local file: flow_jobs.runtime.session); a URI
    keeps Spark's default, and a ``[spark] conf`` naming the key wins."""
    local = make_spec(workdir, "127.0.0.1:9", "t", _window(), schema=SCHEMA)
    remote = _at(local, mounted.uri("q"))
    doc = local.to_document()
    chosen = LOCAL_CHECKPOINT_FILE_MANAGER.replace("FileSystemBased", "FileContextBased")
    doc["spark"] = {"conf": {CHECKPOINT_FILE_MANAGER: chosen}}
    writers = [
        PipelineRunner(s, spark).spark.conf.get(CHECKPOINT_FILE_MANAGER, None)
        for s in (local, remote, PipelineSpec.model_validate(doc))
    ]
    assert writers == [LOCAL_CHECKPOINT_FILE_MANAGER, None, chosen]


@pytest.mark.parametrize("where", ["local", "viewfs"])
def test_checkpoint_files_behave_alike_on_a_path_and_behind_a_uri(
    where: str, spark: SparkSession, mounted: MountedStorage, workdir: Path
) -> None:
    if where == "local":
        folder = workdir / "local" / "q1"
        files = checkpoint_files(str(folder))
        assert isinstance(files, LocalCheckpointFiles)
        retired_at = str(folder.parent / "q1.v0-x")
    else:
        folder = mounted.folder / "q1"
        files = checkpoint_files(mounted.uri("q1"), spark)
        assert isinstance(files, HadoopCheckpointFiles)
        retired_at = mounted.uri("q1.v0-x")

    assert not files.exists()
    with pytest.raises(FileNotFoundError):
        files.names("offsets")
    with pytest.raises(FileNotFoundError):
        files.read_text("offsets/0")
    assert files.move_aside(".v0-x") is None  # nothing to move

    files.write_text("offsets/0", 'v1\n{"batchWatermarkMs":0}\n')
    files.write_text("offsets/1", 'v1\n{"batchWatermarkMs":5}\n')
    files.write_text("marker.json", "first\n")
    files.write_text("marker.json", "é, replaced\n")  # over the one there
    assert files.exists() and files.exists("offsets/1") and not files.exists("offsets/2")
    assert sorted(files.names("offsets")) == ["0", "1"]
    assert files.read_text("offsets/1") == 'v1\n{"batchWatermarkMs":5}\n'
    assert files.read_text("marker.json") == "é, replaced\n"
    # The files are where Spark writes the checkpoint, and no staging file is left.
    assert (folder / "marker.json").read_text(encoding="utf-8") == "é, replaced\n"
    assert sorted(n for n in os.listdir(folder) if not n.startswith(".")) == [
        "marker.json",
        "offsets",
    ]
    # Without a session at hand, the default session's Hadoop configuration: the same.
    assert checkpoint_files(files.location).read_text("offsets/0").startswith("v1\n")

    assert files.move_aside(".v0-x") == retired_at
    assert not folder.exists()
    assert (folder.parent / "q1.v0-x" / "offsets" / "1").is_file()


def test_a_missing_file_system_is_refused_naming_the_key_not_taken_for_a_missing_file(
    spark: SparkSession, workdir: Path
) -> None:
    """``s3a://`` without Hadoop's S3A connector (not on this machine's Spark): an
    OSError naming ``checkpoint.location``, never FileNotFoundError (which the callers
    take for "no such batch yet"); a plan that depends on the checkpoint (whether its
    window merges pre-aggregated partials) is refused at start, naming the key."""
    uri = "s3a://bucket/flow/cp"
    with pytest.raises(OSError) as failed:
        checkpoint_files(uri, spark).read_text("offsets/0")
    assert not isinstance(failed.value, FileNotFoundError)
    assert f"checkpoint.location {uri}" in str(failed.value)
    spec = _at(make_spec(workdir, "127.0.0.1:9", "t", _window(), schema=SCHEMA), uri)
    with pytest.raises(PlanError) as refused:
        PipelineRunner(spec, spark)
    assert refused.value.key == "checkpoint.location" and uri in str(refused.value)


def test_the_reader_process_reads_a_remote_checkpoint_through_the_published_gateway(
    spark: SparkSession, mounted: MountedStorage
) -> None:
    """The Kafka reader plans in a Python process of its own: it reaches the driver's
    JVM through the gateway the run publishes, in a file only this user reads; py4j's
    debug log (which echoes every command) never shows the token."""
    uri = mounted.uri("q1")
    checkpoint_files(uri, spark).write_text("offsets/0", 'v1\n{"batchWatermarkMs":7}\n')
    path = publish_driver_gateway(spark, uri)
    assert path == gateway_file(uri)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = json.loads(path.read_text())["auth_token"]
    child = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
        "from flow_jobs.io.checkpoint_gateway import ReaderCheckpoint\n"
        f"reader = ReaderCheckpoint({uri!r})\n"
        "print(reader.files().read_text('offsets/0'), end='')\n"
        "reader.close()\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", child], capture_output=True, text=True, timeout=120
        )
    finally:
        withdraw_driver_gateway(uri)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == 'v1\n{"batchWatermarkMs":7}\n'
    assert token not in done.stdout + done.stderr
    assert not path.exists()


# -- a pipeline on a remote checkpoint ------------------------------------------------


def _phases(seed: str) -> tuple[list[dict], list[dict], list[dict]]:
    """On-time rows of run 1, on-time rows of run 2, and late rows mixed into run 2
    (copies of rows in windows run 1 closed)."""
    rng = random.Random(seed)
    first = random_clicks(rng, 120, step_ms=250, disorder_ms=2_000)
    top = max(e["ts"] for e in first)
    second = random_clicks(rng, 80, step_ms=250, disorder_ms=2_000, start_ms=top + 250)
    closed = [e for e in first if e["ts"] < top - LATENESS - 12_000]
    late = [{**e, "amount": 2.0} for e in rng.sample(closed, 7)]
    mixed = list(second)
    for row in late:
        mixed.insert(rng.randrange(len(mixed) + 1), row)
    return first, mixed, late


def _ledger(spec: PipelineSpec) -> dict[int, dict[str, Any]]:
    rows = LedgerStore.for_spec(spec).recent_batches(spec.name, 1_000)
    columns = ("global_watermark", "start_offsets", "end_offsets", "late_rows", "output_rows")
    return {r["batch_id"]: {c: r[c] for c in columns} for r in rows}


def test_a_remote_checkpoint_ledgers_stamps_and_marks_as_a_local_one(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    mounted: MountedStorage,
) -> None:
    """One pipeline on a local path, the same on a ``viewfs://`` URI, in 50-record
    micro-batches, over two runs (the second with late rows): the same ledger rows
    (each batch's watermark and offsets, from the offset log), the late rows stamped and
    dead-lettered (``late_data = "dlq"``, refused before on a remote checkpoint), the
    reader pre-aggregating (it needs each batch's stamps) on a checkpoint marked for
    it, the claim marker, and what idleness, a failure report and inspect read."""
    window = _window(late_data="dlq")
    options = {"schema": SCHEMA, "source": {"max_offsets_per_trigger": 50}}
    bootstrap = broker.bootstrap_servers
    local = make_spec(workdir / "local", bootstrap, topic, window, name="on-a-path", **options)
    remote = make_spec(workdir / "remote", bootstrap, topic, window, name="on-a-uri", **options)
    remote = _at(remote, mounted.uri("q1"))
    first, second, late = _phases("remote")
    records = to_records(first + second)
    send(broker.bootstrap_servers, topic, records[: len(first)])
    for spec in (local, remote):
        PipelineRunner(spec, spark).run(available_now=True)
    send(broker.bootstrap_servers, topic, records[len(first) :])
    runs = {}
    for spec in (local, remote):
        runner = PipelineRunner(spec, spark)
        assert runner.compiled.pre_aggregates
        summary = runner.run(available_now=True)
        seen = sum(int(p.get("numInputRows", 0)) for p in runner.progress.progress.values())
        runs[spec.name] = summary, seen

    on_path, on_uri = _ledger(local), _ledger(remote)
    assert on_uri == on_path
    assert sum(r["global_watermark"] is not None for r in on_uri.values()) >= len(on_uri) - 1
    assert all(r["end_offsets"] for r in on_uri.values())
    assert any(r["start_offsets"] for r in on_uri.values())

    summary, seen = runs[remote.name]
    assert summary.late_rows == summary.dead_lettered == len(late)
    assert seen < summary.input_rows, "the reader folded nothing: it had no batch stamps"
    dead = read_delta(remote.dead_letter_path()).to_pylist()
    assert sorted(json.loads(r["value"])["ts"] for r in dead) == sorted(e["ts"] for e in late)
    on_time = first + [e for e in second if e not in late]
    assert_same_windows(read_windows(remote.target.path, remote.natural_key()), _reference(on_time))
    assert_same_windows(
        read_windows(remote.target.path, remote.natural_key()),
        read_windows(local.target.path, local.natural_key()),
    )

    written = mounted.folder / "q1"
    assert (written / MARKER).is_file()
    assert json.loads((written / CHECKPOINT_MARKER).read_text())["pipeline"] == remote.name
    uri, path = remote.checkpoint_location(), str(Path(local.checkpoint_location()).resolve())
    assert run_start(remote, uri) == run_start(local, path) != {}
    assert has_committed_batch(uri) and describe_batch_in_flight(uri, remote) is None
    ledger = LedgerStore.for_spec(remote)
    state = inspect_state(spark, remote, store=ledger)
    here = inspect_state(spark, local, store=ledger)
    assert state.batch_id == here.batch_id is not None
    # the pre-aggregated window's buffers, read through the plan compiled on the URI
    assert state.windows and state.note is None and here.note is None
    assert [w.aggregates for w in state.windows] == [w.aggregates for w in here.windows]
    marks = [r["global_watermark"] for r in on_uri.values() if r["global_watermark"]]
    assert state.watermark == max(marks)


# -- reset: a new lineage never overwrites a closed window ----------------------------

REPLAY_FROM_MS = BASE_MS + 40_000  # on a window boundary


@pytest.mark.parametrize("replay", [False, True], ids=["reset", "reset-from"])
def test_a_reset_of_a_remote_checkpoint_never_overwrites_a_closed_window(
    replay: bool,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    mounted: MountedStorage,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``flow-jobs reset`` moves a ``viewfs://`` checkpoint aside, and the new lineage
    re-reads the topic: windows the earlier lineage closed (its watermark in the ledger,
    read from the remote offset log) keep their rows, tampered here to tell; with
    ``--from T`` the windows starting at or after T are rewritten, the others kept."""
    events = random_clicks(random.Random("reset"), 400, step_ms=200, disorder_ms=2_000)
    # Kafka timestamp = event time; in each partition the records stamped before T
    # precede the others (how reset --from finds where to start).
    events = stamped_before_first(events, REPLAY_FROM_MS)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec = _at(
        make_spec(workdir, broker.bootstrap_servers, topic, _window(), name="reset-remote"),
        mounted.uri("q1"),
    )
    key = spec.natural_key()
    PipelineRunner(spec, spark).run(available_now=True)
    reference = _reference(events)
    assert_same_windows(read_windows(spec.target.path, key), reference)

    at = datetime.fromtimestamp(REPLAY_FROM_MS / 1000, tz=UTC)
    starts = (REPLAY_FROM_MS - 20_000, REPLAY_FROM_MS, REPLAY_FROM_MS + 10_000)
    tampered = tamper_windows(spec.target.path, key, starts)
    assert sum(row["n"] == -1 for row in tampered.values()) >= 6

    spec_file = workdir / "reset-remote.toml"
    spec_file.write_text(spec.to_toml(), encoding="utf-8")
    command = ["reset", str(spec_file)] + (["--from", at.isoformat()] if replay else [])
    assert main(command) == 0, capsys.readouterr().err
    assert "state version 1 starts with the next run" in capsys.readouterr().out
    retired = [p.name for p in mounted.folder.iterdir() if p.name.startswith("q1.v0-")]
    assert not (mounted.folder / "q1").exists() and len(retired) == 1
    assert (mounted.folder / retired[0] / "commits").is_dir()

    # The retired URI is not reused in this JVM (tests.support.fresh_checkpoint).
    after = fresh_checkpoint(spec, "after")
    assert after.checkpoint_location() == mounted.uri("q1-after")
    PipelineRunner(after, spark).run(available_now=True)

    rewritten = {k: row for k, row in reference.items() if replay and k[0] >= at}
    kept = {k: row for k, row in tampered.items() if k not in rewritten}
    assert_same_windows(read_windows(spec.target.path, key), {**kept, **rewritten})
