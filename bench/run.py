"""``make bench``: end-to-end throughput of a tumbling pipeline, against its ceiling.

One invocation, one broker, one topic, one SparkSession; every run reads the same
events from offset 0 with a fresh checkpoint:

* ``bare read``: confluent-kafka consumers, one process per partition, doing nothing
  with the messages: the ceiling for any Kafka reader on this machine;
* ``spark scan``: our Python data source inside Spark, rows only counted;
* ``scan + decode``: the source view (JSON decoded in the JVM, dead-letter tap), counted;
* ``tumbling -> delta``: the full pipeline (60 s tumbling window by user, four
  aggregates, MERGE into Delta), available-now;
* ``from_json alone``: Spark's built-in ``rate-micro-batch`` source formatting the same
  JSON shape in the JVM, decoded by ``from_json``: the JSON decoder's own ceiling here,
  with no Kafka and no Python involved.

The differences between consecutive runs are the profile: what each layer costs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bench.pipeline import (
    AGGREGATIONS,
    SCHEMA,
    TOPIC,
    TUMBLING,
    Result,
    clicks_spec,
)
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import produce
from flow_jobs_dev.sample_events import sample_clicks, sample_orders, sample_payments
from flow_jobs_dev.schema_registry import EmbeddedSchemaRegistry


def _read_partition(args: tuple[str, int, int]) -> int:
    from confluent_kafka import Consumer, TopicPartition

    bootstrap, partition, end = args
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-bare",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    n, nxt = 0, 0
    while nxt < end:
        for m in consumer.consume(min(50_000, end - nxt), 1.0):
            if m.error() is None:
                n += 1
                nxt = m.offset() + 1
    consumer.close()
    return n


def bare_read(bootstrap: str, ends: dict[int, int]) -> Result:
    started = time.perf_counter()
    with mp.get_context("spawn").Pool(len(ends)) as pool:
        n = sum(pool.map(_read_partition, [(bootstrap, p, e) for p, e in ends.items()]))
    return Result("bare confluent-kafka read", n, time.perf_counter() - started)


def spark_run(name: str, events: int, body: Callable[[Path], int | Any]) -> Result:
    workdir = Path(tempfile.mkdtemp(prefix="flow-bench-"))
    try:
        started = time.perf_counter()
        seen = body(workdir)
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    written = windows = None
    if not isinstance(seen, int):  # a PipelineRunner: rows in, and what its sink did
        totals = seen.progress.totals()
        written = totals.write_seconds
        windows = totals.windows_inserted + totals.windows_updated
        seen = seen.progress.input_rows()
    if seen != events:
        raise RuntimeError(f"{name}: read {seen} rows, expected {events}")
    return Result(name, events, elapsed, written, windows)


#: The tumbling run with the window's watermark taken after the SQL, as before each
#: source had its own (the per-source design must cost at most 10% of tumbling).
BEFORE_SOURCE_WATERMARKS = "tumbling 60 s, one watermark after the SQL (before per-source)"
#: Every kind with the tumbling run's four aggregates (count_distinct adds its own).
WINDOWS: dict[str, dict] = {
    # ~1 click per user per second: a 2 s gap ends a session about every 7 clicks
    "session (gap 2 s)": {"kind": "session", "gap_ms": 2_000, "lateness_ms": 5_000},
    "sliding 60 s (per row)": {"kind": "sliding", "duration_ms": 60_000, "lateness_ms": 5_000},
    "count_tumbling (100)": {"kind": "count_tumbling", "count": 100},
    "count_hopping (100, step 10)": {"kind": "count_hopping", "count": 100, "step": 10},
    "count_sliding (10)": {"kind": "count_sliding", "count": 10},
    "tumbling + count_distinct (HLL)": {
        **TUMBLING,
        "aggregations": [
            *AGGREGATIONS,
            {"agg": "count_distinct", "column": "page", "as": "pages", "keep_sketch": True},
        ],
    },
}


TOPIC_AVRO = "bench-clicks-avro"
TUMBLING_JSON_NO_FOLD = "tumbling 60 s, JSON, pre_aggregate = false"
TUMBLING_AVRO = "tumbling 60 s, Avro source (registry)"
TUMBLING_AVRO_NO_FOLD = "tumbling 60 s, Avro source (registry), pre_aggregate = false"
CLICK_AVRO = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "ts", "type": "long"},
    ],
}


def avro_copy(bootstrap: str, registry_url: str, args: argparse.Namespace, start_ms: int) -> int:
    """The JSON topic's events again, as Confluent-framed Avro (magic byte 0, the schema's
    id, the fastavro body: the wire format tests/test_schema_registry.py checks against
    confluent-kafka's own AvroSerializer), in the same partitions and order."""
    import io
    import struct

    import fastavro
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    schema_id = client.register_schema(f"{TOPIC_AVRO}-value", Schema(json.dumps(CLICK_AVRO)))
    parsed = fastavro.parse_schema(CLICK_AVRO)
    header = struct.pack(">bI", 0, schema_id)

    def framed(record: Any) -> Any:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, json.loads(record.value))
        return type(record)(
            header + body.getvalue(), record.partition, record.key, record.timestamp_ms
        )

    clicks = sample_clicks(
        args.events, users=args.keys, start_ms=start_ms, step_ms=1, partitions=args.partitions
    )
    return produce(bootstrap, TOPIC_AVRO, map(framed, clicks))


def avro_pipeline(
    bootstrap: str, registry_url: str, spark: SparkSession, fold: bool = True
) -> Callable[[Path], Any]:
    from flow_jobs.runtime.runner import PipelineRunner

    def run(workdir: Path) -> Any:
        doc = clicks_spec(bootstrap, workdir, topic=TOPIC_AVRO).to_document()
        doc["transform"]["window"]["pre_aggregate"] = fold
        source = doc["sources"][0]
        source.pop("schema")
        source.update(format="avro", schema_registry={"url": registry_url})
        runner = PipelineRunner(PipelineSpec.model_validate(doc), spark)
        runner.run(available_now=True)
        return runner

    return run


def hand_written_events(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    schema: str,
    lateness_ms: int,
    max_offsets_per_trigger: int | None = None,
) -> DataFrame:
    """A topic read the way a Spark user writes it by hand (the same ``flow_kafka``
    source as flow-jobs, since spark-sql-kafka cannot be installed here): ``from_json``
    of the value, the epoch-ms ``ts`` as the event time ``et``, watermarked."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("flow_kafka")
        .option("bootstrap_servers", bootstrap)
        .option("topic", topic)
    )
    if max_offsets_per_trigger:
        reader = reader.option("max_offsets_per_trigger", str(max_offsets_per_trigger))
    raw = reader.load()
    rows = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("j")).select("j.*")
    return rows.withColumn("et", F.timestamp_millis("ts")).withWatermark(
        "et", f"{lateness_ms} milliseconds"
    )


def _count_query(frame: DataFrame, workdir: Path) -> int:
    total = 0

    def count(batch: DataFrame, _batch_id: int) -> None:
        nonlocal total
        total += batch.count()

    query = (
        frame.writeStream.foreachBatch(count)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return total


def from_json_alone(spark: SparkSession, events: int, workdir: Path) -> int:
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", events)
        .option("numPartitions", 2)
        .load()
    )
    payload = F.format_string(
        '{"user_id": "u%d", "page": "/home", "amount": %.2f, "ts": %d}',
        F.col("value") % 1000,
        F.rand() * 100,
        F.col("value") + 1_700_000_000_000,
    )
    decoded = raw.select(F.from_json(payload, SCHEMA).alias("j")).where(
        F.col("j.user_id").isNotNull()
    )
    total = 0

    def count(batch: DataFrame, _batch_id: int) -> None:
        nonlocal total
        total += batch.count()

    # Exactly one micro-batch of `events` rows (this source never runs dry).
    query = (
        decoded.writeStream.foreachBatch(count)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(once=True)
        .start()
    )
    query.awaitTermination()
    return total


ORDERS_TOPIC, PAYMENTS_TOPIC = "bench-orders", "bench-payments"
ORDERS = "order_id STRING, customer STRING, amount DOUBLE, ts BIGINT"
PAYMENTS = "payment_id STRING, order_id STRING, paid DOUBLE, ts BIGINT"
JOIN_PER_TRIGGER = 100_000  # records per source and micro-batch, for both runs


def produce_join(bootstrap: str, orders: int, start_ms: int, partitions: int) -> int:
    """``orders`` orders and their payments (some unpaid) into the join's topics; returns
    the records produced."""
    return produce(
        bootstrap,
        ORDERS_TOPIC,
        sample_orders(orders, start_ms=start_ms, step_ms=2, partitions=partitions),
    ) + produce(
        bootstrap,
        PAYMENTS_TOPIC,
        sample_payments(orders, start_ms=start_ms, step_ms=2, partitions=partitions),
    )


#: window after the join: per customer, 60 s tumbling on the order's time
JOIN_WINDOW = {
    "kind": "tumbling",
    "duration_ms": 60_000,
    "event_time_column": "ts",
    "group_by": ["customer"],
    "aggregations": [
        {"agg": "count", "as": "payments"},
        {"agg": "sum", "column": "amount", "as": "ordered"},
        {"agg": "sum", "column": "paid", "as": "paid"},
    ],
}


def _join_spec(
    bootstrap: str,
    workdir: Path,
    orders: str = ORDERS_TOPIC,
    payments: str = PAYMENTS_TOPIC,
    window: bool = False,
) -> PipelineSpec:
    def source(name: str, topic: str, schema: str) -> dict:
        return {
            "name": name,
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "schema": schema,
            "max_offsets_per_trigger": JOIN_PER_TRIGGER,
        }

    after = {"window": JOIN_WINDOW, "chain": ["join", "window"]} if window else {}
    return PipelineSpec.model_validate(
        {
            # its own pipeline in the ledger per workdir, as clicks_spec's
            "name": f"bench-join-{workdir.name.lower().replace('_', '-')}",
            "sources": [
                source("orders", orders, ORDERS),
                source("payments", payments, PAYMENTS),
            ],
            "transform": {
                "join": {
                    "kind": "stream_stream_join",
                    "left_source": "orders",
                    "right_source": "payments",
                    "left_keys": ["order_id"],
                    "right_keys": ["order_id"],
                    "lower_bound_ms": -10_000,
                    "upper_bound_ms": 60_000,
                    "event_time_column": "ts",
                    "lateness_ms": 10_000,
                    "output_left_columns": ["order_id", "customer", "amount", "ts"],
                    "output_right_columns": {
                        "payment_id": "payment_id",
                        "paid": "paid",
                        "ts": "paid_ts",
                    },
                },
                **after,
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


def hand_written_join(
    spark: SparkSession,
    bootstrap: str,
    workdir: Path,
    orders_topic: str = ORDERS_TOPIC,
    payments_topic: str = PAYMENTS_TOPIC,
    window: bool = False,
) -> dict[str, int]:
    """The same join as a Spark user writes it by hand: read, decode, watermark, join
    (with ``window``, then ``JOIN_WINDOW``'s tumbling window on the order's time), append
    each micro-batch to Delta."""
    from pyspark.sql import functions as F

    def side(topic: str, schema: str, alias: str) -> DataFrame:
        raw = (
            spark.readStream.format("flow_kafka")
            .option("bootstrap_servers", bootstrap)
            .option("topic", topic)
            .option("max_offsets_per_trigger", str(JOIN_PER_TRIGGER))
            .load()
        )
        rows = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("j"))
        timed = rows.select("j.*").withColumn("et", F.timestamp_millis("ts"))
        return timed.withWatermark("et", "10 seconds").alias(alias)

    orders, payments = side(orders_topic, ORDERS, "o"), side(payments_topic, PAYMENTS, "p")
    joined = orders.join(
        payments,
        F.expr(
            "o.order_id = p.order_id AND p.et >= o.et - INTERVAL 10 SECONDS "
            "AND p.et <= o.et + INTERVAL 60 SECONDS"
        ),
    ).select(
        "o.order_id",
        "o.customer",
        "o.amount",
        "o.ts",
        "p.payment_id",
        "p.paid",
        F.col("p.ts").alias("paid_ts"),
        F.col("o.et").alias("et"),
    )
    if window:
        joined = (
            joined.groupBy(F.window("et", "60 seconds").alias("w"), "customer")
            .agg(
                F.count(F.lit(1)).alias("payments"),
                F.sum("amount").alias("ordered"),
                F.sum("paid").alias("paid"),
            )
            .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "*")
            .drop("w")
        )
    else:
        joined = joined.drop("et")
    return _join_figures(hand_written_sink(joined, workdir))


def hand_written_sink(
    frame: DataFrame, workdir: Path, each_batch: Callable[[DataFrame], DataFrame] | None = None
) -> list:
    """How the hand-written jobs write: each micro-batch (through ``each_batch`` if
    given) appended to Delta with ``deltalake`` in ``foreachBatch`` (append mode), the
    topic read once (``availableNow``); returns the query's progress reports."""
    from deltalake import write_deltalake

    target = str(workdir / "hand_written")

    def write(batch: DataFrame, _batch_id: int) -> None:
        rows = (each_batch(batch) if each_batch else batch).toArrow()
        if rows.num_rows:
            write_deltalake(target, rows, mode="append")

    query = (
        frame.writeStream.outputMode("append")
        .foreachBatch(write)
        .option("checkpointLocation", str(workdir / "hand_checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def _join_figures(progress: list) -> dict[str, int]:
    from flow_jobs.runtime.reports import as_dict, state_rows

    reports = [as_dict(p) for p in progress]
    return {
        "input": sum(r["numInputRows"] for r in reports),
        # Both join runs have one stateful operator: the join.
        "peak_state_rows": max((state_rows(r) for r in reports), default=0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument(
        "--cluster",
        choices=("on", "off", "only"),
        default="on",
        help="the tumbling pipeline on a standalone cluster of 1, then 2 workers (only: "
        "just that, beside the bare read and the local tumbling run)",
    )
    parser.add_argument(
        "--only",
        action="append",
        help="just the runs whose name contains this (repeatable), beside the bare read; "
        "no join, no cluster",
    )
    args = parser.parse_args()
    if args.only:
        args.cluster = "off"

    from flow_jobs.dead_letters import DeadLetterTable
    from flow_jobs.plan.compile import compile_pipeline
    from flow_jobs.plan.event_time import EventTime
    from flow_jobs.plan.kafka_reader import read_kafka
    from flow_jobs.plan.sources import compile_source
    from flow_jobs.runtime.runner import PipelineRunner
    from flow_jobs.runtime.session import build_spark_session, pipeline_session

    # The ledger of this invocation's runs: a schema of its own in the embedded (or
    # FLOW_STATE_STORE_URL) state store, so earlier invocations never interfere.
    os.environ.setdefault("FLOW_STATE_STORE_SCHEMA", f"bench_{int(time.time())}")
    results: list[Result] = []
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        broker.create_topic(TOPIC, partitions=args.partitions)
        broker.create_topic(TOPIC_AVRO, partitions=args.partitions)
        started = time.perf_counter()
        start_ms = int(time.time() * 1000) - 86_400_000  # a day ago: well inside the skew limit
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
        print(f"produced {produced:,} events in {time.perf_counter() - started:.1f}s", flush=True)
        from confluent_kafka import Consumer, TopicPartition

        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
        ends = {
            p: probe.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
            for p in range(args.partitions)
        }
        probe.close()
        assert sum(ends.values()) == produced, (ends, produced)

        results.append(bare_read(bootstrap, ends))
        print(f"  {results[-1].name}: {results[-1].rate:,.0f} events/s", flush=True)

        spark = build_spark_session(
            f"local[{os.cpu_count() or 2}]",
            {"spark.ui.enabled": "false", "spark.driver.memory": "4g"},
            app_name="flow-jobs-bench",
        )
        probe_spec = clicks_spec(bootstrap, Path(tempfile.gettempdir()))
        session = pipeline_session(spark, probe_spec.spark)

        def scan(workdir: Path) -> int:
            frame = read_kafka(session, probe_spec.sources[0], "bench", "event")
            return _count_query(frame, workdir)

        def decode(workdir: Path) -> int:
            tap = DeadLetterTable(str(workdir / "dead_letters"), "bench").tap("clicks")
            settings = EventTime.of_window(probe_spec.window)
            source = probe_spec.sources[0]
            view = compile_source(session, source, 0, settings, "bench", tap).frame
            return _count_query(view, workdir)

        def pipeline(
            window: dict | None = None, per_source_watermarks: bool = True
        ) -> Callable[[Path], PipelineRunner]:
            def run(workdir: Path) -> PipelineRunner:
                runner = PipelineRunner(clicks_spec(bootstrap, workdir, window), spark)
                if not per_source_watermarks:  # the plan before them, for the ratio
                    runner.compiled = compile_pipeline(
                        runner.spark,
                        runner.spec,
                        runner.dead_letters,
                        runner.checkpoint,
                        per_source_watermarks=False,
                    )
                runner.run(available_now=True)
                return runner

            return run

        # A whole pipeline run first: the first one pays for warming the JVM's code and
        # Python workers (measured: 0.75 of the next identical run), which would skew
        # whichever run comes first.
        spark_run("warm-up (tumbling, not reported)", produced, pipeline())
        runs = [
            ("spark scan (Python source)", scan),
            ("scan + JSON decode + dead-letter tap", decode),
            ("tumbling 60 s -> Delta MERGE", pipeline()),
            (BEFORE_SOURCE_WATERMARKS, pipeline(per_source_watermarks=False)),
            *((f"{name} -> Delta MERGE", pipeline(w)) for name, w in WINDOWS.items()),
        ]
        if args.cluster != "only":  # the same events as Avro, through a schema registry
            registry = EmbeddedSchemaRegistry().start()
            avro_copy(bootstrap, registry.url, args, start_ms)
            no_fold = {**TUMBLING, "pre_aggregate": False}
            runs += [
                (f"{TUMBLING_JSON_NO_FOLD} -> Delta MERGE", pipeline(no_fold)),
                (f"{TUMBLING_AVRO} -> Delta MERGE", avro_pipeline(bootstrap, registry.url, spark)),
                (
                    f"{TUMBLING_AVRO_NO_FOLD} -> Delta MERGE",
                    avro_pipeline(bootstrap, registry.url, spark, fold=False),
                ),
            ]
        if args.cluster == "only":
            runs = [r for r in runs if r[0].startswith("tumbling 60 s")]
        if args.only:  # the bare read (the ceiling) and the runs named
            runs = runs[:1] + [r for r in runs[1:] if any(o in r[0] for o in args.only)]
        for name, body in runs:
            results.append(spark_run(name, produced, body))
            print(f"  {name}: {results[-1].rate:,.0f} events/s", flush=True)
        if args.cluster != "off":
            from bench.cluster_scale import cluster_runs

            results += cluster_runs(bootstrap, produced)
        if args.cluster == "only" or args.only:
            spark.stop()
            return _report(args, produced, results)
        # -- orders x payments ------------------------------------------------------------
        half = args.events // 2
        join_start = int(time.time() * 1000) - 86_400_000
        broker.create_topic(ORDERS_TOPIC, partitions=args.partitions)
        broker.create_topic(PAYMENTS_TOPIC, partitions=args.partitions)
        joined_events = produce_join(bootstrap, half, join_start, args.partitions)
        print(f"produced {joined_events:,} orders and payments", flush=True)
        peaks: dict[str, int] = {}

        def hand_join(workdir: Path) -> int:
            figures = hand_written_join(spark, bootstrap, workdir)
            peaks["hand-written"] = figures["peak_state_rows"]
            return figures["input"]

        def our_join(workdir: Path) -> int:
            runner = PipelineRunner(_join_spec(bootstrap, workdir), spark)
            runner.run(available_now=True)
            reports = list(runner.progress.progress.values()) if runner.progress else []
            peaks["flow-jobs"] = _join_figures(reports)["peak_state_rows"]
            return runner.progress.input_rows() if runner.progress else 0

        for name, body, label in (
            ("orders x payments, hand-written Spark (baseline)", hand_join, "hand-written"),
            ("orders x payments, flow-jobs join -> Delta MERGE", our_join, "flow-jobs"),
        ):
            results.append(spark_run(name, joined_events, body))
            results[-1].peak_state_rows = peaks[label]
            print(
                f"  {name}: {results[-1].rate:,.0f} events/s, peak state {peaks[label]:,} rows",
                flush=True,
            )

        name = "from_json alone (JVM rate source, no Kafka)"
        results.append(spark_run(name, produced, lambda w: from_json_alone(session, produced, w)))
        print(f"  {name}: {results[-1].rate:,.0f} events/s", flush=True)
        spark.stop()

    return _report(args, produced, results)


def _report(args: argparse.Namespace, produced: int, results: list[Result]) -> int:
    ceiling = results[0].rate
    pipeline_rate = next(r.rate for r in results if r.name.startswith("tumbling"))

    def optional(value: float | int | None, fmt: str) -> str:
        return "" if value is None else format(value, fmt)

    lines = [
        "| run | events | seconds | events/s | vs bare read | vs tumbling | windows | write s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r.name} | {r.events:,} | {r.seconds:.1f} | {r.rate:,.0f} | "
            f"{r.rate / ceiling:.2f} | {r.rate / pipeline_rate:.2f} | "
            f"{optional(r.windows, ',')} | {optional(r.write_seconds, '.1f')} |"
            for r in results
            if r.peak_state_rows is None
        ),
    ]
    joins = [r for r in results if r.peak_state_rows is not None]
    if len(joins) == 2:
        base = joins[0].rate
        lines += [
            "",
            "| join run | events | seconds | events/s | vs hand-written | peak state rows |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {r.name} | {r.events:,} | {r.seconds:.1f} | {r.rate:,.0f} | "
                f"{r.rate / base:.2f} | {r.peak_state_rows:,} |"
                for r in joins
            ),
        ]
    print()
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (out / f"bench-{stamp}.json").write_text(
        json.dumps(
            {
                "command": f"make bench N={args.events}"
                if not args.only
                else f"python -m bench.run --events {args.events} "
                + " ".join(f"--only '{o}'" for o in args.only),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "events": produced,
                "keys": args.keys,
                "partitions": args.partitions,
                "results": [asdict(r) | {"events_per_s": r.rate} for r in results],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
