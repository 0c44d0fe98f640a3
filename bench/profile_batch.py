"""Where a small micro-batch's time goes: ``python -m bench.profile_batch``.

One process, one SparkSession (``build_spark_session``, as the CLI builds it), the
embedded broker; two topics holding the same events (``--events``, 100 keys, two
partitions). Each job reads its topic in batches of ``--batch`` records
(``max_offsets_per_trigger``), back to back (``--available-now``), after a warm-up run of
the same shape on a third topic, so the JVM's compiler and Python workers are warm:

* ``flow-jobs``: a 10 s tumbling window by ``user_id`` (count, sum) into Delta, run by
  ``PipelineRunner`` as ``flow-jobs run --available-now`` runs it;
* ``hand-written``: the same job as ``bench.latency`` writes it by hand.

Per batch, Spark's own phases (``durationMs`` of each progress report: ``latestOffset``,
``getBatch``, ``queryPlanning``, ``walCommit``, ``addBatch``, ``commitOffsets``,
``triggerExecution``), and inside flow-jobs' ``foreachBatch`` the sink's steps, each
timed by wrapping the function the sink calls (the product is not changed): running the
micro-batch (``toArrow``), reading the offset log, committing the dead letters, the
target's MERGE, the ledger row. Medians over the batches after the first two; a table on
stdout, ``--json PATH`` for the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SPARK_PHASES = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
KEYS = 100
SKIP = 2  # the first batches of a query pay for its start


class Timings:
    """Seconds per step, per call, in call order."""

    def __init__(self) -> None:
        self.calls: dict[str, list[float]] = defaultdict(list)

    def wrap(self, owner: Any, name: str, label: str) -> Callable[[], None]:
        """Time every call of ``owner.name`` under ``label``; returns the undo."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.calls[label].append(time.perf_counter() - began)

        setattr(owner, name, timed)
        return lambda: setattr(owner, name, original)


@contextmanager
def batch_runs(timings: Timings, job: str) -> Iterator[None]:
    """Running each micro-batch (``toArrow`` in ``foreachBatch``), timed."""
    from pyspark.sql.classic.dataframe import DataFrame
    from pyspark.sql.utils import ForeachBatchFunction

    undo = [
        timings.wrap(DataFrame, "toArrow", f"{job}: run the batch (toArrow)"),
        timings.wrap(ForeachBatchFunction, "call", f"{job}: foreachBatch in Python"),
    ]
    try:
        yield
    finally:
        for step in undo:
            step()


@contextmanager
def sink_steps(timings: Timings) -> Iterator[None]:
    """The flow-jobs sink's steps, timed where the sink calls them."""
    from flow_jobs.dead_letters import DeadLetterTable
    from flow_jobs.ledger.batch_ledger import BatchLedger
    from flow_jobs.runtime import sink
    from flow_jobs.sinks.delta import DeltaMergeSink

    undo = [
        timings.wrap(sink.Observations, "take", "sink: take the dead letters"),
        timings.wrap(sink, "read_offset_log", "sink: read the offset log (x2)"),
        timings.wrap(DeadLetterTable, "commit", "sink: commit dead letters"),
        timings.wrap(DeltaMergeSink, "write", "sink: MERGE into Delta"),
        timings.wrap(BatchLedger, "_insert", "sink: ledger row"),
        timings.wrap(sink.WindowBatchSink, "__call__", "sink: whole foreachBatch call"),
    ]
    try:
        yield
    finally:
        for step in undo:
            step()


class ProgressLog:
    """Every progress report of every query of the session, by query name."""

    def __init__(self) -> None:
        self.reports: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.ended: set[str] = set()
        self.names: dict[str, tuple[str, ...]] = {}  # query id -> its name

    def terminated(self, name: str) -> bool:
        return name in self.ended

    def listener(self) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        log = self

        class Collect(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                report = json.loads(event.progress.json)
                log.reports[report["name"]].append(report)
                log.names[report["id"]] = (report["name"],)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                log.ended.update(log.names.get(str(event.id), ()))

        return Collect()


def produce_events(bootstrap: str, topic: str, events: int) -> None:
    from flow_jobs_dev.producer import Record, produce

    start = 1_700_000_000_000
    records = []
    for i in range(events):
        user = i % KEYS
        value = {"user_id": f"u{user}", "seq": i, "amount": float(i % 7), "ts": start + i * 10}
        records.append(Record(json.dumps(value).encode(), partition=user % 2, key=b"%d" % user))
    # each partition's last record in a batch of its own (the broker's ListOffsets quirk)
    assert produce(bootstrap, topic, records[:-2]) == len(records) - 2
    for record in records[-2:]:
        assert produce(bootstrap, topic, [record]) == 1


def run_flow_jobs(
    spark: Any, bootstrap: str, topic: str, workdir: Path, batch: int
) -> list[dict[str, Any]]:
    """The flow-jobs job, available-now; its batches' reports, as its tracker saw them
    (a listener on ``spark`` does not see the pipeline's own session's queries)."""
    from bench.latency import flow_jobs_spec
    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.spec.models import PipelineSpec

    doc = flow_jobs_spec(bootstrap, topic, workdir, 1000, "current")
    doc["sources"][0]["max_offsets_per_trigger"] = batch
    runner = PipelineRunner(PipelineSpec.model_validate(doc), spark)
    runner.run(available_now=True)
    assert runner.progress is not None
    return [runner.progress.progress[b] for b in sorted(runner.progress.progress)]


def run_hand_written(spark: Any, bootstrap: str, topic: str, workdir: Path, batch: int) -> str:
    """``bench.latency``'s hand-written job, available-now, ``batch`` records a batch."""
    from bench.latency import LATENESS_MS, SCHEMA, delta_upsert, hand_written_windows
    from bench.run import hand_written_events

    timed = hand_written_events(spark, bootstrap, topic, SCHEMA, LATENESS_MS, batch)
    windows = hand_written_windows(timed)
    upsert = delta_upsert(str(workdir / "target"))
    name = f"hand-written-{workdir.name}"
    query = (
        windows.writeStream.queryName(name)
        .outputMode("update")
        .foreachBatch(upsert)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return name


def kept(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run's batches with input, without its first ``SKIP`` (the query's start)."""
    ran = [r for r in reports if r.get("numInputRows", 0) > 0 and "addBatch" in r["durationMs"]]
    return ran[SKIP:]


def medians(batches: list[dict[str, Any]]) -> dict[str, float]:
    return {
        phase: statistics.median(r["durationMs"].get(phase, 0) for r in batches)
        for phase in SPARK_PHASES
    } | {"batches": float(len(batches))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2, help="runs of each job, alternating")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("FLOW_STATE_STORE_SCHEMA", f"profile_{os.getpid()}")
    from flow_jobs.runtime.session import build_spark_session
    from flow_jobs_dev.broker import EmbeddedBroker

    spark = build_spark_session(app_name="profile-batch")
    progress = ProgressLog()
    spark.streams.addListener(progress.listener())
    timings = Timings()
    batches: dict[str, list[dict[str, Any]]] = {"flow-jobs": [], "hand-written": []}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        root, boot = Path(tmp), broker.bootstrap_servers

        def topic(name: str) -> str:
            broker.create_topic(name, partitions=2)
            produce_events(boot, name, args.events)
            return name

        def flow(name: str) -> list[dict[str, Any]]:
            return run_flow_jobs(spark, boot, topic(name), root / name, args.batch)

        def hand(name: str) -> list[dict[str, Any]]:
            query = run_hand_written(spark, boot, topic(name), root / name, args.batch)
            deadline = time.monotonic() + 30  # listener events come on their own thread
            while not progress.terminated(query) and time.monotonic() < deadline:
                time.sleep(0.1)
            return progress.reports[query]

        flow("warm-f")  # the first runs pay for the JVM's compiler and Python workers
        hand("warm-h")
        for i in range(args.rounds):  # alternating which job goes first
            order = ("flow-jobs", "hand-written") if i % 2 == 0 else ("hand-written", "flow-jobs")
            for job in order:
                if job == "flow-jobs":
                    with sink_steps(timings), batch_runs(timings, job):
                        batches[job] += kept(flow(f"flow-{i}"))
                else:
                    with batch_runs(timings, job):
                        batches[job] += kept(hand(f"hand-{i}"))
    spark.stop()
    figures = {job: medians(runs) for job, runs in batches.items()}
    steps = {
        label: statistics.median(calls[SKIP:] or calls) * 1000
        for label, calls in timings.calls.items()
    }
    print(
        f"\n{args.rounds} runs of each job over {args.events} events, {args.batch} records a "
        "batch; medians in ms\n"
    )
    print("| phase | flow-jobs | hand-written | ratio |\n|---|---:|---:|---:|")
    for phase in (*SPARK_PHASES, "batches"):
        f, h = figures["flow-jobs"][phase], figures["hand-written"][phase]
        ratio = f"{f / h:.2f}" if h else ""
        print(f"| {phase} | {f:,.0f} | {h:,.0f} | {ratio} |")
    print("\nforeachBatch steps (median ms per batch)\n")
    for label, ms in steps.items():
        print(f"| {label} | {ms:,.1f} |")
    if args.json:
        args.json.write_text(json.dumps({"spark": figures, "sink": steps}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
