"""The fresh-process table of ``make bench-compare``: each job in a new process, the way
users run them.

* flow-jobs: ``flow-jobs run SPEC.toml --available-now -q``, the console script of this
  environment, on a spec written for the run (a fresh checkpoint, target and ledger
  pipeline name);
* the hand-written PySpark job: ``python -m bench.hand_written`` (``bench/hand_written.py``);
* for a shape the reader pre-aggregates, flow-jobs again with ``pre_aggregate = false``.

Each is timed from its process's start to its exit (JVM, session, embedded state store,
compile, every micro-batch, the writes), over the full topic (gross: N / T(N)) and over an
empty topic (start-up: T(empty)); net = N / (T(N) - T(empty)). The four runs of a shape
alternate the two jobs, empty-topic runs first.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FLOW_JOBS = Path(sys.executable).parent / "flow-jobs"


@dataclass
class ProcessRun:
    job: str  # "flow-jobs" | "hand-written PySpark"
    shape: str
    topic: str
    events: int
    seconds: float


def _timed(command: list[str], what: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    return seconds, done.stdout


#: (bootstrap, workdir, shape, topic, pre_aggregate) -> the PipelineSpec flow-jobs runs
SpecFor = Callable[[str, Path, str, str, bool], Any]
OURS, PLAIN, HAND = "flow-jobs", "flow-jobs, pre_aggregate = false", "hand-written PySpark"
#: The hand-written job on flow-jobs' state store (RocksDB): the like-for-like baseline
#: of a stateful shape whose state store is most of its time (the joins).
HAND_ROCKS = "hand-written PySpark, RocksDB"


def flow_jobs_run(
    spec_for: SpecFor,
    bootstrap: str,
    shape: str,
    topic: str,
    workdir: Path,
    pre_aggregate: bool = True,
) -> float:
    spec = spec_for(bootstrap, workdir, shape, topic, pre_aggregate)
    path = workdir / "spec.toml"
    path.write_text(spec.to_toml())
    seconds, _ = _timed(
        [str(FLOW_JOBS), "run", str(path), "--available-now", "-q"], f"flow-jobs {shape}"
    )
    return seconds


def hand_written_run(
    bootstrap: str, shape: str, topic: str, workdir: Path, state_store: str | None = None
) -> float:
    args = {"bootstrap": bootstrap, "shape": shape, "topic": topic, "workdir": str(workdir)}
    if state_store:
        args["state_store"] = state_store
    seconds, out = _timed(
        [sys.executable, "-m", "bench.hand_written", json.dumps(args)], f"hand-written {shape}"
    )
    json.loads(out.strip().splitlines()[-1])  # it finished and said what it read
    return seconds


def first_run_archive(spec_for: SpecFor, bootstrap: str, shape: str, empty_topic: str) -> str:
    """What flow-jobs' timed runs start with: the driver's class archive a user's first
    run leaves (``flow_jobs.runtime.class_archive``), written here by one untimed run on
    an empty topic when there is none; ``FLOW_JOBS_CLASS_ARCHIVE=off`` times runs
    without one, as before it."""
    import os

    from flow_jobs.runtime import class_archive
    from flow_jobs.settings import Settings

    chosen = Settings.from_env().class_archive
    options = class_archive.java_options(chosen, os.environ, {})
    if not options.startswith("-XX:ArchiveClassesAtExit="):
        return options.split()[0].split("=", 1)[-1] if options else "off"
    with tempfile.TemporaryDirectory(prefix="flow-bench-archive-") as work:
        # the run's stdout is the JVM's too: _timed returns once the JVM wrote it and exited
        seconds = flow_jobs_run(spec_for, bootstrap, shape, empty_topic, Path(work))
    archive = class_archive.java_options(chosen, os.environ, {})
    return f"written by an untimed first run ({seconds:.1f} s): {archive.split()[0]}"


def fresh_runs(
    spec_for: SpecFor,
    bootstrap: str,
    topics: dict[str, tuple[str, str, int]],
    folding: Sequence[str] = (),
    no_hand_written: Sequence[str] = (),
    like_for_like: Sequence[str] = (),
) -> list[ProcessRun]:
    """Each shape's runs: (flow-jobs, hand-written; flow-jobs with ``pre_aggregate =
    false`` for a shape in ``folding``; no hand-written job for one in
    ``no_hand_written``; the hand-written job on RocksDB too for one in ``like_for_like``)
    x (empty topic, full topic); ``topics``: per shape (empty topic,
    full topic, its events); ``spec_for`` makes flow-jobs' spec of a shape
    (``bench.compare.fresh_spec``)."""
    runs: list[ProcessRun] = []
    first_shape, (first_empty, _topic, _events) = next(iter(topics.items()))
    print(f"  class archive: {first_run_archive(spec_for, bootstrap, first_shape, first_empty)}")

    def ours(bootstrap: str, shape: str, topic: str, workdir: Path) -> float:
        return flow_jobs_run(spec_for, bootstrap, shape, topic, workdir)

    def plain(bootstrap: str, shape: str, topic: str, workdir: Path) -> float:
        return flow_jobs_run(spec_for, bootstrap, shape, topic, workdir, pre_aggregate=False)

    def rocks(bootstrap: str, shape: str, topic: str, workdir: Path) -> float:
        return hand_written_run(bootstrap, shape, topic, workdir, state_store="rocksdb")

    for shape, (empty_topic, topic, events) in topics.items():
        jobs: list[tuple[str, Callable[[str, str, str, Path], float]]] = [(OURS, ours)]
        if shape not in no_hand_written:
            jobs.append((HAND, hand_written_run))
        if shape in like_for_like:
            jobs.append((HAND_ROCKS, rocks))
        if shape in folding:
            jobs.append((PLAIN, plain))
        for name, n in ((empty_topic, 0), (topic, events)):
            for job, run in jobs:
                with tempfile.TemporaryDirectory(prefix="flow-bench-fresh-") as work:
                    workdir = Path(work) / f"{shape}-{job[:4]}-{int(time.time())}"
                    workdir.mkdir()
                    seconds = run(bootstrap, shape, name, workdir)
                runs.append(ProcessRun(job, shape, name, n, seconds))
                print(f"  fresh process, {shape}, {job}, {n:,} events: {seconds:.1f} s", flush=True)
    return runs


def fresh_table(runs: list[ProcessRun]) -> list[str]:
    """The markdown table: gross, start-up and net per shape and job, and the ratios."""
    lines = [
        "| shape | job | T(N) s | T(empty) s | gross events/s | net events/s | "
        "gross vs hand-written | net vs hand-written | net vs hand-written on RocksDB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape in dict.fromkeys(r.shape for r in runs):
        figures = {}
        for job in (HAND, HAND_ROCKS, OURS, PLAIN):
            mine = [r for r in runs if r.shape == shape and r.job == job]
            full = next((r for r in mine if r.events), None)
            empty = next((r for r in mine if not r.events), None)
            if full is None or empty is None:
                continue
            net = full.events / max(full.seconds - empty.seconds, 1e-9)
            figures[job] = (full, empty, full.events / full.seconds, net)
        base, rocks = figures.get(HAND), figures.get(HAND_ROCKS)
        for job, (full, empty, gross, net) in figures.items():
            ratios = f"{gross / base[2]:.2f} | {net / base[3]:.2f}" if base else "— | —"
            ratios += f" | {net / rocks[3]:.2f}" if rocks else " | —"
            lines.append(
                f"| {shape} | {job} | {full.seconds:.1f} | {empty.seconds:.1f} | {gross:,.0f} "
                f"| {net:,.0f} | {ratios} |"
            )
    return lines
