"""Quix Streams on the bench's topics, for ``make bench-compare`` (``bench.compare``).

Run with ``.venv-quix/bin/python`` (Quix Streams' pins conflict with the project's, so it
has a venv of its own: ``tests/quix/requirements.txt``); never imported by the project.
One argument, a JSON object::

    {"bootstrap": "127.0.0.1:9092", "shape": "tumbling", "topics": ["bench-clicks"],
     "limit": 100000, "state_dir": "/tmp/x"}

``shape``: tumbling (60 s), filter (tumbling after ``bench.compare.FILTER``), hopping
(60 s, step 10 s), session (gap 2 s), sliding (60 s), each with a 5 s grace, or count
(tumbling, 100 records), with the bench's aggregates
by message key (the user), or join (orders x payments on the message key, the order id:
payments from 10 s before to 60 s after the order, 10 s grace), or join_window (that
join, then per customer, after Quix's ``group_by`` through a topic, a 60 s tumbling
window: count and two sums). It reads each topic
from the earliest offset, at most ``limit`` records per partition, stops once every
partition is read that far, and prints one JSON line: ``{"events": n, "seconds": s,
"outputs": m}``, timed from the first message processed to the last (the process
start-up and the consumer group's join are left out, which favours Quix). Windows and
joined rows go to a callback that counts them: no sink is written, which favours Quix
too.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from quixstreams import Application, message_context
from quixstreams.dataframe.windows import Count, Earliest, Latest, Max, Mean, Min, Sum


def _ends(bootstrap: str, topic: str, limit: int) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[(topic, p)] = min(high, low + limit)
        return ends
    finally:
        consumer.close()


def main(args: dict[str, Any]) -> None:
    bootstrap = args["bootstrap"]
    pending: dict[tuple[str, int], int] = {}
    for topic in args["topics"]:
        pending.update(_ends(bootstrap, topic, args["limit"]))
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-bench-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        state_dir=args["state_dir"],
        use_changelog_topics=False,
        loglevel="WARNING",
        # The embedded broker answers a group's first join after about half the session
        # timeout (23 s with librdkafka's 45 s default); this group has one member.
        consumer_extra_config={"session.timeout.ms": 2000, "heartbeat.interval.ms": 200},
    )
    processed = 0
    outputs = 0
    first_at: float | None = None
    last_at = 0.0

    def count_and_stop(_value: Any) -> None:
        nonlocal processed, first_at, last_at
        last_at = time.perf_counter()
        if first_at is None:
            first_at = last_at
        processed += 1
        ctx = message_context()
        where = (ctx.topic, ctx.partition)
        if where in pending and pending[where] <= ctx.offset + 1:
            pending.pop(where)
        if not pending:
            app.stop()

    def counted(_value: Any) -> None:
        nonlocal outputs
        outputs += 1

    def read(topic: str) -> Any:
        extractor = lambda value, _h, _ts, _type: int(value["ts"])  # noqa: E731
        sdf = app.dataframe(
            app.topic(topic, value_deserializer="json", timestamp_extractor=extractor)
        )
        return sdf.update(count_and_stop)

    shape = args["shape"]
    if shape in ("join", "join_window"):
        orders, payments = (read(t) for t in args["topics"])
        out = orders.join_interval(
            payments, grace_ms=10_000, backward_ms=10_000, forward_ms=60_000, on_merge="keep-left"
        )
        if shape == "join_window":  # per customer: a repartition through a topic
            out = (
                out.group_by("customer")
                .tumbling_window(60_000, grace_ms=10_000)
                .agg(payments=Count(), ordered=Sum("amount"), paid=Sum("paid"))
                .final()
            )
    else:
        sdf = read(args["topics"][0])
        if shape == "filter":  # bench.compare.FILTER
            sdf = sdf.filter(lambda v: v["user_id"] is not None and v["amount"] >= 10)
        if shape in ("tumbling", "filter"):
            window = sdf.tumbling_window(60_000, grace_ms=5_000)
        elif shape == "hopping":
            window = sdf.hopping_window(60_000, 10_000, grace_ms=5_000)
        elif shape == "session":
            window = sdf.session_window(2_000, grace_ms=5_000)
        elif shape == "sliding":
            window = sdf.sliding_window(60_000, grace_ms=5_000)
        elif shape == "count":
            window = sdf.tumbling_count_window(100)
        else:
            raise SystemExit(f"unknown shape {shape!r}")
        out = window.agg(
            clicks=Count(),
            amount_sum=Sum("amount"),
            amount_min=Min("amount"),
            amount_max=Max("amount"),
            amount_avg=Mean("amount"),
            first_page=Earliest("page"),
            last_page=Latest("page"),
        ).final()
    out.update(counted)
    if pending:
        app.run(timeout=120.0)
    seconds = (last_at - first_at) if first_at is not None else 0.0
    print(
        json.dumps(
            {
                "events": processed,
                "seconds": seconds,
                "outputs": outputs,
                "unfinished": len(pending),
            }
        )
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
