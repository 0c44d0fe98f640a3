"""``make bench-compare``: flow-jobs side by side with the same jobs hand-written in
PySpark and in Quix Streams, on one produced topic, in one invocation (issue 12, item 4).

First, each job in a process of its own, the way users run them (``bench/fresh.py``):
``flow-jobs run SPEC --available-now`` against ``python -m bench.hand_written``, each
timed whole over the full topic and over an empty one (gross, start-up, net), for every
shape asked (``--shapes``; the join over its orders and payments topics, half the events
each). Then the table of one warm JVM (``--processes warm`` alone, ``fresh`` for the first only).

Runs of the warm table, each against the same topics from offset 0 (Spark runs: a fresh
checkpoint):

* ``bare read``: confluent-kafka consumers, one process per partition (the ceiling);
* ``flow-jobs``: the pipeline from a spec (Arrow decode in the reader, MERGE into Delta),
  for tumbling 60 s, filter-then-tumbling (``FILTER``), hopping 60 s / 10 s, cumulate
  (every 10 s up to 60 s), dedup-then-tumbling (``DEDUP``), the top 10 users of each
  60 s window (``top_n``), session
  (gap 2 s), sliding 60 s (one window per row), count (tumbling, 100 records), each with
  count, sum, min, max, avg, first and last by user, the orders x payments join, and a
  60 s tumbling window per customer after that join (``JOIN_WINDOW``);
* ``hand-written PySpark``: what a Spark user writes for the same job with the same
  source (``flow_kafka``: spark-sql-kafka cannot be installed here), ``from_json``,
  ``withWatermark``, ``window`` / ``session_window`` / the join, append mode, each
  micro-batch appended to Delta with ``deltalake`` in ``foreachBatch`` (sliding and
  count windows, which Spark has no operator for: a ``transformWithStateInPandas``
  processor of the user's own, ``bench/hand_stateful.py``; cumulating windows: each row
  exploded into the step ends after it, grouped by the minute's ``window()`` and the
  end, ``hand_written_window``; deduplication: ``dropDuplicatesWithinWatermark``; top N:
  ``row_number`` over each micro-batch in ``foreachBatch``);
* ``Quix Streams``: the same windows, join and window after it
  (``bench/quix_run.py`` in ``.venv-quix``),
  on the first ``--quix-limit`` records per partition of the same topics (at Quix's rate
  the whole topic would take minutes per shape); its rate is per event either way. Quix
  Streams has no cumulating window, no deduplication and no top N: those shapes have
  no Quix run.

The acceptance figure of issue 12 is the tumbling run's ``N / (T(N) - T(empty))``: the
flow-jobs run on the full topic less the same run on an empty topic, in the same JVM.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from bench.pipeline import clicks_spec
from bench.run import (
    JOIN_PER_TRIGGER,
    ORDERS_TOPIC,
    PAYMENTS_TOPIC,
    SCHEMA,
    TOPIC,
    Result,
    _join_spec,
    bare_read,
    hand_written_events,
    hand_written_join,
    hand_written_sink,
    produce_join,
    spark_run,
)
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import produce
from flow_jobs_dev.sample_events import sample_clicks

ROOT = Path(__file__).resolve().parent.parent
QUIX_PYTHON = ROOT / ".venv-quix" / "bin" / "python"
EMPTY_TOPIC = "bench-empty"
LATENESS_MS = 5_000
#: The embedded broker reports a topic's retention.ms only where it was set at creation,
#: and Quix Streams' windows and joins read it from every input topic (KeyError without
#: it): the bench's topics are created with it. The workaround stays in the benchmark.
QUIX_TOPIC_CONFIG = {"retention.ms": str(7 * 24 * 3_600_000)}

AGGREGATIONS = [
    {"agg": "count", "as": "clicks"},
    {"agg": "sum", "column": "amount", "as": "amount_sum"},
    {"agg": "min", "column": "amount", "as": "amount_min"},
    {"agg": "max", "column": "amount", "as": "amount_max"},
    {"agg": "avg", "column": "amount", "as": "amount_avg"},
    {"agg": "first", "column": "page", "as": "first_page"},
    {"agg": "last", "column": "page", "as": "last_page"},
]
SHAPES: dict[str, dict[str, Any]] = {
    "tumbling": {"kind": "tumbling", "duration_ms": 60_000},
    "filter": {"kind": "tumbling", "duration_ms": 60_000},  # after FILTER
    "hopping": {"kind": "hopping", "duration_ms": 60_000, "hop_ms": 10_000},
    # a minute's running total every 10 s: the windows [m, m + 10 s), ..., [m, m + 60 s)
    "cumulate": {"kind": "cumulate", "step_ms": 10_000, "max_duration_ms": 60_000},
    "dedup": {"kind": "tumbling", "duration_ms": 60_000},  # after DEDUP
    # the 10 users of each minute with the most clicks (then the highest spend)
    "top_n": {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "top_n": {"n": 10, "order_by": ["clicks DESC", "amount_sum DESC"]},
    },
    "session": {"kind": "session", "gap_ms": 2_000},
    "sliding": {"kind": "sliding", "duration_ms": 60_000},
    "count": {"kind": "count_tumbling", "count": 100},
}
#: Shapes over the orders and payments topics (the join; the join, then a window).
JOINS = ("join", "join_window")
#: Every shape, in the tables' order (``--shapes``' default).
ALL_SHAPES = (
    "tumbling,filter,hopping,cumulate,dedup,top_n,session,sliding,count,join,join_window,temporal"
)
#: The temporal join: the orders with their customer's plan (``bench/temporal.py``).
TEMPORAL = "temporal"
#: Shapes the reader pre-aggregates: the fresh-process table runs each with
#: ``pre_aggregate = false`` too.
FOLDING = ("tumbling", "filter", "hopping", "cumulate", "top_n", "session")


#: filter-then-tumbling: the condition (~8% of the sample clicks fail it), as flow-jobs'
#: [transform].sql (keeping _kafka, which first / last behind SQL need to fold) and as
#: the hand-written job's where().
FILTER = "user_id IS NOT NULL AND amount >= 10"
FILTER_SQL = f"SELECT user_id, page, amount, ts, _kafka FROM clicks WHERE {FILTER}"
#: dedup-then-tumbling: a user's clicks on one page within a second count once, as
#: flow-jobs' [[transform.dedup]] and as the hand-written job's
#: dropDuplicatesWithinWatermark (which keeps whichever a micro-batch sees first, and
#: drops later ones while the first's time is within the watermark's delay).
DEDUP = {"keys": ["user_id", "page"], "within_ms": 1_000}


def window_spec(
    bootstrap: str, workdir: Path, shape: str, topic: str = TOPIC, pre_aggregate: bool = True
) -> PipelineSpec:
    window = {"lateness_ms": LATENESS_MS, "pre_aggregate": pre_aggregate, **SHAPES[shape]}
    sql = FILTER_SQL if shape == "filter" else None
    dedup = [DEDUP] if shape == "dedup" else None
    return clicks_spec(
        bootstrap, workdir, window, topic=topic, aggregations=AGGREGATIONS, sql=sql, dedup=dedup
    )


#: A join's topics by its orders topic: (payments topic, empty orders, empty payments);
#: a fresh-process run names the join by its orders topic (``bench.fresh``).
JOIN_TOPICS = {
    ORDERS_TOPIC: (PAYMENTS_TOPIC, "bench-empty-orders", "bench-empty-payments"),
    "bench-empty-orders": ("bench-empty-payments",),
}


def fresh_spec(
    bootstrap: str, workdir: Path, shape: str, topic: str, pre_aggregate: bool = True
) -> PipelineSpec:
    """The spec flow-jobs runs for a shape in a process of its own; a join's ``topic`` is
    its orders topic (``JOIN_TOPICS``)."""
    if shape == TEMPORAL:
        from bench.temporal import temporal_spec

        return temporal_spec(bootstrap, workdir, topic)
    if shape in JOINS:
        return _join_spec(
            bootstrap, workdir, topic, JOIN_TOPICS[topic][0], window=shape == "join_window"
        )
    return window_spec(bootstrap, workdir, shape, topic, pre_aggregate)


def hand_written_window(
    spark: SparkSession, bootstrap: str, workdir: Path, shape: str, topic: str = TOPIC
) -> int:
    """The windowed job as a Spark user writes it by hand; returns the rows read."""
    from pyspark.sql import functions as F

    if shape in ("sliding", "count"):
        from bench.hand_stateful import hand_written_stateful

        return hand_written_stateful(spark, bootstrap, workdir, shape, topic, LATENESS_MS)

    timed = hand_written_events(spark, bootstrap, topic, SCHEMA, LATENESS_MS)
    if shape == "filter":
        timed = timed.where(FILTER)
    if shape == "dedup":
        timed = timed.dropDuplicatesWithinWatermark(DEDUP["keys"])
    keys: list[Any] = ["user_id"]
    if shape in ("tumbling", "filter", "dedup", "top_n"):
        window = F.window("et", "60 seconds")
    elif shape == "cumulate":
        # Spark has no cumulating window: each row goes to every 10 s step end of its
        # minute after it, grouped by the minute (window(), which carries the watermark)
        # and the end; the steps of a minute then emit when the minute closes.
        second = F.unix_seconds("et")
        minute = second - F.pmod(second, F.lit(60))
        first = minute + (F.floor((second - minute) / 10) + 1) * 10
        ends = F.sequence(first, minute + 60, F.lit(10).cast("bigint"))
        timed = timed.withColumn("step_end", F.explode(ends))
        window, keys = F.window("et", "60 seconds"), ["step_end", "user_id"]
    elif shape == "hopping":
        window = F.window("et", "60 seconds", "10 seconds")
    else:
        window = F.session_window("et", "2 seconds")
    aggregated = (
        timed.groupBy(window.alias("w"), *keys)
        .agg(
            F.count(F.lit(1)).alias("clicks"),
            F.sum("amount").alias("amount_sum"),
            F.min("amount").alias("amount_min"),
            F.max("amount").alias("amount_max"),
            F.avg("amount").alias("amount_avg"),
            F.min_by("page", "et").alias("first_page"),
            F.max_by("page", "et").alias("last_page"),
        )
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "*")
        .drop("w")
    )
    if shape == "cumulate":
        aggregated = aggregated.withColumn("window_end", F.timestamp_seconds("step_end")).drop(
            "step_end"
        )
    each_batch = _top_ten if shape == "top_n" else None
    return sum(int(p.numInputRows) for p in hand_written_sink(aggregated, workdir, each_batch))


def _top_ten(batch: Any) -> Any:
    """The hand-written top 10 of each window: a batch holds its windows whole (append
    mode), so row_number over the batch (Spark's streaming plan takes no window
    function)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("window_start", "window_end").orderBy(
        F.desc_nulls_last("clicks"), F.desc_nulls_last("amount_sum"), "user_id"
    )
    ranked = batch.withColumn("rank", F.row_number().over(order))
    return ranked.where(F.col("rank") <= 10).drop("rank")


def quix_run(bootstrap: str, shape: str, topics: list[str], limit: int) -> Result | str:
    if shape == "cumulate":
        return "cumulate: Quix Streams has no cumulating window (no Quix run)"
    if shape == "dedup":
        return "dedup: Quix Streams has no deduplication operator (no Quix run)"
    if shape == "top_n":
        return "top_n: Quix Streams has no top N per window (no Quix run)"
    if not QUIX_PYTHON.exists():
        return f"{QUIX_PYTHON} is missing: `make .venv-quix/.stamp` installs Quix Streams"
    with tempfile.TemporaryDirectory(prefix="quix-bench-") as state:
        args = {
            "bootstrap": bootstrap,
            "shape": shape,
            "topics": topics,
            "limit": limit,
            "state_dir": state,
        }
        done = subprocess.run(
            [str(QUIX_PYTHON), str(ROOT / "bench" / "quix_run.py"), json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=1800,
        )
    if done.returncode != 0:
        return f"Quix Streams failed: {done.stderr.strip()[-500:]}"
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["unfinished"]:
        return f"Quix Streams stopped before the end: {figures}"
    return Result(f"{shape}: Quix Streams", figures["events"], figures["seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.compare", description=__doc__)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--quix-limit", type=int, default=100_000, help="records per partition")
    parser.add_argument("--shapes", default=ALL_SHAPES)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument(
        "--processes",
        choices=("both", "fresh", "warm"),
        default="both",
        help="fresh: each job its own process (bench/fresh.py); warm: every job in one "
        "JVM, beside Quix Streams; both: the fresh table first",
    )
    args = parser.parse_args()
    shapes = args.shapes.split(",")

    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.runtime.session import build_spark_session

    os.environ.setdefault("FLOW_STATE_STORE_SCHEMA", f"bench_{int(time.time())}")
    results: list[Result] = []
    notes: list[str] = []

    def report(result: Result | str) -> None:
        if isinstance(result, str):
            notes.append(result)
            print(f"  {result}", flush=True)
        else:
            results.append(result)
            print(f"  {result.name}: {result.rate:,.0f} events/s", flush=True)

    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        broker.create_topic(TOPIC, args.partitions, QUIX_TOPIC_CONFIG)
        broker.create_topic(EMPTY_TOPIC, args.partitions, QUIX_TOPIC_CONFIG)
        start_ms = int(time.time() * 1000) - 86_400_000  # a day ago: inside the skew limit
        produced = produce(
            bootstrap,
            TOPIC,
            sample_clicks(
                args.events,
                users=args.keys,
                start_ms=start_ms,
                step_ms=1,
                partitions=args.partitions,
            ),
        )
        print(f"produced {produced:,} events", flush=True)
        report(bare_read(bootstrap, _ends(bootstrap)))
        joined = versioned = 0
        if {*JOINS, TEMPORAL} & set(shapes):  # half the events orders, half payments
            for topic in (ORDERS_TOPIC, PAYMENTS_TOPIC, *JOIN_TOPICS[ORDERS_TOPIC][1:]):
                broker.create_topic(topic, args.partitions, QUIX_TOPIC_CONFIG)
            joined = produce_join(bootstrap, args.events // 2, start_ms, args.partitions)
        if TEMPORAL in shapes:  # the orders (half the events) and the plans over their span
            from bench.temporal import PLANS_OF, produce_plans

            for topic in PLANS_OF.values():
                broker.create_topic(topic, args.partitions, QUIX_TOPIC_CONFIG)
            span = args.events // 2 * 2  # the orders are 2 ms apart
            versioned = args.events // 2 + produce_plans(bootstrap, span, start_ms, args.partitions)
        fresh: list[str] = []
        fresh_json: list[dict[str, Any]] = []
        if args.processes != "warm":
            from bench.fresh import fresh_runs, fresh_table

            topics = {s: (EMPTY_TOPIC, TOPIC, produced) for s in shapes if s in SHAPES}
            for join in (s for s in shapes if s in JOINS):
                topics[join] = (JOIN_TOPICS[ORDERS_TOPIC][1], ORDERS_TOPIC, joined)
            if TEMPORAL in shapes:
                topics[TEMPORAL] = (JOIN_TOPICS[ORDERS_TOPIC][1], ORDERS_TOPIC, versioned)
            runs = fresh_runs(fresh_spec, bootstrap, topics, FOLDING, like_for_like=JOINS)
            fresh = fresh_table(runs)
            print("\n".join(fresh), flush=True)
            fresh_json = [vars(r) for r in runs]
        if args.processes == "fresh":
            return _write(args, fresh, {"events": produced, "fresh_processes": fresh_json})

        spark = build_spark_session(
            f"local[{os.cpu_count() or 2}]",
            {"spark.ui.enabled": "false", "spark.driver.memory": "4g"},
            app_name="flow-jobs-bench-compare",
        )

        def ours(shape: str, topic: str = TOPIC, pre_aggregate: bool = True) -> Any:
            def run(workdir: Path) -> PipelineRunner:
                spec = window_spec(bootstrap, workdir, shape, topic, pre_aggregate)
                runner = PipelineRunner(spec, spark)
                runner.run(available_now=True)
                return runner

            return run

        # Warm the JVM and the Python workers with a whole run first (the first run is
        # measured at 0.75 of the next identical one), then the empty-topic run.
        spark_run("warm-up (not reported)", produced, ours("tumbling"))
        empty = spark_run("tumbling, empty topic", 0, ours("tumbling", EMPTY_TOPIC))
        print(f"  empty-topic run: {empty.seconds:.1f}s", flush=True)
        hand_empty = spark_run(
            "hand-written, empty topic",
            0,
            lambda w: hand_written_window(spark, bootstrap, w, "tumbling", EMPTY_TOPIC),
        )
        print(f"  hand-written empty-topic run: {hand_empty.seconds:.1f}s", flush=True)
        for shape in (s for s in shapes if s in SHAPES):
            report(spark_run(f"{shape}: flow-jobs", produced, ours(shape)))
            if shape == "tumbling":  # what pre-aggregation in the reader is worth
                report(
                    spark_run(
                        f"{shape}: flow-jobs, pre_aggregate = false",
                        produced,
                        ours(shape, pre_aggregate=False),
                    )
                )
            report(
                spark_run(
                    f"{shape}: hand-written PySpark",
                    produced,
                    lambda w, s=shape: hand_written_window(spark, bootstrap, w, s),
                )
            )
            report(quix_run(bootstrap, shape, [TOPIC], args.quix_limit))
        for join in (s for s in shapes if s in JOINS):
            after = join == "join_window"

            def our_join(workdir: Path, after: bool = after) -> PipelineRunner:
                runner = PipelineRunner(_join_spec(bootstrap, workdir, window=after), spark)
                runner.run(available_now=True)
                return runner

            report(spark_run(f"{join}: flow-jobs", joined, our_join))
            report(
                spark_run(
                    f"{join}: hand-written PySpark",
                    joined,
                    lambda w, a=after: hand_written_join(spark, bootstrap, w, window=a)["input"],
                )
            )
            report(quix_run(bootstrap, join, [ORDERS_TOPIC, PAYMENTS_TOPIC], args.quix_limit))
        if TEMPORAL in shapes:
            from bench.temporal import hand_written_temporal, temporal_spec

            def our_temporal(workdir: Path) -> PipelineRunner:
                runner = PipelineRunner(temporal_spec(bootstrap, workdir, ORDERS_TOPIC), spark)
                runner.run(available_now=True)
                return runner

            report(spark_run(f"{TEMPORAL}: flow-jobs", versioned, our_temporal))
            report(
                spark_run(
                    f"{TEMPORAL}: hand-written PySpark",
                    versioned,
                    lambda w: hand_written_temporal(spark, bootstrap, w, ORDERS_TOPIC),
                )
            )
            notes.append("temporal: Quix Streams' join_asof is not run here (no Quix run)")
        spark.stop()

    ceiling = results[0].rate
    lines = [
        "| run | events | seconds | events/s | vs bare read | vs hand-written PySpark | "
        "vs Quix Streams |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        shape = r.name.split(":")[0]
        base = {x.name.split(": ")[1]: x.rate for x in results if x.name.startswith(shape + ":")}
        lines.append(
            f"| {r.name} | {r.events:,} | {r.seconds:.1f} | {r.rate:,.0f} | {r.rate / ceiling:.2f} "
            f"| {_ratio(r.rate, base.get('hand-written PySpark'))} "
            f"| {_ratio(r.rate, base.get('Quix Streams'))} |"
        )
    by_name = {r.name: r for r in results}
    tumbling = by_name.get("tumbling: flow-jobs")
    if tumbling is not None:
        net = tumbling.events / (tumbling.seconds - empty.seconds)
        lines += [
            "",
            f"Tumbling, N / (T(N) - T(empty)): {tumbling.events:,} / ({tumbling.seconds:.1f} s - "
            f"{empty.seconds:.1f} s) = **{net:,.0f} events/s** (bare read {ceiling:,.0f}).",
        ]
        hand = by_name.get("tumbling: hand-written PySpark")
        if hand is not None:
            hand_net = hand.events / (hand.seconds - hand_empty.seconds)
            lines.append(
                f"Hand-written, the same way: {hand.events:,} / ({hand.seconds:.1f} s - "
                f"{hand_empty.seconds:.1f} s) = {hand_net:,.0f} events/s; flow-jobs / "
                f"hand-written, both net of their empty-topic run: **{net / hand_net:.2f}**."
            )
        quix = by_name.get("tumbling: Quix Streams")
        if quix is not None:  # Quix's rate leaves its start-up out: like a net rate
            lines.append(
                f"flow-jobs net / Quix Streams (timed from its first message to its last): "
                f"**{net / quix.rate:.2f}**."
            )
    lines += [f"- {n}" for n in notes]
    if fresh:
        lines = ["Each job its own process:", "", *fresh, "", "One warm JVM:", "", *lines]
    return _write(
        args,
        lines,
        {
            "events": produced,
            "join_per_trigger": JOIN_PER_TRIGGER,
            "quix_limit_per_partition": args.quix_limit,
            "empty_topic_seconds": empty.seconds,
            "hand_written_empty_topic_seconds": hand_empty.seconds,
            "fresh_processes": fresh_json,
            "results": [vars(r) | {"events_per_s": r.rate} for r in results],
            "notes": notes,
        },
    )


def _write(args: argparse.Namespace, lines: list[str], figures: dict[str, Any]) -> int:
    print()
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    command = f"make bench-compare N={args.events}"
    if args.processes != "both" or args.shapes != ALL_SHAPES:
        command = (
            f"python -m bench.compare --events {args.events} --shapes {args.shapes} "
            f"--processes {args.processes}"
        )
    (out / f"compare-{stamp}.json").write_text(
        json.dumps(
            {
                "command": command,
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                **figures,
            },
            indent=2,
        )
    )
    return 0


def _ratio(rate: float, base: float | None) -> str:
    return "" if base is None else f"{rate / base:.2f}"


def _ends(bootstrap: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    try:
        partitions = probe.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        return {
            p: probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        probe.close()


if __name__ == "__main__":
    raise SystemExit(main())
