"""``make bench-latency``: event-to-target latency of a continuous run, flow-jobs beside
the same job hand-written in PySpark, in one invocation (issue 30, item 1).

One embedded broker; for each job a topic of its own, a fresh process (its JVM start,
imports and first micro-batches are its own, as when a user starts it) and a producer
thread in this process feeding that topic at a steady rate (``--rate``) from the moment
the process starts, as a running topic would:

* ``flow-jobs``: ``flow-jobs run SPEC.toml`` (continuous), the spec a 10 s tumbling
  window by ``user_id`` with ``count`` and ``sum(amount)``, lateness 5 s,
  ``emit = "current"``, MERGEd into Delta, ``[runtime] trigger_interval_ms`` as given
  (default: the spec's default);
* ``hand-written``: ``python -m bench.latency --hand-written-job ...``: what a Spark
  user writes for the same job with the same source (``flow_kafka``), ``from_json``,
  ``withWatermark``, ``window``, update output mode, a processing-time trigger of the
  same interval, each micro-batch MERGEd into Delta with ``deltalake`` in
  ``foreachBatch`` (the same sink: one row per window and key, upserted). Its session
  is ``build_spark_session``'s, as in ``bench.compare``: the same Spark settings as
  flow-jobs (state store, shuffle partitions), so the difference is flow-jobs' own.

Each record is ``{"user_id", "seq", "amount", "ts"}`` where ``ts`` is the wall clock (ms)
of its produce call, so event time follows real time and the producer knows the window
each record falls in. The producer keeps every record's key, ``ts`` and produce stamp
(``time.time()`` just before ``Producer.produce``), flushes every 10 ms tick, and ends
with one record per partition in a batch of its own (the embedded broker shows a
partition's offsets only up to the first record of its last batch: a record can wait up
to one tick to become visible, for both jobs alike).

**How a record's latency is measured (exact, no sampling).** A key lives in one
partition and a micro-batch reads an offset range of every partition, so after any
batch the records a (window, key) row has counted are exactly the first ``n`` that the
producer sent for that (window, key), ``n`` being the row's ``count``. After the run,
every version of the target is read (``DeltaTable(path, version=v)``); version ``v``
became visible at the modification time of ``_delta_log/<v>.json`` (the commit file is
written last; one machine, one clock for it and the producer). A record whose rank
within its (window, key), in produce order, is ``r`` *landed* at the first version whose
row for that (window, key) has ``count >= r``; its latency is that time less its produce
stamp. A count that decreases, exceeds what was produced, or a record that never lands
fails the run.

What is reported, per job: start-up (process start to the target's first rows); over
the records produced from ``--settle`` seconds after the first rows were seen to the end
of ``--duration`` (the steady state: the start-up backlog is behind), p50 / p95 / p99 /
max of event-to-target latency; the median and p95 per-batch wall time
(``triggerExecution`` of Spark's progress, over the batches with input that ended in
that span: flow-jobs' from its ledger's ``batch_ms``, the hand-written job's from the
``query.recentProgress`` it logs); and each figure's ratio flow-jobs / hand-written. A
table on stdout; ``--json PATH`` writes the figures too.

``--emit final`` (or ``current,final``) runs both jobs again with ``emit = "final"``
(Spark's append mode for the hand-written job) and reports, per window, the time from
the watermark passing its end to its rows landing: from the produce stamp of the first
record whose event time reaches the window's end plus the lateness (Spark's watermark,
the highest event time less the lateness, passes the end with that record) to the
version its rows appear in, all of them at once and complete, or the run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from flow_jobs.spec.models import RuntimeSpec
from flow_jobs_dev.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = "user_id STRING, seq BIGINT, amount DOUBLE, ts BIGINT"
WINDOW_MS = 10_000
#: Event time is the produce time, so records arrive nearly in order; 5 s keeps every
#: record on time (a late, dropped record would never land) across the two partitions.
LATENESS_MS = 5_000
TICK_S = 0.01
JOBS = ("flow-jobs", "hand-written")
DEFAULT_TRIGGER_MS = RuntimeSpec.model_fields["trigger_interval_ms"].default


# -- the producer -------------------------------------------------------------------------


class SteadyProducer(threading.Thread):
    """Produces ``rate`` records a second to ``topic`` until stopped, keeping each
    record's key, event time and produce stamp (index = ``seq``)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, keys: int, partitions: int) -> None:
        super().__init__(name=f"producer-{topic}", daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.keys, self.partitions = keys, partitions
        self.stamps: list[float] = []
        self.users: list[int] = []
        self.ts: list[int] = []
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as e:  # reported by the caller
            self.error = e

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 0, "enable.idempotence": False}
        )
        rng = random.Random(1)
        started = time.time()
        while not self.stop_event.is_set():
            due = int((time.time() - started) * self.rate)
            while len(self.stamps) < due:
                self._send(producer, rng.randrange(self.keys), rng)
            producer.flush()  # this tick's records on the broker now (see the docstring)
            pause = TICK_S - (time.time() - started) % TICK_S
            self.stop_event.wait(pause)
        # Each partition's last record in a batch of its own: visible to offset queries.
        for partition in range(self.partitions):
            self._send(producer, partition, rng)
            producer.flush()

    def _send(self, producer: Any, user: int, rng: random.Random) -> None:
        seq = len(self.stamps)
        stamp = time.time()
        ts = int(stamp * 1000)
        amount = rng.uniform(0.5, 120)
        value = f'{{"user_id": "u{user}", "seq": {seq}, "amount": {amount:.2f}, "ts": {ts}}}'
        while True:
            try:
                producer.produce(
                    self.topic,
                    value=value.encode(),
                    key=f"u{user}".encode(),
                    partition=user % self.partitions,
                )
                break
            except BufferError:
                producer.poll(0.01)
        self.stamps.append(stamp)
        self.users.append(user)
        self.ts.append(ts)

    def finish(self) -> int:
        self.stop_event.set()
        self.join()
        if self.error is not None:
            raise RuntimeError(f"the producer failed: {self.error!r}") from self.error
        return len(self.stamps)


# -- the jobs -----------------------------------------------------------------------------


def flow_jobs_spec(
    bootstrap: str, topic: str, workdir: Path, trigger_ms: int, emit: str
) -> dict[str, Any]:
    return {
        "name": f"latency-{workdir.name.lower().replace('_', '-')}",
        "sources": [
            {"name": "events", "topic": topic, "bootstrap_servers": bootstrap, "schema": SCHEMA}
        ],
        "transform": {
            "window": {
                "kind": "tumbling",
                "duration_ms": WINDOW_MS,
                "lateness_ms": LATENESS_MS,
                "event_time_column": "ts",
                "group_by": ["user_id"],
                "emit": emit,
                "aggregations": [
                    {"agg": "count", "as": "n"},
                    {"agg": "sum", "column": "amount", "as": "amount_sum"},
                ],
            }
        },
        "target": {"kind": "delta", "path": str(workdir / "target")},
        "checkpoint": {"location": str(workdir / "checkpoint")},
        "dead_letter": {"path": str(workdir / "dead_letters")},
        "runtime": {"trigger_interval_ms": trigger_ms},
    }


def hand_written_windows(timed: Any) -> Any:
    """The hand-written job's window: 10 s tumbling by ``user_id``, count and sum."""
    from pyspark.sql import functions as F

    return (
        timed.groupBy(F.window("et", f"{WINDOW_MS} milliseconds").alias("w"), "user_id")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("amount_sum"))
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "user_id",
            "n",
            "amount_sum",
        )
    )


def delta_upsert(target: str) -> Any:
    """The hand-written job's ``foreachBatch``: each micro-batch MERGEd into Delta."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    def upsert(batch: Any, _batch_id: int) -> None:
        out = batch.toArrow()
        if not out.num_rows:
            return
        try:
            table = DeltaTable(target)
        except TableNotFoundError:
            write_deltalake(target, out)
            return
        (
            table.merge(
                out,
                "t.window_start = s.window_start AND t.user_id = s.user_id",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    return upsert


def hand_written_job(
    bootstrap: str, topic: str, workdir: Path, trigger_ms: int, emit: str = "current"
) -> int:
    """The job as a Spark user writes it by hand, run until SIGTERM; every micro-batch's
    progress goes to ``workdir/progress.jsonl`` as it ends. ``emit = "current"`` is
    Spark's update output mode, ``"final"`` its append mode."""
    from bench.run import hand_written_events
    from flow_jobs.runtime.session import build_spark_session

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = build_spark_session(app_name="bench-latency-hand-written")
    timed = hand_written_events(spark, bootstrap, topic, SCHEMA, LATENESS_MS)
    windows = hand_written_windows(timed)
    upsert = delta_upsert(str(workdir / "target"))
    query = (
        windows.writeStream.outputMode("update" if emit == "current" else "append")
        .foreachBatch(upsert)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    seen: set[int] = set()
    with open(workdir / "progress.jsonl", "a", encoding="utf-8") as log:

        def drain() -> None:
            for progress in query.recentProgress:
                report = json.loads(progress.json)
                if report["batchId"] not in seen:
                    seen.add(report["batchId"])
                    log.write(json.dumps(report) + "\n")
                    log.flush()

        while not stop.is_set() and query.isActive:
            stop.wait(0.5)
            drain()
        failed = query.exception()
        query.stop()
        drain()
    spark.stop()
    if failed is not None:
        print(f"hand-written job failed: {failed}", file=sys.stderr)
        return 1
    return 0


@dataclass
class Run:
    """One job's run: its process, and what the analysis needs afterwards."""

    job: str
    emit: str
    workdir: Path
    process: subprocess.Popen[bytes]
    spawned: float  # wall clock
    producer: SteadyProducer
    spec_name: str | None = None
    first_rows: float = 0.0  # wall clock the target's first rows were seen
    measured: tuple[float, float] = (0.0, 0.0)  # produce-stamp span of the measured records

    @property
    def target(self) -> Path:
        return self.workdir / "target"


def start_job(
    job: str,
    emit: str,
    bootstrap: str,
    topic: str,
    workdir: Path,
    trigger_ms: int,
    producer: SteadyProducer,
) -> Run:
    import tomli_w

    workdir.mkdir(parents=True)
    log = open(workdir / "job.log", "wb")  # noqa: SIM115 (the process writes it)
    spec_name = None
    if job == "flow-jobs":
        spec = flow_jobs_spec(bootstrap, topic, workdir, trigger_ms, emit)
        spec_name = spec["name"]
        (workdir / "spec.toml").write_text(tomli_w.dumps(spec))
        command = [sys.executable, "-m", "flow_jobs.cli", "run", str(workdir / "spec.toml")]
    else:
        args = {
            "bootstrap": bootstrap,
            "topic": topic,
            "workdir": str(workdir),
            "trigger_ms": trigger_ms,
            "emit": emit,
        }
        command = [sys.executable, "-m", "bench.latency", "--hand-written-job", json.dumps(args)]
    spawned = time.time()
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    producer.start()  # data flows while the job starts, as it does for a user's job
    return Run(job, emit, workdir, process, spawned, producer, spec_name)


def wait_for(condition: Any, run: Run, timeout_s: float, what: str, every_s: float = 0.1) -> None:
    deadline = time.time() + timeout_s
    while not condition():
        if run.process.poll() is not None:
            raise RuntimeError(f"{run.job} exited ({run.process.returncode}) {what}:\n{_tail(run)}")
        if time.time() > deadline:
            raise TimeoutError(f"{run.job}: not {what} after {timeout_s:.0f} s:\n{_tail(run)}")
        time.sleep(every_s)


def _tail(run: Run) -> str:
    return (run.workdir / "job.log").read_text(errors="replace")[-3000:]


def counted(path: Path) -> int:
    """The records the target's latest version has counted (0 before it exists)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path)).to_pyarrow_table(columns=["n"])
    except TableNotFoundError:
        return 0
    return int(sum(v for v in table.column("n").to_pylist() if v is not None))


def closable(producer: SteadyProducer) -> int:
    """How many records fall in windows the watermark has passed (every record's, with
    ``emit = "current"``): Spark closes a window once the highest event time read, less
    the lateness, reaches its end."""
    highest = max(producer.ts)
    return sum(1 for ts in producer.ts if ts - ts % WINDOW_MS + WINDOW_MS + LATENESS_MS <= highest)


def run_job(
    job: str, emit: str, bootstrap: str, topic: str, workdir: Path, args: argparse.Namespace
) -> Run:
    producer = SteadyProducer(bootstrap, topic, args.rate, args.keys, args.partitions)
    run = start_job(job, emit, bootstrap, topic, workdir, args.trigger_ms, producer)
    try:
        wait_for(lambda: counted(run.target) > 0, run, 600, "writing rows", every_s=0.5)
        run.first_rows = time.time()
        print(
            f"  {job} (emit = {emit}): first rows in the target "
            f"{run.first_rows - run.spawned:.1f} s after the process started",
            flush=True,
        )
        begin = run.first_rows + args.settle
        time.sleep(max(0.0, begin - time.time()))
        time.sleep(args.duration)
        end = time.time()
        run.measured = (begin, end)
        produced = producer.finish()
        expected = produced if emit == "current" else closable(producer)
        wait_for(lambda: counted(run.target) >= expected, run, 120, "caught up", every_s=0.5)
        print(f"  {job}: {produced:,} records produced, {expected:,} in the target", flush=True)
    finally:
        if producer.is_alive():
            producer.stop_event.set()
        stop(run)
    return run


def stop(run: Run) -> None:
    if run.process.poll() is None:
        run.process.send_signal(signal.SIGTERM)
        try:
            run.process.wait(120)
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.wait()


# -- the analysis -------------------------------------------------------------------------


def versions(path: Path) -> list[tuple[int, float, dict[tuple[int, str], int]]]:
    """Every version of the target: (version, when it became visible, count by
    (window start in ms, user))."""
    from deltalake import DeltaTable

    log = path / "_delta_log"
    numbers = sorted(int(f.stem) for f in log.glob("*.json") if f.stem.isdigit())
    found = []
    for v in numbers:
        visible = (log / f"{v:020d}.json").stat().st_mtime
        table = DeltaTable(str(path), version=v).to_pyarrow_table(
            columns=["window_start", "user_id", "n"]
        )
        starts = table.column("window_start")
        per_ms = {"s": 1000, "ms": 1, "us": 1e-3, "ns": 1e-6}[starts.type.unit]
        counts = {
            (round(s * per_ms), u): n
            for s, u, n in zip(
                starts.cast("int64").to_pylist(),
                table.column("user_id").to_pylist(),
                table.column("n").to_pylist(),
                strict=True,
            )
        }
        found.append((v, visible, counts))
    return found


def landing_times(run: Run, found: list) -> np.ndarray:
    """Each record's landing time (by seq): see the module docstring."""
    producer = run.producer
    by_group: dict[tuple[int, str], list[int]] = {}
    for seq, (user, ts) in enumerate(zip(producer.users, producer.ts, strict=True)):
        by_group.setdefault((ts - ts % WINDOW_MS, f"u{user}"), []).append(seq)
    landed = np.full(len(producer.stamps), np.nan)
    done: dict[tuple[int, str], int] = {}
    for v, visible, counts in found:
        for group, n in counts.items():
            before = done.get(group, 0)
            if n < before or n > len(by_group.get(group, ())):
                raise RuntimeError(
                    f"{run.job}: version {v} counts {n} records for {group}: before "
                    f"{before}, produced {len(by_group.get(group, ()))}"
                )
            landed[by_group[group][before:n]] = visible
            done[group] = n
    missing = int(np.isnan(landed).sum())
    if missing:
        raise RuntimeError(f"{run.job}: {missing} records never landed")
    return landed


def batch_times(run: Run) -> list[dict[str, float]]:
    """Each micro-batch: when it ended (wall clock), its input rows and its
    ``triggerExecution`` in ms."""
    if run.job == "flow-jobs":
        from flow_jobs.ledger.location import state_store_schema, state_store_url
        from flow_jobs.ledger.store import LedgerStore

        store = LedgerStore(state_store_url(), state_store_schema())
        rows = store.recent_batches(run.spec_name or "", limit=1_000_000)
        return [
            {
                "end": r["committed_at"].timestamp(),
                "rows": r["input_rows"] or 0,
                "ms": r["batch_ms"],
            }
            for r in rows
            if r["batch_ms"] is not None
        ]
    out = []
    for line in (run.workdir / "progress.jsonl").read_text().splitlines():
        p = json.loads(line)
        ms = p["durationMs"].get("triggerExecution", 0)
        began = datetime.fromisoformat(p["timestamp"]).timestamp()
        out.append({"end": began + ms / 1000, "rows": p["numInputRows"], "ms": ms})
    return out


@dataclass
class Figures:
    job: str
    emit: str
    records: int  # produced in the whole run
    #: current: the records produced in the measured span; final: the windows whose
    #: closing event (see ``closing_latencies``) was produced in it
    measured: int
    rate: float  # records produced per second over the measured span
    startup_s: float  # process start to the target's first rows
    first_record_s: float | None  # current: the first record's latency (start-up included)
    #: current: event to target, per record; final: watermark passing the window's end
    #: to its row in the target, per window (p50 / p95 / p99 / max)
    latency_ms: dict[str, float] = field(default_factory=dict)
    batches: int = 0  # with input, ended in the measured span
    batch_ms: dict[str, float] = field(default_factory=dict)  # p50 / p95
    target_versions: int = 0


QUANTILES = {"p50": 50, "p95": 95, "p99": 99}
BATCH_QUANTILES = {"p50": 50, "p95": 95}


def closing_latencies(run: Run, found: list) -> tuple[np.ndarray, np.ndarray]:
    """``emit = "final"``: for each window, the produce stamp of its closing event (the
    first record whose event time reaches the window's end plus the lateness: the
    watermark passes the end with it) and the time its rows landed, for the windows
    closed in the run. Each window's rows must land in one version, with every record."""
    producer = run.producer
    ts = np.maximum.accumulate(np.array(producer.ts))
    stamps = np.array(producer.stamps)
    produced: dict[tuple[int, str], int] = {}
    for user, t in zip(producer.users, producer.ts, strict=True):
        group = (t - t % WINDOW_MS, f"u{user}")
        produced[group] = produced.get(group, 0) + 1
    landed: dict[int, float] = {}
    seen: set[tuple[int, str]] = set()
    for v, visible, counts in found:
        for group, n in counts.items():
            first = landed.setdefault(group[0], visible)
            if n != produced.get(group) or (group not in seen and first != visible):
                raise RuntimeError(
                    f"{run.job}: version {v} has {n} records for {group} (produced "
                    f"{produced.get(group)}), its window's first rows landed at {first}"
                )
            seen.add(group)
    closing, landing = [], []
    for start, visible in sorted(landed.items()):
        i = int(np.searchsorted(ts, start + WINDOW_MS + LATENESS_MS))
        if i < len(ts):
            closing.append(stamps[i])
            landing.append(visible)
    return np.array(closing), np.array(landing)


def figures(run: Run) -> Figures:
    found = versions(run.target)
    stamps = np.array(run.producer.stamps)
    begin, end = run.measured
    first_rows = next(visible for _v, visible, counts in found if counts)
    first_record_s = None
    if run.emit == "current":
        landed = landing_times(run, found)
        inside = (stamps >= begin) & (stamps < end)
        latency = (landed[inside] - stamps[inside]) * 1000
        first_record_s = float(landed[0] - stamps[0])
    else:
        closing, landing = closing_latencies(run, found)
        inside = (closing >= begin) & (closing < end)
        latency = (landing[inside] - closing[inside]) * 1000
    if not len(latency):
        raise RuntimeError(f"{run.job}: nothing measured (a longer --duration?)")
    batches = [b["ms"] for b in batch_times(run) if b["rows"] > 0 and begin <= b["end"] <= end + 1]
    in_span = int(((stamps >= begin) & (stamps < end)).sum())
    return Figures(
        job=run.job,
        emit=run.emit,
        records=len(stamps),
        measured=int(inside.sum()),
        rate=in_span / (end - begin),
        startup_s=first_rows - run.spawned,
        first_record_s=first_record_s,
        latency_ms={q: float(np.percentile(latency, p)) for q, p in QUANTILES.items()}
        | {"max": float(latency.max())},
        batches=len(batches),
        batch_ms={q: float(np.percentile(batches, p)) for q, p in BATCH_QUANTILES.items()}
        if batches
        else {},
        target_versions=len(found),
    )


def report(results: list[Figures], emit: str) -> str:
    unit = "records measured" if emit == "current" else "windows measured"
    what = "latency" if emit == "current" else "close to target"
    cols: list[tuple[str, Any, str]] = [
        ("start-up s", lambda f: f.startup_s, ".1f"),
        (unit, lambda f: f.measured, ","),
        ("events/s", lambda f: f.rate, ",.0f"),
        *(
            (f"{what} {q} ms", (lambda f, q=q: f.latency_ms[q]), ",.0f")
            for q in (*QUANTILES, "max")
        ),
        ("batches", lambda f: f.batches, ","),
        *(
            (f"batch {q} ms", (lambda f, q=q: f.batch_ms.get(q, float("nan"))), ",.0f")
            for q in BATCH_QUANTILES
        ),
    ]
    lines = [
        f"emit = {emit}:",
        "",
        "| job | " + " | ".join(c[0] for c in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for f in results:
        lines.append(f"| {f.job} | " + " | ".join(format(c[1](f), c[2]) for c in cols) + " |")
    by_job = {f.job: f for f in results}
    if len(by_job) == 2:
        ours, hand = by_job["flow-jobs"], by_job["hand-written"]
        ratios = [
            "flow-jobs / hand-written",
            *(
                "" if c[0] in (unit, "events/s", "batches") else f"{c[1](ours) / c[1](hand):.2f}"
                for c in cols
            ),
        ]
        lines.append("| " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench.latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rate", type=int, default=1_000, help="events/s (default 1,000)")
    parser.add_argument(
        "--duration", type=float, default=120.0, help="measured seconds per job (default 120)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=10.0,
        help="seconds after a job's first rows in the target before measuring (default 10)",
    )
    parser.add_argument(
        "--trigger-ms",
        type=int,
        default=DEFAULT_TRIGGER_MS,
        help=f"both jobs' trigger interval (default {DEFAULT_TRIGGER_MS}, the "
        "spec's [runtime] trigger_interval_ms default)",
    )
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument(
        "--emit",
        default="current",
        help='"current" (default), "final", or "current,final": each emit runs both jobs',
    )
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON here too")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--hand-written-job", metavar="ARGS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hand_written_job:  # the subprocess of the hand-written job
        job = json.loads(args.hand_written_job)
        return hand_written_job(
            job["bootstrap"], job["topic"], Path(job["workdir"]), job["trigger_ms"], job["emit"]
        )
    jobs = [j for j in args.jobs.split(",") if j]
    emits = [e for e in args.emit.split(",") if e]
    if unknown := set(jobs) - set(JOBS):
        parser.error(f"unknown jobs {sorted(unknown)}; choose from {JOBS}")
    if unknown := set(emits) - {"current", "final"}:
        parser.error(f"unknown emit {sorted(unknown)}; choose from current, final")

    root = Path(tempfile.mkdtemp(prefix="flow-latency-"))
    server = None
    if not os.environ.get("FLOW_STATE_STORE_URL"):
        # The ledger in an embedded Postgres this process holds, so flow-jobs' batch
        # times can be read once its process has exited.
        import pgserver

        server = pgserver.get_server(root / "postgres", cleanup_mode="stop")
        os.environ["FLOW_STATE_STORE_URL"] = str(server.get_uri())
    os.environ.setdefault("FLOW_STATE_STORE_SCHEMA", f"latency_{int(time.time())}")
    command = " ".join(["python -m bench.latency", *(argv if argv is not None else sys.argv[1:])])
    print(
        f"{command}: {args.rate:,} events/s, {args.duration:.0f} s measured per job after "
        f"{args.settle:.0f} s of settling, trigger {args.trigger_ms} ms, {WINDOW_MS // 1000} s "
        f"tumbling windows (lateness {LATENESS_MS // 1000} s) over {args.keys} keys",
        flush=True,
    )
    results: list[Figures] = []
    try:
        with EmbeddedBroker() as broker:
            for emit in emits:
                for job in jobs:
                    name = f"{job}-{emit}"
                    broker.create_topic(f"latency-{name}", partitions=args.partitions)
                    run = run_job(
                        job, emit, broker.bootstrap_servers, f"latency-{name}", root / name, args
                    )
                    results.append(figures(run))
    finally:
        if server is not None:
            server.cleanup()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print()
    for emit in emits:
        print(report([f for f in results if f.emit == emit], emit))
        print()
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                    "rate": args.rate,
                    "duration_s": args.duration,
                    "settle_s": args.settle,
                    "trigger_ms": args.trigger_ms,
                    "window_ms": WINDOW_MS,
                    "lateness_ms": LATENESS_MS,
                    "keys": args.keys,
                    "partitions": args.partitions,
                    "results": [asdict(f) for f in results],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
