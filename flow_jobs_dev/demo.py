"""``make demo`` (``python -m flow_jobs_dev.demo``): the main job on embedded defaults,
end to end, then its result.

Starts the embedded broker, produces a few thousand click events (a few of them
malformed on purpose), runs ``pipelines/clicks_per_minute.toml`` with
``--available-now`` semantics, prints the windows it landed in Delta and the dead
letters, and stops the broker. The spec is this package's ``clicks_per_minute.toml``, a
symbolic link to the one in ``pipelines/`` (a wheel holds the file it points to), so
the demo runs from any directory once ``flow-jobs[demo]`` is installed.

With ``--ui`` it then serves the Dagster UI (``dg dev`` on the checkout) on the same
broker, data and ledger until Ctrl-C. Ctrl-C (or SIGTERM, or the terminal closing) at
any point stops the demo in order, the run after the batch in flight, then the
Dagster server, then the broker (the embedded Postgres stops as the demo exits), and
the demo exits 0: the UI's documented way to end, as for ``flow-jobs run``, which also
exits 0 when stopped on request (and ``make`` says nothing of a 0).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flow_jobs import cli, tables
from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.display import configure_logging, make_display
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import revealed
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import produce
from flow_jobs_dev.sample_events import sample_clicks
from flow_jobs_dev.service import the_terminal

SPEC = Path(__file__).with_name("clicks_per_minute.toml")


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> Any:
    def cell(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, float):
            return f"{v:,.2f}"
        if hasattr(v, "strftime"):
            return v.strftime("%H:%M:%S")
        return str(v)

    body = [[cell(r[c]) for c in columns] for r in rows]
    return tables.table(columns, body, right=columns[3:])


def show(spec: Any, runner: Any, summary: Any, ledger: list[dict[str, Any]], rows: int) -> None:
    from flow_jobs.cli_store import batch_notes, format_batches

    windows = read_delta(spec.target.path, revealed(spec.target.storage_options)).to_pylist()
    windows.sort(key=lambda r: (r["window_start"], r["user_id"] or ""))
    columns = spec.output_columns()
    print()
    print(f"{spec.name}: {len(windows)} windows in Delta table {spec.target.path}")
    print(f"(showing the last {min(rows, len(windows))}; times are UTC)")
    tables.show(format_table(windows[-rows:], columns))
    dead = read_delta(spec.dead_letter_path(), spec.dead_letter_storage_options()).to_pylist()
    print()
    print(f"dead letters: {len(dead)} in {spec.dead_letter_path()}")
    for d in sorted(dead, key=lambda r: (r["partition"], r["offset"])):
        where = f"{d['topic']}[{d['partition']}]@{d['offset']}"
        print(f"  {where}: {d['reason']} (value {d['value']!r})")
    print()
    print(f"the ledger (embedded Postgres, {runner.ledger.schema}.batches), last batches:")
    tables.show(format_batches(ledger), *batch_notes(ledger))
    print()
    print(summary.describe())
    print("windows still open (end > watermark) are emitted once later events close them:")


#: What stops the demo: Ctrl-C, SIGTERM, the terminal closing.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """``stop`` set by ``STOP_SIGNALS`` meanwhile, nothing raised: each step of the demo
    ends where it can (the run after the batch in flight), and the demo stops what it
    started. (The SparkContext the run starts keeps these handlers: runtime.session.)"""

    def request_stop(_signum: int, _frame: object) -> None:
        stop.set()

    previous = {s: signal.signal(s, request_stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def flow_jobs_command(cwd: Path) -> str:
    """This environment's ``flow-jobs`` as a user types it in ``cwd``: the name when the
    one on PATH is this environment's, else its path (relative below ``cwd``), so that a
    printed command works with the virtual environment activated or not."""
    script = Path(sys.executable).with_name("flow-jobs")
    if not script.is_file():  # not installed (run from a source tree): the module
        return f"{shlex.quote(sys.executable)} -m flow_jobs.cli"
    on_path = shutil.which("flow-jobs")
    if on_path and Path(on_path).resolve() == script.resolve():
        return "flow-jobs"
    return shlex.quote(shown_path(script, cwd))


def shown_path(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when below it (with a ``/``, so that a shell takes a
    command there for a path, not a name to look up), else absolute."""
    absolute = Path(os.path.abspath(path))
    if not absolute.is_relative_to(cwd):
        return str(absolute)
    relative = str(absolute.relative_to(cwd))
    return relative if os.sep in relative else f".{os.sep}{relative}"


def spec_argument(cwd: Path) -> str:
    """The demo's spec as a path from ``cwd``: ``pipelines/clicks_per_minute.toml`` in the
    checkout (this package's file links to it), else this package's file."""
    in_checkout = cwd / "pipelines" / SPEC.name
    if in_checkout.is_file() and in_checkout.samefile(SPEC):
        return str(in_checkout.relative_to(cwd))
    return shown_path(SPEC, cwd)


def serve_ui(bootstrap: str, data_dir: Path, port: int, stop: threading.Event) -> int:
    """``dg dev`` on the checkout in the current directory with the demo's broker, data
    folder and embedded state store, until ``stop``; 1 if the server ends by itself."""
    from flow_jobs_dev.dagster_ui import DagsterDev

    home = data_dir / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    # No first-visit community dialog over the demo's pages; nothing is sent out either.
    (home / "dagster.yaml").write_text("nux:\n  enabled: false\ntelemetry:\n  enabled: false\n")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "FLOW_DATA_DIR": str(data_dir),
    }
    print()
    print("starting the Dagster UI (dg dev) ...", flush=True)
    server = DagsterDev(Path.cwd(), port, env)
    try:
        server.start(abandon=stop)
    except InterruptedError:
        return 0
    try:
        print(f"Dagster UI: {server.url} (every spec in pipelines/ is an asset; the demo's")
        print("clicks are in the broker: materialize clicks_per_minute). Ctrl-C stops it.")
        sys.stdout.flush()
        while server.running() and not stop.wait(0.5):
            pass
    finally:
        server.stop()
    if not stop.is_set():
        print("the Dagster server exited by itself: see its lines above", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flow-jobs-demo", description=__doc__)
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--data-dir", default=".demo", help="wiped at start")
    parser.add_argument("--rows", type=int, default=30, help="windows to print")
    parser.add_argument(
        "--ui",
        action="store_true",
        help="then serve the Dagster UI until Ctrl-C (run it in the checkout: `dg dev` "
        "serves its pyproject.toml's dg project)",
    )
    parser.add_argument("--ui-port", type=int, default=3000)
    args = parser.parse_args(argv)
    if args.ui and not Path("definitions.py").is_file():
        parser.error("--ui serves the checkout's Dagster project: run it from the repository")
    configure_logging(logging.INFO)
    stop = threading.Event()
    with stop_on_signals(stop), the_terminal():
        code, running = demo(args, stop)
    if stop.is_set():  # Ctrl-C's one line (ledger.location: Postgres stops at exit)
        print(f"stopped {running}, then the broker; the embedded Postgres stops as we exit")
    return code


def demo(args: argparse.Namespace, stop: threading.Event) -> tuple[int, str]:
    """The demo's steps: its exit code, and what was running when ``stop`` came."""
    data_dir = Path(args.data_dir).resolve()
    shutil.rmtree(data_dir, ignore_errors=True)  # the broker is new: so is the checkpoint
    # Its own process group: a terminal's Ctrl-C stops the demo, which stops the broker
    # once the run (or the Dagster server) no longer reads it.
    with EmbeddedBroker(log_path=None, process_group=True) as broker:
        print(f"broker: tansu on {broker.bootstrap_servers}")
        broker.create_topic("clicks", partitions=2)
        # Click events over the last ~15 minutes, one every 180 ms, from 12 users.
        start = int(time.time() * 1000) - 15 * 60_000
        sent = produce(
            broker.bootstrap_servers,
            "clicks",
            sample_clicks(
                args.events,
                users=12,
                start_ms=start,
                step_ms=180,
                partitions=2,
                seed=42,
                malformed_every=997,
            ),
        )
        print(f"produced {sent} click events to topic 'clicks' (every 997th one malformed)")

        os.environ["KAFKA_BOOTSTRAP_SERVERS"] = broker.bootstrap_servers
        os.environ["FLOW_DATA_DIR"] = str(data_dir)
        spec = load_spec(SPEC)

        from flow_jobs.runtime.runner import SUMMARY_LOG, PipelineRunner

        SUMMARY_LOG.setLevel(logging.WARNING)  # the demo prints it, under its tables
        runner = PipelineRunner(spec, stop_event=stop)
        # The progress display `flow-jobs run` shows (a bar on a terminal).
        summary = runner.run(available_now=True, display=make_display(sys.stderr))
        if stop.is_set():
            return 0, "the run after the batch in flight"
        assert runner.ledger is not None
        ledger = runner.ledger.recent_batches(spec.name, 5)

        show(spec, runner, summary, ledger, args.rows)
        # What is still open, and why: as `flow-jobs inspect` shows it, with the command
        # that shows it again, exactly as it works from here.
        cwd = Path.cwd()
        inspect = ["inspect", spec_argument(cwd), "--limit", "5"]
        print()
        print(
            f"$ FLOW_DATA_DIR={shlex.quote(args.data_dir)} {flow_jobs_command(cwd)} "
            f"{shlex.join(inspect)}",
            flush=True,
        )
        if cli.main(inspect) != 0:
            return 1, "the demo"
        if args.ui and not stop.is_set():
            code = serve_ui(broker.bootstrap_servers, data_dir, args.ui_port, stop)
            return code, "the Dagster UI"
    return 0, "the demo"


if __name__ == "__main__":
    raise SystemExit(main())
