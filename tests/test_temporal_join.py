"""``[transform.temporal_join]``: each order with the rate valid at its time.

The reference follows the rule in docs/spec-reference.md ("[transform.temporal_join]"),
written here on its own: a stream record with keys K at event time t joins, of K's
versions with a time at or below t, the last in the order of events (time, then Kafka
partition and offset); when there is none, or that last one is a tombstone, the record
has no version (inner: no row; left: NULL version columns). A NULL key joins nothing.
Records are joined once the watermark (the lower of the two sources') reaches them;
rows at or below the previous batch's watermark are late.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.inspect import inspect_state
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.temporal_join.processor import TemporalState, add_version, release
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import send

Event = dict[str, Any]


def reference_version(
    versions: list[Event], key: Any, t: int
) -> Event | None:  # fmt: skip
    """The version of ``key`` valid at ``t`` (None: none, or a tombstone)."""
    if key is None:
        return None
    earlier = [v for v in versions if v["k"] == key and v["ts"] <= t]
    if not earlier:
        return None
    last = max(earlier, key=lambda v: (v["ts"], v["_at"]))
    return None if last.get("tombstone") else last


# -- the operator's rule, under any cut --------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),  # a version (else a stream record)
            st.integers(0, 40),
            st.sampled_from(["a", "b"]),
            st.integers(0, 2),
            st.booleans(),  # a version: a tombstone
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 10),
    st.lists(st.integers(1, 40), max_size=8),
    st.one_of(st.none(), st.integers(1, 20)),
)
def test_release_joins_every_record_as_the_rule_whatever_the_cut(
    rows: list[tuple[bool, int, str, int, bool]],
    lateness: int,
    cuts: list[int],
    retention: int | None,
) -> None:
    """Versions and stream records arrive in the order given, cut into micro-batches
    anywhere; after each batch the watermark (the lower of both sides' highest time less
    the lateness) releases the records it reached; a row at or below the previous
    batch's watermark is late. Without a retention, every on-time record is joined as
    the rule says; with one, a record joins its version only if no earlier batch
    evicted it: older than that batch's watermark less the retention."""
    arrivals = [
        {"version": v, "ts": t, "k": k, "_at": (p, i), "tombstone": v and tomb}
        for i, (v, t, k, p, tomb) in enumerate(rows)
    ]
    bounds = sorted({0, len(arrivals), *(c for c in cuts if c < len(arrivals))})
    state, watermark = TemporalState(), None
    on_time: list[Event] = []
    out: list[tuple[Any, Any, int | None]] = []  # (stream row, version row, evicted below)
    tops = {True: None, False: None}
    evicted_below = None
    for lo, hi in itertools.pairwise(bounds):
        for e in arrivals[lo:hi]:
            if watermark is not None and e["ts"] <= watermark:
                continue  # late
            on_time.append(e)
            if e["version"]:
                row = None if e["tombstone"] else e["_at"]
                add_version(state, e["k"], (e["ts"], *e["_at"], e["tombstone"], row))
            else:
                state.held.append((e["ts"], *e["_at"], e["k"], e["_at"]))
            top = tops[e["version"]]
            tops[e["version"]] = e["ts"] if top is None else max(top, e["ts"])
        if None in tops.values():
            continue  # a side without any row holds the watermark at its start
        low = min(tops.values()) - lateness  # type: ignore[type-var]
        watermark = low if watermark is None else max(watermark, low)
        joined = release(state, watermark, retention)
        out += [(j.stream, j.version, evicted_below) for j in joined]
        # after the batch's records are joined, versions older than this leave
        evicted_below = watermark - (retention or 0)
    versions = [e for e in on_time if e["version"]]
    streamed = {e["_at"]: e for e in on_time if not e["version"]}
    released = {s for s, _, _ in out}
    assert len(released) == len(out)  # each record once
    assert released == {
        a for a, e in streamed.items() if watermark is not None and e["ts"] <= watermark
    }
    for stream, version, at in out:
        e = streamed[stream]
        expected = reference_version(versions, e["k"], e["ts"])
        if expected is not None and retention and at is not None and expected["ts"] < at:
            expected = None  # evicted by age after an earlier batch
        assert version == (None if expected is None else expected["_at"]), (e, version)


# -- end to end --------------------------------------------------------------------------

PARTITIONS = 3
LATENESS = 2_000
BASE = 1_700_000_000_000
CURRENCIES = ("EUR", "USD", "GBP", "JPY")


class Topic:
    """Records round-robin over the partitions (each advances in event time with the
    others: a partition left behind in a micro-batch would make rows late, and which
    ones would depend on the cut); each event learns its (partition, offset)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.offsets = [0] * PARTITIONS

    def records(self, events: list[Event], key: str) -> list[Record]:
        out = []
        for e in events:
            p = min(range(PARTITIONS), key=lambda q: self.offsets[q])
            e["_at"] = (p, self.offsets[p])
            self.offsets[p] += 1
            if e.get("tombstone"):
                out.append(Record(None, p, json.dumps({key: e[key]}).encode(), e["ts"]))
                continue
            value = {k: v for k, v in e.items() if not k.startswith("_") and k != "tombstone"}
            out.append(Record(json.dumps(value).encode(), p, None, e["ts"]))
        return out


def _orders(rng: random.Random, n: int, start: int, first_id: int) -> list[Event]:
    out = []
    for i in range(n):
        t = start + i * 100 - rng.randint(0, 600)
        out.append(
            {
                "order_id": first_id + i,
                "currency": rng.choice([*CURRENCIES, None]),
                "amount": rng.choice([round(rng.uniform(1, 500), 2)] * 6 + [1e17, -0.0, math.nan]),
                "ts": t,
            }
        )
    for i in rng.sample(range(1, n), n // 8):  # equal event times
        out[i]["ts"] = out[i - 1]["ts"]
    return out


def _rates(rng: random.Random, n: int, start: int, step: int) -> list[Event]:
    """Versions of the rates; some at equal times (the later in Kafka wins), a NULL
    key now and then (joins nothing), tombstones ending a currency's rate."""
    out = []
    for i in range(n):
        t = start + i * step - rng.randint(0, 400)
        c = rng.choice([*CURRENCIES, None]) if i >= len(CURRENCIES) else CURRENCIES[i]
        if c is not None and rng.random() < 0.12:
            out.append({"currency": c, "ts": t, "tombstone": True})
        else:
            out.append({"currency": c, "rate": round(rng.uniform(0.5, 2), 4), "ts": t})
    for i in rng.sample(range(len(CURRENCIES), n), n // 6):
        out[i]["ts"] = out[i - 1]["ts"]
    return out


def _spec(
    workdir: Path, bootstrap: str, topics: tuple[str, str], how: str, tiny: bool
) -> PipelineSpec:
    def source(name: str, topic: str, schema: str) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "kafka",
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "format": "json",
            "schema": schema,
            **({"max_offsets_per_trigger": 40} if tiny else {}),
        }

    return PipelineSpec.model_validate(
        {
            "name": f"temporal-{workdir.name}",
            "sources": [
                source(
                    "orders",
                    topics[0],
                    "order_id BIGINT, currency STRING, amount DOUBLE, ts BIGINT",
                ),
                source("rates", topics[1], "currency STRING, rate DOUBLE, ts BIGINT"),
            ],
            "transform": {
                "temporal_join": {
                    "stream_source": "orders",
                    "versions_source": "rates",
                    "stream_keys": ["currency"],
                    "version_keys": ["currency"],
                    "how": how,
                    "event_time_column": "ts",
                    "lateness_ms": LATENESS,
                    "output_stream_columns": ["order_id", "currency", "amount", "ts"],
                    "output_version_columns": {"rate": "rate", "ts": "rate_ts"},
                },
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


def _ms(t: datetime) -> int:
    return round(t.timestamp() * 1000)


def _key(row: dict[str, Any]) -> tuple:
    amount = row["amount"]
    amount = "nan" if isinstance(amount, float) and math.isnan(amount) else amount
    return (row["order_id"], row["currency"], amount, row["ts"], row["rate"], row["rate_ts"])


def test_each_order_joins_the_rate_valid_at_its_time_under_any_cut_and_restart(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Three partitions per topic, NULL keys, equal times, disorder within the lateness,
    tombstones, and late rows on both sides; three runs on one checkpoint (restarts):
    phase 1; phase 2 with a rate update that arrives after an order it applies to (held,
    since the watermark had not passed it) and a tombstone; phase 3 with orders only
    (the rates topic idle for the run: the orders' watermark alone releases them). Tiny
    micro-batches (left join) and each phase as one (inner): both targets are the
    reference rows, and the late rows are counted one by one."""
    rng = random.Random("temporal")
    names = (f"orders-{rng.randrange(10**9)}", f"rates-{rng.randrange(10**9)}")
    for name in names:
        broker.create_topic(name, partitions=PARTITIONS)
    orders_topic, rates_topic = Topic(names[0]), Topic(names[1])

    orders1 = _orders(rng, 120, BASE, 0)
    rates1 = _rates(rng, 24, BASE - 3_000, 500)
    top1 = min(max(e["ts"] for e in orders1), max(e["ts"] for e in rates1))
    watermark1 = top1 - LATENESS
    # Phase 2: an order just above run 1's watermark is held; its rate changes in
    # phase 2: the order joins the new rate.
    # (one whose currency has no version in phase 1 between the two)
    held = next(
        e
        for e in sorted(orders1, key=lambda e: e["ts"])
        if e["ts"] > watermark1
        and e["currency"]
        and not any(
            v["currency"] == e["currency"] and watermark1 < v["ts"] <= e["ts"] for v in rates1
        )
    )
    # (at the order's very time: a version is valid from its time on)
    update = {"currency": held["currency"], "rate": 9.99, "ts": held["ts"]}
    # ... and a tombstone ends EUR's rate in the middle of phase 2, for 2 s at least.
    start2 = max(e["ts"] for e in orders1) + 200
    orders2 = _orders(rng, 90, start2, 1_000)
    ended = (start2 + 4_000, start2 + 6_000)
    rates2 = [update] + [
        v
        for v in _rates(rng, 12, start2, 700)
        if not (v["currency"] == "EUR" and ended[0] - 500 <= v["ts"] <= ended[1])
    ]
    rates2.insert(6, {"currency": "EUR", "ts": ended[0], "tombstone": True})
    late_orders = [{**e, "order_id": 5_000 + i} for i, e in enumerate(rng.sample(orders1[:40], 5))]
    late_rates = [{"currency": "USD", "rate": 7.0, "ts": BASE - 2_900}]
    start3 = max(e["ts"] for e in orders2) + 200
    orders3 = _orders(rng, 40, start3, 2_000)

    tags = {"tiny": "left", "one": "inner"}
    specs = {
        t: _spec(workdir / t, broker.bootstrap_servers, names, how, t == "tiny")
        for t, how in tags.items()
    }
    late = 0

    def run_all() -> int:
        return sum(
            PipelineRunner(s, spark).run(available_now=True).late_rows for s in specs.values()
        )

    send(broker.bootstrap_servers, names[1], rates_topic.records(rates1, "currency"))
    send(broker.bootstrap_servers, names[0], orders_topic.records(orders1, "currency"))
    late += run_all()
    mixed = list(orders2)
    for row in late_orders:
        mixed.insert(rng.randrange(len(mixed) + 1), row)
    send(broker.bootstrap_servers, names[1], rates_topic.records(rates2 + late_rates, "currency"))
    send(broker.bootstrap_servers, names[0], orders_topic.records(mixed, "currency"))
    late += run_all()
    send(broker.bootstrap_servers, names[0], orders_topic.records(orders3, "currency"))
    late += run_all()
    assert late == 2 * (len(late_orders) + len(late_rates))

    versions = [{**v, "k": v["currency"]} for v in rates1 + rates2]
    orders = orders1 + orders2 + orders3
    watermark = max(e["ts"] for e in orders3) - LATENESS  # run 3: the rates are idle
    released = [e for e in orders if e["ts"] <= watermark]
    assert len(released) < len(orders), "the last orders are still held"
    expected: dict[str, set[tuple]] = {"left": set(), "inner": set()}
    for e in released:
        v = reference_version(versions, e["currency"], e["ts"])
        row = {**e, "rate": v and v["rate"], "rate_ts": v and v["ts"]}
        expected["left"].add(_key(row))
        if v is not None:
            expected["inner"].add(_key(row))
    # the data hold both acceptance cases: the late update joined, the tombstone's gap
    joined_update = reference_version(versions, held["currency"], held["ts"])
    assert joined_update is not None and joined_update["rate"] == 9.99
    gap = [e for e in released if e["currency"] == "EUR" and ended[0] <= e["ts"] < ended[1]]
    assert gap and all(reference_version(versions, "EUR", e["ts"]) is None for e in gap)
    for tag, spec in specs.items():
        rows = read_delta(spec.target.path).to_pylist()
        assert len(rows) == len({r["join_row_id"] for r in rows}), tag
        assert {_key(r) for r in rows} == expected[tags[tag]], tag
    # inspect lists the held orders (those the watermark has not reached) and, per
    # currency, its versions still kept: the last at or below the watermark, if any
    # and not a tombstone, and every later one
    report = inspect_state(spark, specs["one"], limit=100_000)
    assert report.watermark is not None and _ms(report.watermark) == watermark
    held_rows = {
        (r.row["order_id"], _ms(r.event_time)) for r in report.join_rows if r.side == "stream"
    }
    assert held_rows == {(e["order_id"], e["ts"]) for e in orders if e["ts"] > watermark}
    kept = {(r.key["currency"], _ms(r.event_time)) for r in report.join_rows if r.side == "version"}
    assert kept == {
        (c, v["ts"])
        for c in CURRENCIES
        for v in [reference_version(versions, c, watermark)]
        if v is not None
    }, "every version here is at or below the final watermark"


# -- spec rules --------------------------------------------------------------------------


def _doc(**join: Any) -> dict[str, Any]:
    def source(name: str, fmt: str = "json") -> dict[str, Any]:
        return {
            "name": name,
            "kind": "kafka",
            "topic": name,
            "bootstrap_servers": "127.0.0.1:9092",
            "format": fmt,
            **({"schema": "k STRING, ts BIGINT"} if fmt == "json" else {}),
        }

    return {
        "name": "temporal-rules",
        "sources": [source("s"), source("v", join.pop("versions_format", "json"))],
        "transform": {
            "temporal_join": {
                "stream_source": "s",
                "versions_source": "v",
                "stream_keys": ["k"],
                "version_keys": ["k"],
                "event_time_column": "ts",
                **join,
            }
        },
        "target": {"kind": "delta", "path": "/tmp/x"},
    }


@pytest.mark.parametrize(
    ("join", "message"),
    [
        ({"versions_source": "s"}, "is also stream_source"),
        ({"versions_source": "z"}, "'z' is not a declared source"),
        ({"version_keys": ["k", "ts"]}, "pair up one to one"),
        ({"stream_keys": []}, "stream_keys is empty"),
        ({"version_keys": ["nope"]}, "'nope' is not a column of source 'v'"),
        ({"versions_format": "raw"}, "read as JSON"),
        ({"how": "full"}, "how"),
    ],
)
def test_a_temporal_join_names_its_sides(join: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PipelineSpec.model_validate(_doc(**join))
    assert PipelineSpec.model_validate(_doc()).transform.temporal_join is not None
