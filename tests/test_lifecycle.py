"""A run's life: errors that remain query-level say where, failures stop the query and
are never hidden by clean-up, metrics never fail a run, the embedded Postgres stops."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli import main
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
    "aggregations": [{"agg": "count", "as": "n"}],
}


def _with(spec: PipelineSpec, **changes: Any) -> PipelineSpec:
    doc = spec.to_document()
    for dotted, value in changes.items():
        node = doc
        *path, last = dotted.split("__")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return PipelineSpec.model_validate(doc)


def test_a_query_level_error_names_pipeline_batch_source_partitions_and_cause(
    broker: EmbeddedBroker, topic: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(2), 200)))
    window = {
        **WINDOW,
        "aggregations": [
            {
                "agg": "reduce",
                "column": "page",
                "as": "trail",
                "initializer": "tests.reduce_fns:start_trail",
                "reducer": "tests.reduce_fns:refuse",
                "result_type": "STRING",
            }
        ],
    }
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        name="refuser",
        source={"max_offsets_per_trigger": 50},
    )
    spec_file = workdir / "spec.toml"
    spec_file.write_text(spec.to_toml())
    assert main(["run", str(spec_file), "--available-now"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    # 50 offsets a batch over two partitions: batch N reads 25 of each, from 25 * N.
    found = re.fullmatch(
        rf"error: pipeline refuser failed in micro-batch (\d+) \(clicks: {topic}\[0\] "
        rf"offsets (\d+)\.\.(\d+); clicks: {topic}\[1\] offsets (\d+)\.\.(\d+)\): "
        r"ValueError: reducer refuses .*",
        lines[0],
    )
    assert found, lines[0]
    batch, *bounds = map(int, found.groups())
    assert batch >= 1 and bounds == [25 * batch, 25 * batch + 24] * 2, lines[0]


class _Boom(RuntimeError):
    pass


def test_a_failing_await_loop_stops_the_query_and_keeps_the_original_error(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(3), 50)))
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW, name="await-fails")
    runner = PipelineRunner(spec, spark)

    class FailingLookup:  # a lookup refresh that fails between micro-batches
        def refresh_if_due(self, _spark: SparkSession) -> bool:
            raise _Boom("lookup refresh failed")

    object.__setattr__(runner.compiled, "lookups", (FailingLookup(),))
    original_target = runner._target

    def target_whose_close_fails(ledger: Any) -> Any:
        target = original_target(ledger)

        def close() -> None:
            raise OSError("close failed too")

        target.close = close
        return target

    runner._target = target_whose_close_fails  # type: ignore[method-assign]
    with pytest.raises(_Boom, match="lookup refresh failed"):
        runner.run()  # continuous: only the failure ends it
    assert not [q for q in runner.spark.streams.active if q.name == spec.name]


def test_a_metrics_port_in_use_does_not_fail_the_run(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(4), 60)))
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = _with(
            make_spec(workdir, broker.bootstrap_servers, topic, WINDOW, name="metrics-busy"),
            runtime__metrics_port=port,
        )
        summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.input_rows == 60


def _holder(data_dir: Path, then: str) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from flow_jobs.ledger.location import embedded_url
        print(embedded_url({str(data_dir)!r}), flush=True)
        {then}
        """
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )


def _postmaster_alive(data_dir: Path) -> bool:
    import psutil

    pid_file = data_dir / "postmaster.pid"
    if not pid_file.exists():
        return False
    return psutil.pid_exists(int(pid_file.read_text().splitlines()[0]))


def test_embedded_postgres_stops_after_a_hard_killed_holder(tmp_path: Path) -> None:
    data_dir = tmp_path / "pg"
    killed = _holder(data_dir, "os.kill(os.getpid(), signal.SIGKILL)")  # no atexit
    assert killed.stdout is not None and killed.stdout.readline().startswith("postgresql://")
    assert killed.wait(60) == -signal.SIGKILL
    assert _postmaster_alive(data_dir)
    assert json.loads((data_dir / ".handle_pids.json").read_text()) == [killed.pid]

    clean = _holder(data_dir, "sys.exit(0)")  # a later run that exits normally
    assert clean.stdout is not None and clean.stdout.readline().startswith("postgresql://")
    assert clean.wait(60) == 0
    assert not _postmaster_alive(data_dir)  # the last live holder stopped it


def test_a_remote_checkpoint_stays_a_uri(spark: SparkSession, workdir: Path) -> None:
    spec = make_spec(workdir, "127.0.0.1:9", "t", WINDOW)
    for uri in ("s3a://bucket/flow/cp", "abfss://c@account.dfs.core.windows.net/cp"):
        remote = _with(spec, checkpoint__location=uri)
        assert PipelineRunner(remote, spark).checkpoint == uri
    local = _with(spec, checkpoint__location="relative/cp")
    assert PipelineRunner(local, spark).checkpoint == str(Path("relative/cp").resolve())


def test_a_file_uri_checkpoint_runs_and_resumes(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(6), 80)))
    uri = (workdir / "cp").as_uri()
    spec = _with(
        make_spec(workdir, broker.bootstrap_servers, topic, WINDOW, name="file-uri"),
        checkpoint__location=uri,
    )
    first = PipelineRunner(spec, spark).run(available_now=True)
    assert first.input_rows == 80 and (workdir / "cp" / "commits").is_dir()
    again = PipelineRunner(spec, spark).run(available_now=True)
    assert again.input_rows == 0  # resumed from the same checkpoint
