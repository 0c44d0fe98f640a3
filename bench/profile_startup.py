"""Where an empty-topic ``--available-now`` run spends its time:
``python -m bench.profile_startup``.

One fresh process (so the JVM start counts), the embedded broker with an empty topic,
the embedded Postgres in a new folder (so its ``initdb`` counts once, as on a user's
first run) and a fresh checkpoint, timed phase by phase as ``flow-jobs run
--available-now`` goes through them; then a second run of the same spec on a new
checkpoint in the same process (JVM, Postgres and imports warm), and the run's top
calls under cProfile. The CLI's own wall time on the same spec (a new process each)
comes last.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PHASES: list[tuple[str, float]] = []


def timed(name: str, call: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = call()
    PHASES.append((name, time.perf_counter() - started))
    return result


def _spec_text(bootstrap: str, topic: str, work: Path, tag: str) -> str:
    return f"""
name = "startup-{tag}"

[[sources]]
name = "clicks"
topic = "{topic}"
bootstrap_servers = "{bootstrap}"
schema = "user_id STRING, amount DOUBLE, ts BIGINT"

[transform.window]
kind = "tumbling"
duration_ms = 60000
event_time_column = "ts"
group_by = ["user_id"]

[[transform.window.aggregations]]
agg = "count"
as = "n"

[target]
kind = "delta"
path = "{work / "target"}"

[checkpoint]
location = "{work / "checkpoint"}"

[dead_letter]
path = "{work / "dead_letters"}"

[state_store]
embedded_dir = "{work.parent / "postgres"}"
"""


def main() -> int:
    argparse.ArgumentParser(prog="bench.profile_startup", description=__doc__).parse_args()
    os.environ.pop("FLOW_STATE_STORE_URL", None)  # the embedded Postgres, as a user gets
    root = Path(tempfile.mkdtemp(prefix="flow-startup-"))
    started = time.perf_counter()
    timed("import flow_jobs (pyspark, deltalake, psycopg, ...)", _imports)
    from flow_jobs.ledger.store import LedgerStore
    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.runtime.session import session_for
    from flow_jobs.spec import parse_spec
    from flow_jobs_dev.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:  # not part of a user's run: not timed
        broker.create_topic("empty", partitions=2)
        specs = []
        for tag in ("first", "second", "cli"):
            work = root / tag
            work.mkdir()
            text = _spec_text(broker.bootstrap_servers, "empty", work, tag)
            (work / "spec.toml").write_text(text)
            specs.append((parse_spec(text), work / "spec.toml"))
        spec = specs[0][0]
        spark = timed("Spark session (JVM start)", lambda: session_for(spec.spark))
        timed("state store: embedded Postgres (initdb + start) and migrate",
              lambda: LedgerStore.for_spec(spec))  # fmt: skip
        runner = timed("compile the plan (PipelineRunner)", lambda: PipelineRunner(spec, spark))
        summary = timed("run --available-now on the empty topic", lambda: runner.run(True))
        first_total = time.perf_counter() - started

        second = specs[1][0]
        runner = timed("second run: compile", lambda: PipelineRunner(second, spark))
        profile = cProfile.Profile()
        profile.enable()
        timed("second run: run --available-now", lambda: runner.run(True))
        profile.disable()

        cli_started = time.perf_counter()
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        done = subprocess.run(
            [sys.executable, "-m", "flow_jobs.cli", "run", str(specs[2][1]), "--available-now"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        cli = time.perf_counter() - cli_started

    print(f"\nempty-topic run ({summary.batches} batches, ended by {summary.ended_by}):")
    for name, seconds in PHASES:
        print(f"  {seconds:7.2f} s  {name}")
    print(f"  {first_total:7.2f} s  first run in all (this process)")
    command = "`flow-jobs run SPEC --available-now`, a new process"
    print(f"  {cli:7.2f} s  {command} (exit {done.returncode})")
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out).sort_stats("cumulative")
    stats.print_stats(r"flow_jobs|pyspark/sql/streaming|deltalake", 30)
    print("\nsecond run, cumulative time by call (cProfile, driver side):")
    print(out.getvalue())
    return 0


def _imports() -> None:
    import flow_jobs.cli
    import flow_jobs.runtime.runner  # noqa: F401


if __name__ == "__main__":
    raise SystemExit(main())
