"""``make bench-inserts``: a join whose output is as large as its input on a Spark
standalone cluster of 2 workers x 1 core, its Delta inserts written by the driver (one
MERGE of the batch's rows, collected with toArrow) and by the executors (each task its
Parquet file, the driver commits their add actions), in one invocation (issue 51,
item 3).

Each run is a driver process of its own (``python -m bench.executor_inserts '<json>'``)
on a fresh checkpoint and table, the two ways alternating, ``--runs`` of each. The
driver reports its own figures when the run ends: CPU seconds and peak resident memory
of its Python process and of its JVM (``/proc``: the JVM is the Python process's child,
PySpark's gateway), and the run's seconds, from which events/s; per output row, the
driver's CPU microseconds and its peak memory in bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run import ORDERS_TOPIC, PAYMENTS_TOPIC, _join_spec, produce_join
from flow_jobs.runtime.pack import pack
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.spark_cluster import StandaloneCluster

ROOT = Path(__file__).resolve().parent.parent
START_MS = 1_700_000_000_000
WAYS = ("driver", "executors")


def _proc(pid: int) -> tuple[float, int]:
    """A process's CPU seconds (user + system) and peak resident set, in bytes."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu, peak


def _drive(args: dict[str, Any]) -> dict[str, Any]:
    """One run in this process: the join, its target written ``args['way']``."""
    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.runtime.session import build_spark_session
    from flow_jobs.spec.models import PipelineSpec

    spark = build_spark_session(
        args["master"],
        {"spark.executor.memory": "2g", "spark.ui.enabled": "false"},
        app_name="flow-jobs-bench-inserts",
        archive=args["archive"],
    )
    workdir = Path(args["workdir"])
    doc = _join_spec(args["bootstrap"], workdir).to_document()
    doc["name"] = f"bench-inserts-{args['way']}-{workdir.name}"
    doc["checkpoint"] = {"location": (workdir / "checkpoint").as_uri()}
    doc["target"]["path"] = (workdir / "target").as_uri()
    doc["target"]["inserts_from"] = args["way"]
    runner = PipelineRunner(PipelineSpec.model_validate(doc), spark)
    started = time.perf_counter()
    runner.run(available_now=True)
    seconds = time.perf_counter() - started
    totals = runner.progress.totals() if runner.progress else None
    jvm = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    jvm_cpu, jvm_peak = _proc(jvm)
    own = resource.getrusage(resource.RUSAGE_SELF)
    python_cpu, python_peak = own.ru_utime + own.ru_stime, own.ru_maxrss * 1024
    figures = {
        "seconds": seconds,
        "input_rows": runner.progress.input_rows() if runner.progress else 0,
        "output_rows": totals.windows_inserted + totals.windows_updated if totals else 0,
        "python_cpu": python_cpu,
        "python_peak": python_peak,
        "jvm_cpu": jvm_cpu,
        "jvm_peak": jvm_peak,
    }
    spark.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=300_000, help="orders (and payments)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each way")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {w: [] for w in WAYS}
    with (
        tempfile.TemporaryDirectory(prefix="flow-bench-inserts-") as tmp,
        EmbeddedBroker() as broker,
    ):
        for topic in (ORDERS_TOPIC, PAYMENTS_TOPIC):
            broker.create_topic(topic, partitions=4)
        produced = produce_join(broker.bootstrap_servers, args.orders, START_MS, 4)
        print(f"produced {produced:,} records ({args.orders:,} orders and their payments)")
        archive = pack(Path(tmp) / "executor.tar.gz", compress_level=1)
        with StandaloneCluster(Path(tmp) / "spark", workers=2, memory_per_worker="3g") as cluster:
            for i in range(args.runs):
                for way in WAYS if i % 2 == 0 else reversed(WAYS):
                    drive = {
                        "master": cluster.master_url,
                        "archive": str(archive),
                        "bootstrap": broker.bootstrap_servers,
                        "workdir": str(Path(tmp) / f"{way}-{i}"),
                        "way": way,
                    }
                    started = time.perf_counter()
                    done = subprocess.run(
                        [sys.executable, "-m", "bench.executor_inserts", json.dumps(drive)],
                        cwd=ROOT, capture_output=True, text=True, timeout=3600,
                    )  # fmt: skip
                    if done.returncode != 0:
                        raise RuntimeError(f"{way} run failed: {done.stderr[-3000:]}")
                    figures = json.loads(done.stdout.strip().splitlines()[-1])
                    figures["process_seconds"] = time.perf_counter() - started
                    if figures["input_rows"] != produced:
                        raise RuntimeError(f"{way} read {figures['input_rows']} of {produced}")
                    runs[way].append(figures)
                    print(f"  {way}: {_line(figures, produced)}", flush=True)
    print(f"\n{platform.node()}, {os.cpu_count()} cores; {produced:,} events in, per way:")
    for way in WAYS:
        median = {k: statistics.median(r[k] for r in runs[way]) for k in runs[way][0]}
        print(f"  {way:9} (median of {len(runs[way])}): {_line(median, produced)}")
    return 0


def _line(f: dict[str, Any], produced: int) -> str:
    rows = max(f["output_rows"], 1)
    cpu = f["python_cpu"] + f["jvm_cpu"]
    return (
        f"{produced / f['seconds']:,.0f} events/s in the run ({f['process_seconds']:.1f} s "
        f"process), {f['output_rows']:,} rows out; driver CPU {cpu:.1f} s "
        f"({cpu / rows * 1e6:.1f} us/row: Python {f['python_cpu']:.1f} s, JVM "
        f"{f['jvm_cpu']:.1f} s), peak memory Python {f['python_peak'] / 2**20:,.0f} MiB, JVM "
        f"{f['jvm_peak'] / 2**20:,.0f} MiB ({(f['python_peak'] + f['jvm_peak']) / rows:,.0f} "
        "B/row)"
    )


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].startswith("{"):
        print(json.dumps(_drive(json.loads(sys.argv[1]))))
    else:
        raise SystemExit(main())
