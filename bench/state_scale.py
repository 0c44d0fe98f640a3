"""``make bench-state``: state at scale, keys -> events/s -> peak state -> RSS (issue 12,
item 5).

For each key count, one topic of ``--events`` clicks over that many users, all inside
one window (tumbling, 1 day, from a UTC midnight two days ago; the events are 1 ms
apart), so the window's state holds one row per user seen: with 2,000,000 events over
1,000,000 users, ~865,000 rows (users are drawn at random). The pipeline (count, sum,
min, max, avg, first, last by user) reads it in micro-batches of ``--per-trigger``
records, so the state grows batch by batch; the window stays open (the watermark never
passes its end), so what is measured is holding that state, not writing it. Reported
per run: events/s, the peak state rows and the state store's memory (Spark's progress,
``memoryUsedBytes``: RocksDB's), and the peak RSS of the JVM and of the Spark Python
workers, sampled every 0.2 s. The RocksDB state store runs with bounded memory
(``spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage``, ``--rocksdb-mb`` for all
of its instances in the JVM).

``python -m bench.state_scale --keys 1000,100000,1000000`` (the default); a 10,000,000
key run: ``--keys 10000000 --events 20000000``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench.compare import AGGREGATIONS
from bench.run import SCHEMA
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import produce
from flow_jobs_dev.sample_events import sample_clicks

DAY_MS = 86_400_000


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            found.append(int(entry))
    return found


class PeakRss:
    """The peak RSS of the JVM, and of its Python workers together, while it runs."""

    def __init__(self, jvm_pid: int) -> None:
        self.jvm_pid = jvm_pid
        self.jvm_kb = 0
        self.workers_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.jvm_kb = max(self.jvm_kb, _rss_kb(self.jvm_pid))
            workers = 0
            for child in _children(self.jvm_pid):  # the Python daemon and its workers
                workers += _rss_kb(child) + sum(_rss_kb(g) for g in _children(child))
            self.workers_kb = max(self.workers_kb, workers)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _spec(bootstrap: str, topic: str, workdir: Path, per_trigger: int, keys: int) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {
            "name": workdir.name.lower().replace("_", "-"),
            "sources": [
                {
                    "name": "clicks",
                    "topic": topic,
                    "bootstrap_servers": bootstrap,
                    "schema": SCHEMA,
                    "max_offsets_per_trigger": per_trigger,
                }
            ],
            "transform": {
                "window": {
                    "kind": "tumbling",
                    "duration_ms": DAY_MS,
                    "lateness_ms": 5_000,
                    "event_time_column": "ts",
                    "group_by": ["user_id"],
                    "aggregations": AGGREGATIONS,
                    # The default cap (1,000,000 groups per window) guards memory; the
                    # point here is to go past it, on RocksDB.
                    "max_groups_per_window": max(1_000_000, 2 * keys),
                }
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.state_scale", description=__doc__)
    parser.add_argument("--keys", default="1000,100000,1000000")
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--per-trigger", type=int, default=250_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rocksdb-mb", type=int, default=256)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()

    from flow_jobs.runtime.reports import as_dict
    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.runtime.session import build_spark_session

    os.environ.setdefault("FLOW_STATE_STORE_SCHEMA", f"bench_{int(time.time())}")
    rows = []
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        spark = build_spark_session(
            f"local[{os.cpu_count() or 2}]",
            {
                "spark.ui.enabled": "false",
                "spark.driver.memory": "4g",
                "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
                "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": str(args.rocksdb_mb),
            },
            app_name="flow-jobs-bench-state",
        )
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        start_ms = (int(time.time() * 1000) // DAY_MS - 2) * DAY_MS  # a UTC midnight
        # The first run in a JVM pays for warming it (code, Python workers): a small
        # run first, not reported.
        plan = [(1_000, min(args.events, 200_000), False)]
        plan += [(int(k), args.events, True) for k in args.keys.split(",")]
        for run, (keys, events, reported) in enumerate(plan):
            topic = f"state-{run}-{keys}"
            broker.create_topic(topic, partitions=args.partitions)
            produced = produce(
                bootstrap,
                topic,
                sample_clicks(
                    events,
                    users=keys,
                    start_ms=start_ms,
                    step_ms=1,
                    partitions=args.partitions,
                ),
            )
            workdir = Path(tempfile.mkdtemp(prefix="flow-bench-state-"))
            try:
                runner = PipelineRunner(
                    _spec(bootstrap, topic, workdir, args.per_trigger, keys), spark
                )
                with PeakRss(jvm_pid) as rss:
                    started = time.perf_counter()
                    runner.run(available_now=True)
                    seconds = time.perf_counter() - started
                reports = [as_dict(p) for p in runner.progress.progress.values()]
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
            if not reported:
                continue
            operators = [op for r in reports for op in r.get("stateOperators", [])]
            row = {
                "keys": keys,
                "events": produced,
                "seconds": seconds,
                "events_per_s": produced / seconds,
                "peak_state_rows": max(
                    (int(o.get("numRowsTotal", 0)) for o in operators), default=0
                ),
                "peak_state_mb": max(
                    (int(o.get("memoryUsedBytes", 0)) for o in operators), default=0
                )
                / 2**20,
                "jvm_peak_rss_mb": rss.jvm_kb / 1024,
                "python_workers_peak_rss_mb": rss.workers_kb / 1024,
                "batches": len(reports),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        spark.stop()
    lines = [
        "| keys | events | events/s | peak state rows | state store MB | JVM peak RSS MB | "
        "Python workers peak RSS MB | batches |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['keys']:,} | {r['events']:,} | {r['events_per_s']:,.0f} | "
            f"{r['peak_state_rows']:,} | {r['peak_state_mb']:,.0f} | {r['jvm_peak_rss_mb']:,.0f} | "
            f"{r['python_workers_peak_rss_mb']:,.0f} | {r['batches']} |"
            for r in rows
        ),
    ]
    print()
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"state-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(
        json.dumps(
            {
                "command": "python -m bench.state_scale "
                + " ".join(
                    f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "out"
                ),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "results": rows,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
