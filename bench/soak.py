"""``make soak-long``: the main job (``flow_jobs_dev/clicks_per_minute.toml``, the demo's)
as a continuous ``flow-jobs run`` for an hour, fed at a steady rate, with a broker
restart, a Postgres restart and a kill -9 of the run on a schedule; every minute a row of
figures into a CSV, a plot of them at the end, and the target checked against a
reference computed from the records' definition.

What runs (each its own process, as a user runs them): the embedded broker (tansu, its
topics in memory), an embedded PostgreSQL (pgserver) as the state store, the run
(``flow-jobs run SPEC``, its Delta target and checkpoint on local disk), and this
process: a producer thread and the schedule.

**The records.** Record ``seq`` is a function of ``seq`` alone (``Stream``): its user
(500 users, each in one of 4 partitions), page, amount (whole cents) and event time
``start + seq / rate`` — its due time, not the moment it was sent, so records held back
while the broker is away are sent late but in order, as a producer's buffer would. The
reference (count, sum and max of ``amount`` per minute and user) is computed from that
definition, not from what the target holds.

**The broker restart.** The broker keeps its topics in memory, so a restarted broker
must be given the records it held before, at the same offsets, before the run can reach
it. The producer pauses (nothing in flight: stopping the broker mid-produce can lose the
batch being written, the broker's weakness, not the reader's), the broker is stopped,
a new one starts on another port and is given every record sent so far, in order, each
at its old offset (checked); only then does a TCP proxy (``flow_jobs_dev.faults``) open
on the run's bootstrap port. Until then the run sees the broker's port refused (an
outage); once it can connect, the broker it is told of (the new port) holds every
record it held before. The producer resumes on the new broker.

**The Postgres restart**: ``pg_ctl stop -m fast``, down ``--down-s`` seconds, started
again on its socket. **The kill -9**: SIGKILL to the run's driver process (its JVM ends
with it; if not, it is killed too and the event says so), down ``--down-s`` seconds,
then ``flow-jobs run`` again on the same checkpoint and state store.

**Each minute** (``soak.csv``): records sent and read (the ledger's last end offsets),
the lag between them in records and in seconds of input, the watermark's lag behind the
wall clock, RSS of the driver, the JVM, the Python workers (the JVM's Python
descendants) and the broker, the state's rows (``flow_state_groups`` from the run's
metrics endpoint) and bytes on disk (``checkpoint/state``), the ledger's rows and
bytes, and the minute's batches with their ``batch_ms`` (Spark's ``triggerExecution``)
median and maximum and the median of the rest of a batch around its compute and write
(``batch_ms`` less the ledger's ``compute_ms`` and ``write_ms``: Spark's planning, its
offset and commit logs, the sink's other steps). A figure that could not be read that
minute (the run restarting, Postgres away) is left empty.

**At the end** the producer stops, one record per partition far past the last window
closes every window, and once the run has read everything and written every reference
window it is stopped (SIGTERM); the target must hold each reference (window, user)
exactly once, with its count, max and sum (relative 1e-9: a float sum's order is not
fixed) equal, and nothing else.

``--find-peak`` measures the rate to soak at: continuous runs without faults, fed at
rising rates (``--peak-steps``, each with a broker and a run of its own, measured
``--peak-step-s`` after the run's first batch and again half a step later); a rate is
sustained if the lag at both is within ``PEAK_LAG_S`` seconds of input and the producer
kept that rate (the peak is this machine's: the producer shares its two cores with the
run). ``make soak-long``
measures the peak first unless ``RATE`` is given, then soaks at half of it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.faults import Postgres, TcpProxy
from flow_jobs_dev.service import free_port

ROOT = Path(__file__).resolve().parent.parent
MAIN_JOB = ROOT / "flow_jobs_dev" / "clicks_per_minute.toml"
TOPIC = "clicks"
SCHEMA = "soak"
USERS = 500
PARTITIONS = 4
PAGES = ("/", "/search", "/item", "/cart", "/checkout")
WINDOW_MS = 60_000  # the main job's tumbling minute
LATENESS_MS = 5_000  # and its lateness
TICK_S = 0.05
#: a rate is sustained while the lag stays within this many seconds of input (a rate
#: 10% over what the run sustains adds 6 s a minute) and the producer keeps it up
PEAK_LAG_S = 5.0
#: The reader's retries on the main job's source (backoff doubling from 250 ms, capped
#: at 30 s a try: 20 retries wait out about 7 minutes): the broker restart, with the
#: replay of every record sent so far, outlasts the default 6.
SOURCE_RETRIES = 20
FAULTS = ("broker", "postgres", "kill")


# -- the records ---------------------------------------------------------------------------


#: a record's ``seq``: one (an int) or many (a numpy array), the formulas being the same
Seq = Any


@dataclass(frozen=True)
class Stream:
    """Record ``seq``, from ``seq`` alone: ``record`` sends it, ``reference`` counts it,
    both through ``users``, ``ts`` and ``cents``."""

    start_ms: int
    rate: int

    @staticmethod
    def users(seq: Seq) -> Seq:
        return (seq * 7_919 + seq // 7) % USERS

    def ts(self, seq: Seq) -> Seq:
        return self.start_ms + seq * 1000 // self.rate

    @staticmethod
    def cents(seq: Seq) -> Seq:
        return (seq * 37 + 11) % 20_000

    def record(self, seq: int) -> tuple[int, bytes, bytes]:
        """(partition, key, value) of record ``seq``."""
        user = self.users(seq)
        value = (
            f'{{"user_id":"u{user:03d}","page":"{PAGES[seq % len(PAGES)]}",'
            f'"amount":{self.cents(seq) / 100!r},"ts":{self.ts(seq)}}}'
        )
        return user % PARTITIONS, f"u{user:03d}".encode(), value.encode()

    def reference(self, n: int) -> dict[tuple[int, str], tuple[int, float, float]]:
        """{(window start ms, user): (count, sum, max)} over records ``0..n-1``, a few
        million at a time."""
        first = self.start_ms // WINDOW_MS
        size = (int(self.ts(np.int64(n - 1))) // WINDOW_MS - first + 1) * USERS
        counts = np.zeros(size, dtype=np.int64)
        sums = np.zeros(size)
        maxes = np.full(size, -np.inf)
        for lo in range(0, n, 4_000_000):
            seq = np.arange(lo, min(n, lo + 4_000_000), dtype=np.int64)
            group = (self.ts(seq) // WINDOW_MS - first) * USERS + self.users(seq)
            amount = self.cents(seq) / 100
            counts += np.bincount(group, minlength=size)
            sums += np.bincount(group, amount, minlength=size)
            np.maximum.at(maxes, group, amount)
        return {
            ((first + int(g) // USERS) * WINDOW_MS, f"u{int(g) % USERS:03d}"): (
                int(counts[g]),
                float(sums[g]),
                float(maxes[g]),
            )
            for g in np.flatnonzero(counts)
        }


def _producer(bootstrap: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    from flow_jobs.librdkafka_logs import librdkafka_logger

    # One request in flight per connection: a retried request cannot reorder records,
    # so a record's offset is its place in its partition's order (the replay needs it).
    # zstd, as a high-rate topic's producers use: the broker keeps its topics in memory,
    # about 16 bytes a record so (100 uncompressed), an hour at half the peak included.
    config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": False,
        "max.in.flight.requests.per.connection": 1,
        "compression.type": "zstd",
        "linger.ms": 5,
        "logger": librdkafka_logger(),
    }
    return Producer({**config, **extra})


def _produce(producer: Any, stream: Stream, seq: int, on_delivery: Any) -> None:
    partition, key, value = stream.record(seq)
    while True:
        try:
            producer.produce(TOPIC, value, key, partition=partition, on_delivery=on_delivery)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)


class SteadyProducer(threading.Thread):
    """Sends record ``seq`` once it is due (``seq / rate`` seconds after the start),
    flushing every tick; ``pause()`` returns once nothing is in flight."""

    def __init__(self, stream: Stream, bootstrap: str, started: float) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.stream, self.bootstrap, self.started = stream, bootstrap, started
        self.rate = stream.rate
        self.sent = 0  # records produced and acknowledged, 0..sent-1
        self.per_partition = [0] * PARTITIONS
        self.error: str | None = None
        self._halt = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._idle = threading.Event()
        self._lock = threading.Lock()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error = f"record not delivered: {err}"
            return
        with self._lock:
            self.per_partition[msg.partition()] += 1
            if msg.offset() != self.per_partition[msg.partition()] - 1:
                self.error = f"record at offset {msg.offset()} of {msg.partition()} out of order"

    def run(self) -> None:
        producer = _producer(self.bootstrap)
        seq = 0
        while not self._halt.is_set():
            if not self._running.is_set():
                producer.flush()
                self.sent = seq
                self._idle.set()
                self._running.wait(1)
                if self._running.is_set():
                    producer = _producer(self.bootstrap)
                continue
            due = int((time.time() - self.started) * self.rate)
            while seq < due and self._running.is_set():
                _produce(producer, self.stream, seq, self._delivered)
                seq += 1
                if seq % 5_000 == 0:
                    producer.poll(0)
            producer.flush()  # this tick's records on the broker (their offsets visible)
            self.sent = seq
            self._halt.wait(TICK_S)
        producer.flush()
        self.sent = seq

    def delivered(self) -> int:
        """Records the broker has acknowledged so far (``sent`` counts at a tick's end)."""
        with self._lock:
            return sum(self.per_partition)

    def pause(self) -> None:
        self._idle.clear()
        self._running.clear()
        if not self._idle.wait(120):
            raise TimeoutError("the producer did not pause")

    def resume(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._running.set()

    def stop(self) -> None:
        self._halt.set()
        self._running.set()
        if self.is_alive():
            self.join(120)


def replay(stream: Stream, bootstrap: str, n: int, per_partition: list[int]) -> float:
    """Records ``0..n-1`` onto a new broker, each at its old offset; seconds taken."""
    began = time.time()
    counts = [0] * PARTITIONS
    wrong: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            wrong.append(str(err))
            return
        p = msg.partition()
        if msg.offset() != counts[p]:
            wrong.append(f"offset {msg.offset()} in partition {p}, expected {counts[p]}")
        counts[p] += 1

    producer = _producer(bootstrap, **{"linger.ms": 50, "batch.size": 1_000_000})
    for seq in range(n):
        _produce(producer, stream, seq, delivered)
        if seq % 10_000 == 0:
            producer.poll(0)
    producer.flush()
    if wrong or counts != per_partition:
        raise RuntimeError(f"replay: {wrong[:3]}; partitions {counts} against {per_partition}")
    return time.time() - began


# -- the run and what it holds ---------------------------------------------------------------


class Run:
    """``flow-jobs run SPEC`` as a process of its own, started again after a kill."""

    def __init__(self, spec: Path, env: dict[str, str], log: Path) -> None:
        self.spec, self.env, self.log = spec, env, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 (the process writes it)
        command = [sys.executable, "-m", "flow_jobs.cli", "run", str(self.spec)]
        self.process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> str:
        """SIGKILL to the driver; its JVM is awaited, and killed if it outlives it."""
        import psutil

        assert self.process is not None
        tree = psutil.Process(self.process.pid).children(recursive=True)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        _, alive = psutil.wait_procs(tree, timeout=60)
        for p in alive:
            p.kill()
        return f"; {len(alive)} descendants outlived it 60 s and were killed" if alive else ""

    def stop(self) -> int | None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(180)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None

    def rss_mb(self) -> dict[str, float | None]:
        """RSS of the driver, the JVM and the Python workers (the JVM's Python descendants)."""
        import psutil

        out: dict[str, float | None] = {"driver": None, "jvm": None, "workers": None}
        if not self.alive():
            return out
        assert self.process is not None
        try:
            driver = psutil.Process(self.process.pid)
            out["driver"] = driver.memory_info().rss / 2**20
            jvm = [p for p in driver.children(recursive=True) if p.name() == "java"]
            if jvm:
                out["jvm"] = sum(p.memory_info().rss for p in jvm) / 2**20
                workers = [
                    p
                    for j in jvm
                    for p in j.children(recursive=True)
                    if p.name().startswith("python")
                ]
                out["workers"] = sum(p.memory_info().rss for p in workers) / 2**20
        except psutil.Error:
            pass
        return out


def _offsets_sum(value: Any) -> int:
    """Records read, from a ledger row's ``end_offsets`` (every partition's offset)."""
    if isinstance(value, dict):
        return sum(_offsets_sum(v) for k, v in value.items() if not str(k).startswith("_"))
    return int(value) if isinstance(value, int) else 0


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def metric(text: str, name: str) -> float | None:
    match = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(match.group(1)) if match else None


@dataclass
class Soak:
    out: Path
    stream: Stream
    producer: SteadyProducer
    run: Run
    pipeline: str
    store_url: str
    metrics_port: int
    checkpoint: Path
    broker_pid: Any
    started: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    last_sample: float = 0.0
    closing: int = 0  # the records sent at the end to close every window

    def ledger(self, since: float) -> tuple[int | None, list[float], int | None, int | None, Any]:
        """(records read, batch_ms of batches since, ledger rows, ledger bytes, watermark)."""
        import psycopg

        try:
            with psycopg.connect(self.store_url, connect_timeout=3, autocommit=True) as c:
                last = c.execute(
                    f"SELECT end_offsets, global_watermark FROM {SCHEMA}.batches "
                    "WHERE pipeline = %s ORDER BY committed_at DESC LIMIT 1",
                    (self.pipeline,),
                ).fetchone()
                ms = c.execute(
                    f"SELECT batch_ms, batch_ms - coalesce(compute_ms, 0) - coalesce(write_ms, 0) "
                    f"FROM {SCHEMA}.batches WHERE pipeline = %s "
                    "AND committed_at > to_timestamp(%s) AND batch_ms IS NOT NULL",
                    (self.pipeline, since),
                ).fetchall()
                count, size = c.execute(
                    f"SELECT count(*), pg_total_relation_size('{SCHEMA}.batches') "
                    f"FROM {SCHEMA}.batches"
                ).fetchone()
        except psycopg.Error:
            return None, [], None, None, None
        if last is None:
            return 0, [], count, size, None
        return _offsets_sum(last[0]), [(r[0], r[1]) for r in ms], count, size, last[1]

    def sample(self) -> dict[str, Any]:
        import psutil

        now = time.time()
        since, self.last_sample = self.last_sample or self.started, now
        sent = self.producer.delivered() + self.closing
        read, batch_ms, ledger_rows, ledger_bytes, watermark = self.ledger(since)
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=3
            ) as r:
                text = r.read().decode()
        except OSError:
            text = ""
        broker_mb = None
        if (pid := self.broker_pid()) is not None:  # (psutil.Process(None) is this one)
            with contextlib.suppress(psutil.Error):
                broker_mb = psutil.Process(pid).memory_info().rss / 2**20
        rss = self.run.rss_mb()
        lag = None if read is None else sent - read
        row = {
            "minute": round((now - self.started) / 60, 2),
            "sent": sent,
            "read": read,
            "lag_records": lag,
            # records due but not yet sent: the producer behind its rate (or paused)
            "unsent": max(0, int((now - self.started) * self.stream.rate) - sent),
            "lag_s": None if lag is None else round(lag / self.stream.rate, 2),
            "watermark_lag_s": (
                None if watermark is None else round(now - watermark.timestamp(), 1)
            ),
            "rss_driver_mb": rss["driver"],
            "rss_jvm_mb": rss["jvm"],
            "rss_workers_mb": rss["workers"],
            "rss_broker_mb": broker_mb,
            "state_rows": metric(text, "flow_state_groups"),
            "state_mb": dir_bytes(self.checkpoint / "state") / 2**20,
            "ledger_rows": ledger_rows,
            "ledger_mb": None if ledger_bytes is None else ledger_bytes / 2**20,
            "batches": len(batch_ms),
            "batch_ms_p50": float(np.median([b for b, _ in batch_ms])) if batch_ms else None,
            "batch_ms_max": max(b for b, _ in batch_ms) if batch_ms else None,
            # the rest of a batch around its compute and write (the module docstring)
            "spark_ms_p50": float(np.median([o for _, o in batch_ms])) if batch_ms else None,
            "event": "",
        }
        for k, v in row.items():
            if isinstance(v, float):
                row[k] = round(v, 1)
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row

    def note(self, what: str) -> None:
        """Logs an event: its first words (up to a colon) label it on the plot."""
        self.events.append((time.time(), what))
        print(f"[{(time.time() - self.started) / 60:6.2f} min] {what}", flush=True)


# -- the plot -------------------------------------------------------------------------------


def plot(
    rows: list[dict[str, Any]], events: list[tuple[float, str]], path: Path, title: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(name: str) -> list[float]:
        return [float("nan") if r[name] in (None, "") else float(r[name]) for r in rows]

    minutes = series("minute")
    fig, axes = plt.subplots(4, 1, figsize=(11, 13), sharex=True)
    lag, rss, state, batch = axes
    lag.plot(minutes, series("lag_s"), label="lag: records behind, in s of input")
    lag.plot(minutes, series("watermark_lag_s"), label="watermark behind the wall clock, s")
    lag.set_ylabel("s")
    for name, label in (
        ("rss_driver_mb", "driver"),
        ("rss_jvm_mb", "JVM"),
        ("rss_workers_mb", "Python workers"),
        ("rss_broker_mb", "broker (tansu, topics in memory)"),
    ):
        rss.plot(minutes, series(name), label=label)
    rss.set_ylabel("RSS MB")
    state.plot(minutes, series("state_rows"), label="state rows", color="C0")
    state.set_ylabel("rows")
    disk = state.twinx()
    disk.plot(minutes, series("state_mb"), label="state on disk MB", color="C1")
    disk.plot(minutes, series("ledger_mb"), label="ledger table MB", color="C2")
    disk.set_ylabel("MB")
    disk.legend(loc="upper right", fontsize=8)
    batch.plot(minutes, series("batch_ms_p50"), label="batch_ms median in the minute")
    batch.plot(minutes, series("batch_ms_max"), label="batch_ms max in the minute")
    batch.plot(minutes, series("spark_ms_p50"), label="batch_ms - compute_ms - write_ms, median")
    batch.set_ylabel("ms")
    batch.set_xlabel("minutes")
    for ax in axes:
        for at, _ in events:
            ax.axvline(at, color="grey", linestyle="--", linewidth=0.8)
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(alpha=0.3)
    for at, what in events:
        lag.annotate(what.split(":")[0], (at, 1), xycoords=("data", "axes fraction"),
                     fontsize=8, rotation=90, va="top", ha="right")  # fmt: skip
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# -- the soak -------------------------------------------------------------------------------


def run_env(bootstrap: str, data: Path, store_url: str) -> dict[str, str]:
    """The run's environment: the main job's broker, data folder and state store."""
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "FLOW_DATA_DIR": str(data),
        "FLOW_STATE_STORE_URL": store_url,
        "FLOW_STATE_STORE_SCHEMA": SCHEMA,
    }


def job_spec(out: Path, metrics_port: int) -> Path:
    """The main job as the demo ships it, with more reader retries (``SOURCE_RETRIES``)
    and a metrics port."""
    import tomli_w

    doc = tomllib.loads(MAIN_JOB.read_text())
    doc["sources"][0]["retries"] = SOURCE_RETRIES
    doc.setdefault("runtime", {})["metrics_port"] = metrics_port
    path = out / "soak.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def target_windows(path: Path) -> dict[tuple[int, str], tuple[int, float, float]]:
    from deltalake import DeltaTable

    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    out: dict[tuple[int, str], tuple[int, float, float]] = {}
    for row in rows:
        key = (int(row["window_start"].timestamp() * 1000), row["user_id"])
        if key in out:
            raise AssertionError(f"window {key} written twice")
        out[key] = (row["clicks"], row["amount_sum"], row["amount_max"])
    return out


def compare(actual: dict, expected: dict) -> list[str]:
    problems = [f"missing {k}" for k in sorted(set(expected) - set(actual))[:5]]
    problems += [f"unexpected {k}" for k in sorted(set(actual) - set(expected))[:5]]
    for k in sorted(set(actual) & set(expected)):
        (c, s, m), (ec, es, em) = actual[k], expected[k]
        if c != ec or m != em or abs(s - es) > 1e-9 * max(1.0, abs(es)):
            problems.append(f"{k}: {actual[k]} against {expected[k]}")
    return problems


def soak(args: argparse.Namespace, rate: int, faults: list[tuple[float, str]], out: Path) -> dict:
    """One continuous run at ``rate`` for ``args.minutes`` with ``faults`` (minute, kind);
    the figures in ``out``; raises if the target is not the reference."""
    out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="flow-soak-"))
    postgres = Postgres(data / "postgres")
    port = free_port()
    broker = EmbeddedBroker(port=port, log_path=out / "broker.log").start()
    broker.create_topic(TOPIC, PARTITIONS)
    proxy: TcpProxy | None = None
    metrics_port = free_port()
    env = run_env(f"127.0.0.1:{port}", data, postgres.url)
    run = Run(job_spec(out, metrics_port), env, out / "run.log")
    started = time.time()
    stream = Stream(int(started * 1000), rate)
    producer = SteadyProducer(stream, broker.bootstrap_servers, started)
    holder = {"broker": broker}

    def broker_pid() -> int | None:
        process = holder["broker"]._process
        return process.pid if process is not None else None

    s = Soak(
        out, stream, producer, run, "clicks-per-minute", postgres.url, metrics_port,
        data / ".flow" / "clicks-per-minute" / "checkpoint", broker_pid, started,
    )  # fmt: skip
    run.start()
    producer.start()
    s.note(f"start: {rate:,} events/s")
    pending = sorted(faults)
    next_sample = started
    end = started + args.minutes * 60
    try:
        while time.time() < end:
            if producer.error:
                raise RuntimeError(producer.error)
            if not run.alive():
                s.note(f"run exited by itself: code {run.process.returncode}, started again")
                run.start()
            if pending and time.time() >= started + pending[0][0] * 60:
                _, kind = pending.pop(0)
                if kind == "broker":
                    producer.pause()
                    n, per_partition = producer.sent, list(producer.per_partition)
                    down_at = time.time()
                    if proxy is not None:
                        proxy.down()
                    holder["broker"].stop()
                    time.sleep(args.down_s)
                    new = EmbeddedBroker(log_path=out / "broker.log").start()
                    holder["broker"] = new
                    new.create_topic(TOPIC, PARTITIONS)
                    took = replay(stream, new.bootstrap_servers, n, per_partition)
                    proxy = TcpProxy("127.0.0.1", new.port, port=port).up()
                    producer.resume(new.bootstrap_servers)
                    s.note(
                        f"broker restarted: down {time.time() - down_at:.0f} s "
                        f"({n:,} records replayed in {took:.0f} s)"
                    )
                elif kind == "postgres":
                    down_at = time.time()
                    postgres.stop("fast")
                    time.sleep(args.down_s)
                    postgres.start()
                    s.note(f"Postgres restarted: down {time.time() - down_at:.0f} s")
                elif kind == "kill":
                    extra = run.kill9()
                    time.sleep(args.down_s)
                    run.start()
                    s.note(f"run killed -9: started again {args.down_s:.0f} s later{extra}")
            if time.time() >= next_sample:
                s.sample()
                while next_sample <= time.time():  # slots a fault took are skipped
                    next_sample += args.sample_s
            time.sleep(0.5)
        producer.stop()
        if producer.error:
            raise RuntimeError(producer.error)
        n = producer.sent
        # One record a partition past the last window and its lateness closes every window.
        closer = _producer(holder["broker"].bootstrap_servers)
        late = stream.start_ms + n * 1000 // rate + WINDOW_MS + LATENESS_MS + 1_000
        for p in range(PARTITIONS):
            value = json.dumps({"user_id": "closer", "page": "/", "amount": 0.0, "ts": late})
            closer.produce(TOPIC, value.encode(), b"closer", partition=p)
        closer.flush()
        s.closing = PARTITIONS  # read as the others are
        s.note(f"input ends: {n:,} records; drain")
        expected = stream.reference(n)
        target = data / "clicks_per_minute"
        from deltalake.exceptions import TableNotFoundError

        deadline = time.time() + 900
        while True:
            read = s.ledger(time.time())[0]
            try:
                have = len(target_windows(target))
            except TableNotFoundError:  # no window closed yet
                have = 0
            if read == n + PARTITIONS and have >= len(expected):
                break
            if time.time() > deadline:
                raise TimeoutError(f"not drained: read {read} of {n + PARTITIONS}, windows {have}")
            if not run.alive():
                run.start()
            time.sleep(5)
        s.sample()
        s.note("drained")
        code = run.stop()
        problems = compare(target_windows(target), expected)
    finally:  # each step whatever the one before did: no process outlives the soak
        for step in (
            producer.stop,
            lambda: run.alive() and run.stop(),
            lambda: proxy is not None and proxy.down(),
            holder["broker"].stop,
            postgres.cleanup,
        ):
            try:
                step()
            except Exception as e:  # reported; the next step still runs
                print(f"cleanup: {e!r}", flush=True)
    with open(out / "soak.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(s.rows[0]))
        writer.writeheader()
        for row in s.rows:
            writer.writerow(row)
        for at, what in s.events:
            writer.writerow({"minute": round((at - started) / 60, 2), "event": what})
    events = [((at - started) / 60, what) for at, what in s.events]
    title = (
        f"make soak-long: the main job at {rate:,} events/s for {args.minutes:.0f} min "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)"
    )
    # the plot ends with the input: the drain's sample has the closing records' time
    faults_only = [e for e in events if not e[1].startswith(("start", "input", "drained"))]
    plot(s.rows[:-1], faults_only, out / "soak.png", title)
    shutil.rmtree(data, ignore_errors=True)
    summary = {
        "rate": rate,
        "records": n,
        "windows": len(expected),
        "exit_code": code,
        "exits_by_itself": sum(w.startswith("run exited by itself") for _, w in events),
        "problems": problems[:20],
        "events": [f"{m:.1f} min: {w}" for m, w in events],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2), flush=True)
    if problems:
        raise AssertionError(f"the target is not the reference: {problems[:10]}")
    return summary


def find_peak(args: argparse.Namespace, out: Path) -> int:
    """The highest of ``args.peak_steps`` the run sustains (see the module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="flow-peak-"))
    postgres = Postgres(data / "postgres")
    best = 0
    try:
        for rate in args.peak_steps:
            step = data / f"r{rate}"
            step.mkdir()
            # a broker of its own for each step (an empty topic); nothing outlives it
            broker = EmbeddedBroker(log_path=out / "broker.log").start()
            broker.create_topic(TOPIC, PARTITIONS)
            env = run_env(broker.bootstrap_servers, step, postgres.url)
            run = Run(job_spec(step, free_port()), env, out / f"peak-{rate}.log")
            started = time.time()
            producer = SteadyProducer(Stream(int(started * 1000), rate), broker.bootstrap_servers,
                                      started)  # fmt: skip
            try:
                run.start()
                producer.start()
                s = Soak(out, producer.stream, producer, run, "clicks-per-minute", postgres.url,
                         0, step, lambda: None, started)  # fmt: skip
                # Start-up first: the step counts from the run's first batch, after which
                # it has a step to read the backlog its start-up left.
                while (s.ledger(time.time())[0] or 0) == 0:
                    if not run.alive():
                        raise RuntimeError(f"the run exited: see {run.log}")
                    time.sleep(1)
                time.sleep(args.peak_step_s)
                mid = s.sample()["lag_s"]
                time.sleep(args.peak_step_s / 2)
                row = s.sample()
                last, unsent = row["lag_s"], row["unsent"] / rate
            finally:
                producer.stop()
                if run.alive():
                    run.stop()
                broker.stop()
            sustained = (
                mid is not None
                and last is not None
                and max(mid, last) <= PEAK_LAG_S
                and unsent <= PEAK_LAG_S  # the producer kept its rate
            )
            verdict = "sustained" if sustained else "not sustained"
            print(f"{rate:,} events/s: lag {mid} s then {last} s, producer {unsent:.1f} s "
                  f"behind: {verdict}", flush=True)  # fmt: skip
            if not sustained:
                break
            best = rate
    finally:
        postgres.cleanup()
        shutil.rmtree(data, ignore_errors=True)
    if not best:
        raise RuntimeError(f"no rate of {args.peak_steps} sustained")
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--rate", type=int, help="events/s (default: half the measured peak)")
    parser.add_argument(
        "--faults",
        help="KIND@MINUTE,... (KIND: broker, postgres, kill; default: the three at a quarter, "
        "half and three quarters of --minutes)",
    )
    parser.add_argument("--down-s", type=float, default=10.0, help="each fault's down time")
    parser.add_argument("--sample-s", type=float, default=60.0)
    parser.add_argument("--peak-steps", type=lambda v: [int(x) for x in v.split(",")],
                        default=[4_000, 8_000, 16_000, 32_000, 48_000, 64_000, 96_000])  # fmt: skip
    parser.add_argument("--peak-step-s", type=float, default=60.0)
    parser.add_argument("--find-peak", action="store_true", help="measure the peak and stop")
    parser.add_argument("--out", type=Path, default=ROOT / ".soak")
    args = parser.parse_args(argv)
    if args.faults is None:  # 15, 30 and 45 for the hour
        quarter = args.minutes / 4
        args.faults = f"broker@{quarter:g},postgres@{2 * quarter:g},kill@{3 * quarter:g}"
    faults = []
    for item in filter(None, args.faults.split(",")):
        kind, _, minute = item.partition("@")
        if kind not in FAULTS:
            parser.error(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
        faults.append((float(minute), kind))
    command = " ".join(["python -m bench.soak", *(argv if argv is not None else sys.argv[1:])])
    print(f"{command} ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)", flush=True)
    rate = args.rate
    if rate is None or args.find_peak:
        peak = find_peak(args, args.out / "peak")
        print(f"peak: {peak:,} events/s", flush=True)
        if args.find_peak:
            return 0
        rate = peak // 2
    soak(args, rate, faults, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
