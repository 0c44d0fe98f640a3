"""The shared session's forked planners (tests/forked_workers.py): a forked child runs
a module as ``python -m`` would (arguments, environment, working directory, streams,
exit status, signals), the script hands every other command to the interpreter, and the
session's queries do fork their planners."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from tests.forked_workers import _CLIENT, FORKED_MODULES, ForkedWorkers
from tests.support import make_spec, phase_window, random_clicks, send, to_records

PROBE = """
import json, os, sys, time
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                  "path0": sys.path[0]}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if "--sleep" in sys.argv:
    time.sleep(60)
sys.exit(3)
"""


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[ForkedWorkers]:
    forked = ForkedWorkers(tmp_path)
    yield forked
    forked.close()


def _client(workers: ForkedWorkers, cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-S", "-I", str(_CLIENT), workers.socket_path, "-m", "probe", *args],
        cwd=cwd,
        env={"PROBE": "from the client", "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_forked_child_runs_the_module_as_python_m_would(
    workers: ForkedWorkers, tmp_path: Path
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "probe.py").write_text(PROBE)
    client = _client(workers, cwd, "a", "b c")
    out, err = client.communicate(timeout=60)
    assert client.returncode == 3, err
    seen = json.loads(out)
    assert seen == {
        "argv": ["a", "b c"],
        "cwd": str(cwd),
        "probe": "from the client",
        "path0": str(cwd),
    }
    assert err == "to stderr\n"
    forked = Path(f"{workers.socket_path}.log").read_text().split()
    assert forked[1] == "probe"


def test_sigterm_to_the_client_ends_the_child(workers: ForkedWorkers, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    client = _client(workers, tmp_path, "--sleep")
    assert client.stdout is not None
    json.loads(client.stdout.readline())  # the child runs
    started = time.monotonic()
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 30


def test_the_script_hands_every_other_command_to_the_interpreter(
    workers: ForkedWorkers,
) -> None:
    shown = subprocess.run(
        [str(workers.python), "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == sys.executable
    daemon = subprocess.run(
        [str(workers.python), "-m", "json.tool"],
        input='{"a": 1}',
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(daemon.stdout) == {"a": 1}
    assert not Path(f"{workers.socket_path}.log").exists()  # nothing was forked


def test_the_shared_session_forks_each_query_s_planner(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    python = Path(spark.sparkContext.pythonExec)
    if python == Path(sys.executable):
        pytest.skip("FLOW_TEST_FORKED_WORKERS=0")
    log = python.with_name("forks.sock.log")
    before = log.read_text().count(FORKED_MODULES[0]) if log.exists() else 0
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(1), 50)))
    spec = make_spec(workdir, broker.bootstrap_servers, topic, phase_window())
    result = PipelineRunner(spec, spark).run(available_now=True)
    assert result.batches >= 1
    assert log.read_text().count(FORKED_MODULES[0]) == before + 1
