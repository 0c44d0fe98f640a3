"""``make bench-nexmark``: Nexmark's queries that flow-jobs expresses, each in a fresh
process the way users run it (``flow-jobs run QUERY.sql --available-now -q``), over
events from ``bench/nexmark/generator.py`` on the embedded broker.

For each query: T(empty), the process on an empty topic (start-up), and T(N) on the
full one; gross = events / T(N), net = events / (T(N) - T(empty)), and net per core
(the run uses every core of the machine: ``local[*]``) beside Flink 1.13's published
per-core figure. Each query's target is compared with its definition computed from the
same events (``bench/nexmark/reference.py``); a difference fails the run.

q5 and q11 read bids only, so only bids are produced (their share of Nexmark's events,
46 in 50); events/s counts every Nexmark event the bids came from, as Nexmark does."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.nexmark import reference
from bench.nexmark.generator import GeneratorConfig, events
from flow_jobs.io.delta import read_delta
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record, produce

ROOT = Path(__file__).resolve().parents[2]
QUERIES = Path(__file__).parent / "queries"
FLOW_JOBS = Path(sys.executable).parent / "flow-jobs"
#: Flink 1.13's published Nexmark throughput per core (8-core workers, RocksDB).
FLINK_PER_CORE = {"q5": 22_100, "q11": 39_700}
PARTITIONS = 3


def _ms(t) -> int:
    return round(t.timestamp() * 1000)


def _target(query: str, path: str) -> dict:
    rows = read_delta(path).to_pylist()
    if query == "q5":
        return {
            (_ms(r["window_start"]), _ms(r["window_end"])): (r["auction"], r["num"]) for r in rows
        }
    return {
        (_ms(r["window_start"]), _ms(r["window_end"]), r["bidder"]): r["bid_count"] for r in rows
    }


def _run(query: str, bootstrap: str, topic: str, workdir: Path) -> float:
    env = {
        **os.environ,
        "NEXMARK_DIR": str(workdir),
        "NEXMARK_BID_TOPIC": topic,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        # each run a pipeline of its own in the ledger: a fresh checkpoint, not a change
        "NEXMARK_PIPELINE": f"nexmark-{query}-{workdir.name}-{time.time_ns()}",
    }
    command = [str(FLOW_JOBS), "run", str(QUERIES / f"{query}.sql"), "--available-now", "-q"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=3600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{query} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="Nexmark events")
    parser.add_argument("--rate", type=int, default=10_000, help="events per second of event time")
    parser.add_argument("--queries", default="q5,q11")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    queries = args.queries.split(",")
    config = GeneratorConfig(rate=args.rate)
    bids = [row for kind, row in events(config, args.events) if kind == "bid"]
    cores = os.cpu_count() or 1
    results = []
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        full, empty = "nexmark-bid", "nexmark-bid-empty"
        for topic in (full, empty):
            broker.create_topic(topic, partitions=PARTITIONS)
        records = (
            Record(json.dumps(b).encode(), i % PARTITIONS, timestamp_ms=b["dateTime"])
            for i, b in enumerate(bids)
        )
        produced = produce(bootstrap, full, records)
        assert produced == len(bids), (produced, len(bids))
        print(f"{args.events:,} Nexmark events, {len(bids):,} bids on {PARTITIONS} partitions")
        wm = reference.watermark(bids)
        for query in queries:
            with tempfile.TemporaryDirectory(prefix="nexmark-") as work:
                t_empty = _run(query, bootstrap, empty, Path(work) / "empty")
                t_full = _run(query, bootstrap, full, Path(work) / "full")
                got = _target(query, str(Path(work) / "full" / query / "target"))
            expected = getattr(reference, query)(bids, wm)
            if got != expected:
                missing = len(expected.keys() - got.keys())
                wrong = sum(1 for k in expected.keys() & got.keys() if got[k] != expected[k])
                raise SystemExit(
                    f"{query}: output differs from its definition ({missing} rows "
                    f"missing, {len(got.keys() - expected.keys())} extra, {wrong} wrong)"
                )
            net = args.events / max(t_full - t_empty, 1e-9)
            results.append(
                {
                    "query": query,
                    "rows": len(got),
                    "t_full_s": round(t_full, 1),
                    "t_empty_s": round(t_empty, 1),
                    "gross_events_per_s": round(args.events / t_full),
                    "net_events_per_s": round(net),
                    "net_per_core": round(net / cores),
                    "flink_1_13_per_core": FLINK_PER_CORE[query],
                }
            )
            print(
                f"  {query}: {len(got):,} rows, equal to the definition; T(N) {t_full:.1f} s, "
                f"T(empty) {t_empty:.1f} s",
                flush=True,
            )
    print()
    print(
        "| query | rows | T(N) s | T(empty) s | gross events/s | net events/s | net per core "
        "| Flink 1.13 per core | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['query']} | {r['rows']:,} | {r['t_full_s']} | {r['t_empty_s']} | "
            f"{r['gross_events_per_s']:,} | {r['net_events_per_s']:,} | {r['net_per_core']:,} | "
            f"{r['flink_1_13_per_core']:,} | {r['net_per_core'] / r['flink_1_13_per_core']:.2f} |"
        )
    print(
        f"\nmachine: {cores} cores, Python {platform.python_version()}; "
        f"command: make bench-nexmark N={args.events}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"cores": cores, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
