"""The tumbling pipeline on a Spark standalone cluster of 1 worker, then 2 (issue 14,
item 6), run by ``make bench`` after its local runs.

Each cluster is a master and workers from the PySpark wheel on this machine
(``flow_jobs_dev.spark_cluster``), each worker pinned to 1 core; executors run
the archive ``flow-jobs pack`` builds. A driver process of its own (a JVM holds one
SparkContext) runs the pipeline twice on fresh checkpoints, a warm-up then the timed
run, and prints the figures: ``python -m bench.cluster_scale '<json>'``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.pipeline import Result, clicks_spec
from flow_jobs.runtime.pack import pack
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.spark_cluster import StandaloneCluster

ROOT = Path(__file__).resolve().parent.parent


def cluster_runs(
    bootstrap: str, events: int, worker_counts: tuple[int, ...] = (1, 2)
) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="flow-bench-cluster-") as tmp:
        started = time.perf_counter()
        archive = pack(Path(tmp) / "executor.tar.gz", compress_level=1)
        print(
            f"  packed the executors' archive in {time.perf_counter() - started:.0f}s", flush=True
        )
        for workers in worker_counts:
            with StandaloneCluster(
                Path(tmp) / f"spark-{workers}", workers=workers, memory_per_worker="3g"
            ) as cluster:
                args = {
                    "master": cluster.master_url,
                    "archive": str(archive),
                    "bootstrap": bootstrap,
                    "events": events,
                    "workdir": str(Path(tmp) / f"runs-{workers}"),
                }
                done = subprocess.run(
                    [sys.executable, "-m", "bench.cluster_scale", json.dumps(args)],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=3600,
                )
                if done.returncode != 0:
                    raise RuntimeError(f"cluster run failed: {done.stderr[-3000:]}")
                figures = json.loads(done.stdout.strip().splitlines()[-1])
            if figures["input_rows"] != events:
                raise RuntimeError(f"cluster run read {figures['input_rows']} of {events} rows")
            name = f"tumbling 60 s on a standalone cluster, {workers} worker(s) x 1 core"
            results.append(Result(name, events, figures["seconds"], windows=figures["windows"]))
            print(f"  {name}: {results[-1].rate:,.0f} events/s", flush=True)
    return results


def _drive(args: dict) -> dict:
    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.runtime.session import build_spark_session

    spark = build_spark_session(
        args["master"],
        {"spark.executor.memory": "2g", "spark.ui.enabled": "false"},
        app_name="flow-jobs-bench-cluster",
        archive=args["archive"],
    )
    figures: dict = {}
    for run in ("warm-up", "timed"):
        workdir = Path(args["workdir"]) / run
        workdir.mkdir(parents=True)
        doc = clicks_spec(args["bootstrap"], workdir).to_document()
        doc["name"] = f"bench-cluster-{workdir.parent.name}-{run}-{int(time.time())}"
        doc["checkpoint"] = {"location": (workdir / "checkpoint").as_uri()}
        runner = PipelineRunner(PipelineSpec.model_validate(doc), spark)
        started = time.perf_counter()
        runner.run(available_now=True)
        seconds = time.perf_counter() - started
        totals = runner.progress.totals() if runner.progress else None
        figures = {
            "seconds": seconds,
            "input_rows": runner.progress.input_rows() if runner.progress else 0,
            "windows": totals.windows_inserted + totals.windows_updated if totals else 0,
        }
    spark.stop()
    return figures


if __name__ == "__main__":
    print(json.dumps(_drive(json.loads(sys.argv[1]))))
