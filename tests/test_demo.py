"""``make demo UI=1`` as a user runs it, in the checkout: the demo, then the Dagster UI
until Ctrl-C, which stops everything it started, quietly; and the commands it prints
work as printed."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
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


class Terminal:
    """A pseudo-terminal that is the controlling terminal of the session a command runs
    in, as a shell's is: what it writes comes back as lines (its escapes stripped), and
    ``ctrl_c`` types Ctrl-C, which the terminal turns into SIGINT for its foreground
    process group, whichever that is then."""

    def __init__(self, command: list[str], env: dict[str, str], ready: str) -> None:
        self.leader, follower = pty.openpty()

        def take_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            command, cwd=ROOT, env={**env, "COLUMNS": "200", "TERM": "xterm"},
            stdin=follower, stdout=follower, stderr=follower, preexec_fn=take_terminal,
        )  # fmt: skip
        os.close(follower)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(ready,), daemon=True)
        self._reader.start()

    def _read(self, ready: str) -> None:
        pending = ""
        while True:
            try:
                chunk = os.read(self.leader, 65536)
            except OSError:  # every process holding the terminal is gone
                break
            if not chunk:
                break
            pending += chunk.decode(errors="replace")
            *complete, pending = re.split(r"\r?\n", pending)
            for line in complete:
                self.lines.append(ESCAPES.sub("", line).rstrip("\r"))
                if ready in line:
                    self.ready.set()
        if pending:
            self.lines.append(ESCAPES.sub("", pending))

    def ctrl_c(self) -> None:
        os.write(self.leader, b"\x03")

    def close(self) -> None:
        self._reader.join(timeout=10)
        os.close(self.leader)


#: A terminal's control sequences (colours, cursor moves) in what a command writes.
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


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
    """After a failure: make and the demo stopped as a user would, else killed with
    everything they started (the Dagster server and the broker run in process groups of
    their own)."""
    if demo.poll() is not None:
        return
    try:
        family = [psutil.Process(demo.pid), *psutil.Process(demo.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for process in family[:2]:  # make, and the demo in a process group of its own
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGINT)
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
    """``make demo UI=1`` in a terminal, then Ctrl-C typed there: make says nothing of
    it (the demo takes the terminal's foreground for its own process group)."""
    port = free_port()
    env = _environment(venv_on_path=False)
    args = f"--ui-port {port} --data-dir {data_dir} --events 600 --rows 3"
    terminal = Terminal(
        ["make", "--no-print-directory", "demo", "UI=1", f"DEMO_ARGS={args}"], env, READY
    )
    demo, lines = terminal.process, terminal.lines
    try:
        while not terminal.ready.wait(1):
            assert demo.poll() is None, "\n".join(lines[-60:])
        wait_for_repository(dagster_client(port), demo, timeout_s=5)  # served, not just said
        started = [p for p in psutil.Process(demo.pid).children(recursive=True) if _running([p])]
        postgres = _embedded_postgres(data_dir)
        assert postgres, "the demo's ledger runs on an embedded Postgres under its data dir"
        names = " ".join(" ".join(p.cmdline()) for p in started)
        assert all(n in names for n in ("dg dev", "dagster_webserver", "dagster._daemon", "tansu"))
        before = len(lines)
        sent = time.monotonic()
        terminal.ctrl_c()
        code = demo.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        _stop_what_is_left(demo)
        terminal.close()
    output = "\n".join(lines)
    assert code == 0, output[-4000:]
    assert took < 45, f"{took:.1f} s to stop"
    for noise in ("Warning", "WARN", "Traceback", "Interrupt", "make:"):
        assert noise not in output, output
    # (the terminal echoes the Ctrl-C as ^C where the cursor is)
    after = [line.removeprefix("^C") for line in lines[before:] if line.strip("^C \t")]
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
