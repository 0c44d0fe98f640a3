"""``flow-jobs run`` as a user runs it: a real process, its exit code, its signals."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.io.delta import read_delta
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import CLICK_SCHEMA, random_clicks, send, to_records


def _write_spec(workdir: Path, broker: EmbeddedBroker, topic: str) -> Path:
    spec = {
        "name": "cli-check",
        "sources": [
            {
                "name": "clicks",
                "kind": "kafka",
                "topic": topic,
                "bootstrap_servers": broker.bootstrap_servers,
                "schema": CLICK_SCHEMA,
            }
        ],
        "transform": {
            "window": {
                "kind": "tumbling",
                "duration_ms": 10_000,
                "event_time_column": "ts",
                "lateness_ms": 1_000,
                "group_by": ["user_id"],
                "aggregations": [{"agg": "count", "as": "n"}],
            }
        },
        "target": {"kind": "delta", "path": str(workdir / "target")},
        "checkpoint": {"location": str(workdir / "checkpoint")},
        "dead_letter": {"path": str(workdir / "dead_letters")},
        "spark": {
            "master": "local[1]",
            "shuffle_partitions": 1,
            "conf": {"spark.ui.enabled": "false"},
        },
        "runtime": {"trigger_interval_ms": 200},
    }
    path = workdir / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    return path


def _flow_jobs(*args: str) -> list[str]:
    return [sys.executable, "-m", "flow_jobs.cli", *args]


def test_run_available_now_exits_zero(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """In this process, on the shared session (the SIGTERM test below runs the CLI as a
    process of its own, and checks that it exits without a trace)."""
    events = random_clicks(random.Random(3), 300, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec = _write_spec(workdir, broker, topic)
    assert main(["run", str(spec), "--available-now"]) == 0
    out = capsys.readouterr().out
    assert "300 rows in" in out and "input drained" in out
    rows = read_delta(str(workdir / "target"))
    assert sum(rows.column("n").to_pylist()) == sum(
        1
        for e in events
        if e["ts"] // 10_000 * 10_000 + 10_000 <= max(x["ts"] for x in events) - 1_000
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_continuous_run_stops_gracefully_on_a_signal(
    broker: EmbeddedBroker, topic: str, workdir: Path, signum: signal.Signals
) -> None:
    """SIGTERM, or SIGINT as Ctrl-C sends it: the run stops after the batch in flight.
    (PySpark's SparkContext puts its own SIGINT handler in place, which calls into the
    JVM from the signal handler; flow-jobs keeps the handler `run` installed.)"""
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(4), 200)))
    spec = _write_spec(workdir, broker, topic)
    doc = tomllib.loads(spec.read_text())
    doc["runtime"] = {"idle_note_ms": 1_000}  # a heartbeat once it has nothing to read
    spec.write_text(tomli_w.dumps(doc))
    proc = subprocess.Popen(
        _flow_jobs("run", str(spec)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    seen: list[str] = []
    idle = threading.Event()

    def watch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if "cli-check: idle for" in line:
                idle.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        # it idles between triggers, as a long-running job would, and says so
        assert idle.wait(180), "".join(seen)[-3000:]
        proc.send_signal(signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    watcher.join(timeout=10)
    assert proc.stdout is not None
    out = proc.stdout.read()
    assert proc.returncode == 0, "".join(seen)[-3000:]
    assert "stopped on request" in out
    assert any(f"{signum.name} received" in line for line in seen)
    noisy = [
        line for line in seen if re.search(r"threw an exception|Traceback|WARN|reentrant", line)
    ]
    assert not noisy, "".join(seen)[-6000:]
    [heartbeat] = [line for line in seen if "cli-check: idle for" in line][:1]
    assert re.search(
        r"cli-check: idle for \d+ s, no new records; watermark 2023-11-14T\S+Z; "
        r"0 records behind the topics' ends$",
        heartbeat.rstrip(),
    ), heartbeat
