"""``make demo`` (``python -m flow_jobs_dev.demo``): the main job on embedded defaults,
end to end, then its result.

Starts the embedded broker, produces a few thousand click events (a few of them
malformed on purpose), runs ``pipelines/clicks_per_minute.toml`` with
``--available-now`` semantics, prints the windows it landed in Delta and the dead
letters, and stops the broker. The spec is this package's ``clicks_per_minute.toml``, a
symbolic link to the one in ``pipelines/`` (a wheel holds the file it points to), so
the demo runs from any directory once ``flow-jobs[demo]`` is installed.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
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
    from flow_jobs.cli import format_batches

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
    tables.show(format_batches(ledger))
    print()
    print(summary.describe())
    print("windows still open (end > watermark) are emitted once later events close them:")


def serve_ui(bootstrap: str, data_dir: Path, port: int) -> None:
    """``dagster dev`` on the checkout in the current directory (its ``workspace.yaml``),
    the demo's broker, data folder and embedded state store, until Ctrl-C (the broker
    stays up meanwhile)."""
    import subprocess

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
    print(f"Dagster UI: http://127.0.0.1:{port} (every spec in pipelines/ is an asset; the")
    print("demo's clicks are in the broker: materialize clicks_per_minute). Ctrl-C stops it.")
    command = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-p", str(port)]
    ui = subprocess.Popen(command, env=env)
    try:
        ui.wait()
    except KeyboardInterrupt:
        ui.wait(60)  # dagster dev got the same Ctrl-C and shuts its processes down


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flow-jobs-demo", description=__doc__)
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--data-dir", default=".demo", help="wiped at start")
    parser.add_argument("--rows", type=int, default=30, help="windows to print")
    parser.add_argument(
        "--ui",
        action="store_true",
        help="then serve the Dagster UI (run in a checkout: it serves its workspace.yaml)",
    )
    parser.add_argument("--ui-port", type=int, default=3000)
    args = parser.parse_args(argv)
    if args.ui and not Path("workspace.yaml").is_file():
        parser.error("--ui serves the checkout's workspace.yaml: run it from the repository")
    configure_logging(logging.INFO)

    data_dir = Path(args.data_dir).resolve()
    shutil.rmtree(data_dir, ignore_errors=True)  # the broker is new: so is the checkpoint
    with EmbeddedBroker(log_path=None) as broker:
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

        from flow_jobs.runtime.runner import PipelineRunner

        runner = PipelineRunner(spec)
        # The progress display `flow-jobs run` shows (a bar on a terminal).
        summary = runner.run(available_now=True, display=make_display(sys.stderr))
        assert runner.ledger is not None
        ledger = runner.ledger.recent_batches(spec.name, 5)

        show(spec, runner, summary, ledger, args.rows)
        # What is still open, and why: as `flow-jobs inspect` shows it.
        print()
        print(f"$ FLOW_DATA_DIR={args.data_dir} flow-jobs inspect {spec.name} --limit 5")
        inspect = ["inspect", spec.name, "--spec", str(SPEC), "--limit", "5"]
        if cli.main(inspect) != 0:
            return 1
        if args.ui:
            serve_ui(broker.bootstrap_servers, data_dir, args.ui_port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
