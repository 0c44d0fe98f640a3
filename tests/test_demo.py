"""``make demo UI=1`` as a user runs it, in the checkout: the demo, then the Dagster UI
until Ctrl-C, which stops everything it started, quietly; and the commands it prints
work as printed."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from flow_jobs_dev.dagster_ui import dagster_client, wait_for_repository
from flow_jobs_dev.demo import flow_jobs_command
from flow_jobs_dev.service import free_port

ROOT = Path(__file__).parent.parent
VENV_BIN = Path(sys.executable).parent
#: The UI is up: the line the demo prints once the code location is served.
READY = "Ctrl-C stops it."


def _environment(venv_on_path: bool) -> dict[str, str]:
    """This process's environment as a shell has it, the virtual environment activated or
    not (`make demo` does not activate it); no test settings for the demo's store."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != VENV_BIN]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOW_")}
    env["PATH"] = os.pathsep.join([str(VENV_BIN), *path] if venv_on_path else path)
    env.pop("VIRTUAL_ENV", None)
    return env


def _lines(process: subprocess.Popen[str], into: list[str], ready: threading.Event) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        into.append(line.rstrip("\n"))
        if READY in line:
            ready.set()


def _running(processes: list[psutil.Process]) -> list[str]:
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(process.cmdline())[:160])
        except psutil.NoSuchProcess:
            continue
    return left


def _embedded_postgres(data_dir: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if process.info["name"] == "postgres" and str(data_dir) in cmdline:
            found.append(process)
    return found


def _stop_what_is_left(demo: subprocess.Popen[str]) -> None:
    """After a failure: the demo stopped as a user would, else killed with everything it
    started (the Dagster server and the broker run in process groups of their own)."""
    if demo.poll() is not None:
        return
    try:
        family = [psutil.Process(demo.pid), *psutil.Process(demo.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    os.killpg(demo.pid, signal.SIGINT)
    try:
        demo.wait(timeout=90)
    except subprocess.TimeoutExpired:
        for process in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        demo.wait()


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """The demo's data folder, open to the user the embedded Postgres runs as when the
    tests run as root (pgserver's ``pgserver``); pytest's own are not."""
    folder = Path(tempfile.mkdtemp(prefix="flow-jobs-demo-"))
    folder.chmod(0o755)
    yield folder / "demo"
    shutil.rmtree(folder, ignore_errors=True)


def test_ctrl_c_stops_the_ui_demo_quietly_and_its_hints_work(data_dir: Path) -> None:
    port = free_port()
    env = _environment(venv_on_path=False)
    demo = subprocess.Popen(
        [sys.executable, "-m", "flow_jobs_dev.demo", "--ui", "--ui-port", str(port),
         "--data-dir", str(data_dir), "--events", "600", "--rows", "3"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal's process group, the demo its leader
    )  # fmt: skip
    lines: list[str] = []
    ready = threading.Event()
    reader = threading.Thread(target=_lines, args=(demo, lines, ready), daemon=True)
    reader.start()
    try:
        while not ready.wait(1):
            assert demo.poll() is None, "\n".join(lines[-60:])
        wait_for_repository(dagster_client(port), demo, timeout_s=5)  # served, not just said
        started = [p for p in psutil.Process(demo.pid).children(recursive=True) if _running([p])]
        postgres = _embedded_postgres(data_dir)
        assert postgres, "the demo's ledger runs on an embedded Postgres under its data dir"
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert all(n in names for n in ("dg dev", "dagster_webserver", "dagster._daemon", "tansu"))
        before = len(lines)
        sent = time.monotonic()
        os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C, to the terminal's process group
        code = demo.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        _stop_what_is_left(demo)
    reader.join(timeout=10)
    output = "\n".join(lines)
    assert code == 0, output[-4000:]
    assert took < 45, f"{took:.1f} s to stop"
    for noise in ("Warning", "WARN", "Traceback"):
        assert noise not in output, output
    after = [line for line in lines[before:] if line.strip()]
    assert len(after) == 1 and after[0].startswith("stopped the Dagster UI"), after
    assert _running(started) == [], "still running after the demo"
    assert _running(postgres) == [] and _embedded_postgres(data_dir) == []

    # Every command the demo printed works as printed, from where it ran, with the
    # environment it ran with (no virtual environment activated).
    hints = [line.removeprefix("$ ") for line in lines if line.startswith("$ ")]
    assert hints and all(".venv/bin/flow-jobs " in h for h in hints), hints
    for hint in hints:
        ran = subprocess.run(hint, shell=True, cwd=ROOT, env=env, capture_output=True, text=True)
        assert ran.returncode == 0, (hint, ran.stdout, ran.stderr)
        assert "pipeline clicks-per-minute: state at micro-batch 1" in ran.stdout, ran.stdout


@pytest.mark.parametrize("activated", [True, False], ids=["venv-activated", "not-activated"])
def test_the_flow_jobs_command_the_demo_prints_runs_this_environment(
    activated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Activated (its bin first on PATH): `flow-jobs`; not: the script's path from the
    checkout. Either runs this environment's CLI in a shell with that PATH."""
    env = _environment(venv_on_path=activated)
    monkeypatch.setenv("PATH", env["PATH"])
    command = flow_jobs_command(ROOT)
    assert command == ("flow-jobs" if activated else ".venv/bin/flow-jobs")
    spec = "pipelines/clicks_per_minute.toml"
    ran = subprocess.run(
        f"{command} validate {shlex.quote(spec)}",
        shell=True,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"{spec}: valid")
