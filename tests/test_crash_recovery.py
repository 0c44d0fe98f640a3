"""Crash recovery: a continuous run SIGKILLed at random moments, restarted each time.

Each cycle starts ``flow-jobs run SPEC`` in its own process group (driver, JVM and
Python workers), then kills the whole group with SIGKILL: sometimes during start-up,
mostly a random moment after the ledger shows a new batch (so mid-batch, mid-write or
between the write and Spark's commit). After the kills, one ``--available-now`` run
drains the rest. The target must then equal an independent computation — no window
missing, none doubled — and the ledger's batch ids must be contiguous.

``FLOW_CRASH_KILLS`` sets the number of kills per target (2 here, to keep the suite inside
its 15-minute budget: each kill costs a JVM start; ``make soak`` runs 50).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from flow_jobs.ledger.store import LedgerStore
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    iceberg_target,
    make_spec,
    random_clicks,
    read_iceberg,
    read_windows,
    send,
)
from tests.support import to_records as records_of
from tests.test_state_store import read_postgres

KILLS = int(os.environ.get("FLOW_CRASH_KILLS", "2"))
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum"), ("last", "page", "page")]
LATENESS = 2_000


def _spec(
    workdir: Path, broker: EmbeddedBroker, topic: str, name: str, target: dict[str, Any]
) -> tuple[Path, Path]:
    """The crashed runs' spec (150 records per micro-batch, so kills land mid-stream),
    and the same spec without the read limit for the run that drains the rest: a
    change safe under the checkpoint, which only makes that run's batches fewer."""
    window = {
        "kind": "hopping",
        "duration_ms": 10_000,
        "hop_ms": 5_000,
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
    }
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        name=name,
        source={"max_offsets_per_trigger": 150},
    )
    doc = spec.to_document()
    doc["target"] = target
    doc["runtime"] = {"trigger_interval_ms": 200}
    doc["spark"] = {"master": "local[2]", "shuffle_partitions": 2}
    path = workdir / f"{name}.toml"
    path.write_text(PipelineSpec.model_validate(doc).to_toml())
    del doc["sources"][0]["max_offsets_per_trigger"]
    drain = workdir / f"{name}.drain.toml"
    drain.write_text(PipelineSpec.model_validate(doc).to_toml())
    return path, drain


def _start(spec: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "flow_jobs.cli", "run", str(spec), *args],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the JVM and workers die with it
    )


def _batches(ledger: LedgerStore, name: str) -> int:
    try:
        return sum(len(ids) for ids in ledger.batch_ids(name).values())
    except Exception:  # the schema may not exist before the first start migrates it
        return 0


def _crash_cycles(
    spec: Path, drain: Path, env: dict[str, str], ledger: LedgerStore, log: Path
) -> None:
    """KILLS runs, each SIGKILLed at a random moment, then one run that drains the rest."""
    name = spec.stem
    rng = random.Random(name)
    for kill in range(KILLS):
        seen = _batches(ledger, name)
        proc = _start(spec, env, log)
        deadline = time.monotonic() + 180
        if rng.random() < 0.5:  # anywhere in start-up, planning or the first batch
            time.sleep(rng.uniform(1.0, 10.0))
        else:  # a random moment after a new batch was written: mid-batch or mid-write
            while _batches(ledger, name) <= seen and proc.poll() is None:
                assert time.monotonic() < deadline, f"cycle {kill}: no batch in 180 s"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.0))
        assert proc.poll() is None, f"cycle {kill}: the run ended by itself:\n{log.read_text()}"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    final = _start(drain, env, log, "--available-now")
    assert final.wait(300) == 0, log.read_text()[-5000:]


def test_sigkill_at_random_moments_neither_loses_nor_doubles_a_window(
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    postgres_url: str,
    embedded_postgres_url: str,
    state_store_env: str,
) -> None:
    """The same stream into a Delta, a Postgres and an Iceberg target, three pipelines
    crashed side by side (concurrently, to share the wall time of a JVM start per
    cycle). Both Postgres paths are exercised: the Delta pipeline keeps its ledger in the
    embedded server, the Postgres target (which shares its ledger's database) and the
    Iceberg target's catalog the machine's server when there is one."""
    events = random_clicks(random.Random(KILLS), 3_000, step_ms=100, disorder_ms=1_500)
    send(broker.bootstrap_servers, topic, records_of(events))
    table = f"crash_{state_store_env}"
    runs = {
        "delta": (embedded_postgres_url, {"kind": "delta", "path": str(workdir / "delta" / "t")}),
        "postgres": (postgres_url, {"kind": "postgres", "table": table}),
        "iceberg": (postgres_url, iceberg_target(workdir / "iceberg", "crash")),
    }
    errors: dict[str, BaseException] = {}

    def crash(name: str) -> None:
        url, target = runs[name]
        folder = workdir / name
        folder.mkdir(exist_ok=True)
        spec, drain = _spec(folder, broker, topic, f"crash-{name}", target)
        env = {**os.environ, "FLOW_STATE_STORE_URL": url, "PYTHONUNBUFFERED": "1"}
        try:
            ledger = LedgerStore(url, state_store_env)
            _crash_cycles(spec, drain, env, ledger, folder / "runs.log")
        except BaseException as e:  # reported by the test's thread below
            errors[name] = e

    threads = [threading.Thread(target=crash, args=(name,)) for name in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, error in errors.items():
        raise AssertionError(f"{name} pipeline: {error}") from error

    expected = reference_windows(
        events,
        time_key="ts",
        duration_ms=10_000,
        hop_ms=5_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )
    key = ["window_start", "window_end", "user_id"]
    assert_same_windows(read_windows(workdir / "delta" / "t", key), expected)
    assert_same_windows(read_postgres(table, key, postgres_url), expected)  # no duplicates
    assert_same_windows(read_iceberg(runs["iceberg"][1], key, postgres_url), expected)

    for name, (url, _target) in runs.items():
        ledger = LedgerStore(url, state_store_env)
        lineages = ledger.batch_ids(f"crash-{name}")
        assert len(lineages) == 1, (name, lineages)  # one checkpoint, one query id
        (ids,) = lineages.values()
        assert ids == list(range(len(ids))), f"{name}: ledger batch ids not contiguous: {ids}"
        last = ledger.recent_batches(f"crash-{name}", 1)[0]
        assert last["end_offsets"] == {"clicks": {topic: {"0": 1_500, "1": 1_500}}}, name
