"""``make bench-nexmark``: Nexmark's queries that flow-jobs expresses, each in a fresh
process the way users run it (``flow-jobs run QUERY.sql --available-now -q``), over
events from ``bench/nexmark/generator.py`` on the embedded broker.

For each query: T(empty), the process on an empty topic (start-up), and T(N) on the
full one; gross = events / T(N), net = events / (T(N) - T(empty)), and net per core
(the run uses every core of the machine: ``local[*]``) beside Flink 1.13's published
per-core figure. Each query's target is compared with its definition computed from the
same events (``bench/nexmark/reference.py``); a difference fails the run.

The events go to three topics, ``person``, ``auction`` and ``bid`` (Nexmark's three
tables); q8 reads the persons and auctions, the others the bids (46 in 50 events). As
Nexmark does, events/s counts every event of the stream, whichever table a query reads."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.nexmark import reference
from bench.nexmark.generator import GeneratorConfig, events
from flow_jobs.io.delta import read_delta
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record, produce

ROOT = Path(__file__).resolve().parents[2]
QUERIES = Path(__file__).parent / "queries"
FLOW_JOBS = Path(sys.executable).parent / "flow-jobs"
#: Flink 1.13's published Nexmark throughput per core (nexmark/nexmark's README: 8-core
#: workers, RocksDB; events / (measured cores x time)).
FLINK_PER_CORE = {
    "q0": 155_020, "q1": 157_940, "q2": 175_210, "q14": 161_230, "q21": 98_490,
    "q22": 129_960,
    "q5": 22_100, "q7": 12_300, "q8": 146_000, "q11": 39_700,
}  # fmt: skip
KINDS = ("person", "auction", "bid")
#: The stateless queries' output columns, as their references list them.
STATELESS = {
    "q0": ("auction", "bidder", "price", "dateTime", "extra"),
    "q1": ("auction", "bidder", "price", "dateTime", "extra"),
    "q2": ("auction", "price"),
    "q14": ("auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts"),
    "q21": ("auction", "bidder", "price", "channel", "channel_id"),
    "q22": ("auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"),
}
PARTITIONS = 3


def _ms(t) -> int:
    return round(t.timestamp() * 1000)


def _target(query: str, path: str) -> dict:
    rows = read_delta(path).to_pylist()
    if query == "q5":
        return {
            (_ms(r["window_start"]), _ms(r["window_end"]), r["auction"]): r["num"] for r in rows
        }
    if query in STATELESS:
        columns = STATELESS[query]
        if len({r["row_id"] for r in rows}) != len(rows):
            raise SystemExit(f"{query}: a row_id is written twice")
        return dict(Counter(tuple(r[c] for c in columns) for r in rows))
    if query == "q7":
        return {
            (_ms(r["window_start"]), _ms(r["window_end"]), r["auction"], r["bidder"],
             r["price"], r["dateTime"], r["extra"]): r["bids"]
            for r in rows
        }  # fmt: skip
    if query == "q8":
        return dict(Counter((r["id"], r["name"], _ms(r["starttime"])) for r in rows))
    return {
        (_ms(r["window_start"]), _ms(r["window_end"]), r["bidder"]): r["bid_count"] for r in rows
    }


def _query_file(query: str) -> Path:
    """A query's pipeline: its SQL file, or its TOML spec where it has no SQL spelling."""
    sql = QUERIES / f"{query}.sql"
    return sql if sql.exists() else QUERIES / f"{query}.toml"


def _expected(query: str, tables: dict[str, list[dict]]) -> dict:
    if query == "q8":
        persons, auctions = tables["person"], tables["auction"]
        closed = reference.q8(persons, auctions, reference.watermark_of(persons, auctions))
        return dict.fromkeys(closed, 1)
    bids = tables["bid"]
    if query in STATELESS:
        return getattr(reference, query)(bids)
    return getattr(reference, query)(bids, reference.watermark(bids))


def _run(query: str, bootstrap: str, topics: dict[str, str], workdir: Path) -> float:
    env = {
        **os.environ,
        "NEXMARK_DIR": str(workdir),
        **{f"NEXMARK_{kind.upper()}_TOPIC": topic for kind, topic in topics.items()},
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        # each run a pipeline of its own in the ledger: a fresh checkpoint, not a change
        "NEXMARK_PIPELINE": f"nexmark-{query}-{workdir.name}-{time.time_ns()}",
    }
    command = [str(FLOW_JOBS), "run", str(_query_file(query)), "--available-now", "-q"]
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
    parser.add_argument("--queries", default="q0,q1,q2,q5,q7,q8,q11,q14,q21,q22")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    queries = args.queries.split(",")
    config = GeneratorConfig(rate=args.rate)
    tables: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for kind, row in events(config, args.events):
        tables[kind].append(row)
    cores = os.cpu_count() or 1
    results = []
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        full = {kind: f"nexmark-{kind}" for kind in KINDS}
        empty = {kind: f"nexmark-{kind}-empty" for kind in KINDS}
        for topic in [*full.values(), *empty.values()]:
            broker.create_topic(topic, partitions=PARTITIONS)
        for kind, rows in tables.items():
            records = (
                Record(json.dumps(r).encode(), i % PARTITIONS, timestamp_ms=r["dateTime"])
                for i, r in enumerate(rows)
            )
            produced = produce(bootstrap, full[kind], records)
            assert produced == len(rows), (kind, produced, len(rows))
        counts = ", ".join(f"{len(rows):,} {kind}s" for kind, rows in tables.items())
        print(f"{args.events:,} Nexmark events ({counts}) on {PARTITIONS} partitions each")
        for query in queries:
            with tempfile.TemporaryDirectory(prefix="nexmark-") as work:
                t_empty = _run(query, bootstrap, empty, Path(work) / "empty")
                t_full = _run(query, bootstrap, full, Path(work) / "full")
                got = _target(query, str(Path(work) / "full" / query / "target"))
            expected = _expected(query, tables)
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
