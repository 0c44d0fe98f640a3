"""The temporal-join shape of ``make bench-compare``: each order with its customer's plan
valid at the order's time (``[transform.temporal_join]``), against the job a Spark user
writes by hand for it. Spark has no as-of join, so the hand-written job is a
``transformWithStateInPandas`` processor of the user's own, grouped by customer over the
union of both watermarked streams: the customer's plan versions and its orders in list
states, a timer at each order's time, and at the timer each order ready joined with the
last version at or before it (``pandas.merge_asof``), the versions no later order can
join dropped; each micro-batch appended to Delta, as the other hand-written jobs.

What a careful user writes, not what flow-jobs runs (``flow_jobs.temporal_join.processor``):
equal times of two versions are left in the order the state returns them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.producer import produce
from flow_jobs_dev.sample_events import sample_plans

PLANS_TOPIC = "bench-plans"
#: A run's plans topic by its orders topic (the empty run reads two empty topics).
PLANS_OF = {"bench-orders": PLANS_TOPIC, "bench-empty-orders": "bench-empty-plans"}
PLANS = "customer STRING, plan STRING, discount DOUBLE, ts BIGINT"
EVERY_MS = 60_000  # a new plan per customer every minute
LATENESS_MS = 10_000
PER_TRIGGER = 100_000  # records per source and micro-batch, for both jobs

_ORDER = "order_id STRING, amount DOUBLE, ts LONG"
_VERSION = "plan STRING, discount DOUBLE, ts LONG"
_OUT = (
    "order_id STRING, customer STRING, amount DOUBLE, ts LONG, plan STRING, "
    "discount DOUBLE, plan_since LONG"
)


def produce_plans(bootstrap: str, span_ms: int, start_ms: int, partitions: int) -> int:
    return produce(
        bootstrap,
        PLANS_TOPIC,
        sample_plans(span_ms, start_ms=start_ms, every_ms=EVERY_MS, partitions=partitions),
    )


def temporal_spec(bootstrap: str, workdir: Path, orders: str) -> PipelineSpec:
    from bench.run import ORDERS

    def source(name: str, topic: str, schema: str) -> dict:
        return {
            "name": name,
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "schema": schema,
            "max_offsets_per_trigger": PER_TRIGGER,
        }

    return PipelineSpec.model_validate(
        {
            "name": f"bench-temporal-{workdir.name.lower().replace('_', '-')}",
            "sources": [
                source("orders", orders, ORDERS),
                source("plans", PLANS_OF[orders], PLANS),
            ],
            "transform": {
                "temporal_join": {
                    "stream_source": "orders",
                    "versions_source": "plans",
                    "stream_keys": ["customer"],
                    "version_keys": ["customer"],
                    "event_time_column": "ts",
                    "lateness_ms": LATENESS_MS,
                    "output_stream_columns": ["order_id", "customer", "amount", "ts"],
                    "output_version_columns": {
                        "plan": "plan",
                        "discount": "discount",
                        "ts": "plan_since",
                    },
                },
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


class AsOfJoin(StatefulProcessor):
    """A customer's plan versions and held orders; each order joined once the watermark
    reaches it."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.orders = handle.getListState("orders", _ORDER)
        self.versions = handle.getListState("versions", _VERSION)
        self.timer = handle.getValueState("timer", "t LONG")

    def _timer_at(self, t: int) -> None:
        """One timer per customer, at its earliest held order (each firing reads the
        lists whole: a timer per order would read them once per order)."""
        held = self.timer.get()[0] if self.timer.exists() else None
        if held is not None and held <= t:
            return
        if held is not None:
            self.handle.deleteTimer(held)
        self.handle.registerTimer(t)
        self.timer.update((t,))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        for frame in rows:
            orders, versions = frame[frame["side"] == 1], frame[frame["side"] == 0]
            if len(orders):
                self.orders.appendList(
                    list(orders[["order_id", "amount", "ts"]].itertuples(index=False))
                )
                self._timer_at(int(orders["ts"].min()))
            if len(versions):
                self.versions.appendList(
                    list(versions[["plan", "discount", "ts"]].itertuples(index=False))
                )
        return iter(())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        orders = pd.DataFrame(list(self.orders.get()), columns=["order_id", "amount", "ts"])
        versions = pd.DataFrame(list(self.versions.get()), columns=["plan", "discount", "ts"])
        versions = versions.sort_values("ts", kind="stable").reset_index(drop=True)
        ready = orders[orders["ts"] <= watermark].sort_values("ts", kind="stable")
        rest = orders[orders["ts"] > watermark]
        self.orders.clear()
        self.timer.clear()  # Spark deletes the timer that fired
        if len(rest):
            self.orders.appendList(list(rest.itertuples(index=False)))
            self._timer_at(int(rest["ts"].min()))
        # the last version at or below the watermark and the later ones can still join
        at_or_below = versions.index[versions["ts"] <= watermark]
        kept = versions.iloc[at_or_below[-1] :] if len(at_or_below) else versions
        self.versions.clear()
        if len(kept):
            self.versions.appendList(list(kept.itertuples(index=False)))
        if len(ready) and len(versions):
            joined = pd.merge_asof(
                ready.astype({"ts": "int64"}),
                versions.rename(columns={"ts": "plan_since"}).astype({"plan_since": "int64"}),
                left_on="ts",
                right_on="plan_since",
            ).dropna(subset=["plan_since"])
            if len(joined):
                joined["customer"] = key[0]
                yield joined[
                    ["order_id", "customer", "amount", "ts", "plan", "discount", "plan_since"]
                ].astype({"plan_since": "int64"})

    def close(self) -> None:
        return None


def hand_written_temporal(spark: SparkSession, bootstrap: str, workdir: Path, orders: str) -> int:
    """The hand-written as-of join; returns the rows read."""
    from pyspark.sql import functions as F

    from bench.run import ORDERS, hand_written_sink

    spark.conf.set(  # transformWithState runs only on the RocksDB provider
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )

    def side(topic: str, schema: str) -> Any:
        raw = (
            spark.readStream.format("flow_kafka")
            .option("bootstrap_servers", bootstrap)
            .option("topic", topic)
            .option("max_offsets_per_trigger", str(PER_TRIGGER))
            .load()
        )
        rows = raw.select(F.from_json(F.col("value").cast("string"), schema).alias("j"))
        timed = rows.select("j.*").withColumn("et", F.timestamp_millis("ts"))
        return timed.withWatermark("et", f"{LATENESS_MS // 1000} seconds")

    common = ["customer", "side", "order_id", "amount", "plan", "discount", "ts"]
    order_rows = side(orders, ORDERS).select(
        "customer", F.lit(1).alias("side"), "order_id", "amount",
        F.lit(None).cast("string").alias("plan"), F.lit(None).cast("double").alias("discount"),
        "ts",
    )  # fmt: skip
    plan_rows = side(PLANS_OF[orders], PLANS).select(
        "customer", F.lit(0).alias("side"), F.lit(None).cast("string").alias("order_id"),
        F.lit(None).cast("double").alias("amount"), "plan", "discount", "ts",
    )  # fmt: skip
    joined = (
        order_rows.select(*common)
        .unionByName(plan_rows.select(*common))
        .groupBy("customer")
        .transformWithStateInPandas(AsOfJoin(), _OUT, "Append", "EventTime")
    )
    return sum(int(p.numInputRows) for p in hand_written_sink(joined, workdir))
