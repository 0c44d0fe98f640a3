"""Run Quix Streams on a topic and print what it emits, one JSON object a line.

Run with ``.venv-quix/bin/python`` (quixstreams and its pins, tests/quix/requirements.txt;
they conflict with the project's, so it has a venv of its own), never imported by the
test suite. One argument, a JSON object:

    {"bootstrap": "127.0.0.1:9092", "topic": "t", "state_dir": "/tmp/x",
     "window": {"kind": "sliding", "duration_ms": 10000, "grace_ms": 2000},
     "aggregations": {"n": ["count"], "total": ["sum", "value"], "values": ["collect", "value"]},
     "timestamp_column": "ts", "emit": "final", "loglevel": "WARNING"}

``window.kind``: sliding, tumbling, hopping (``duration_ms``, ``grace_ms``, ``step_ms``),
count_tumbling, count_hopping, count_sliding (``count``, ``step``). The event time is
``timestamp_column`` of the JSON value (the Kafka timestamp without it). It reads the topic
from the earliest offset in a consumer group of its own, stops once it has processed every
partition up to the end offsets it found at its start, and prints:

    {"type": "window", "key": "s1", "start": ..., "end": ..., "n": ..., ...}   each emit
    {"type": "late", "partition": 0, "offset": 7, "timestamp": ..., "start": ...,
     "end": ..., "late_by_ms": ...}   each call of on_late (time windows: a message
                                      skipped for a window that has closed)
    {"type": "done", "processed": N, "unfinished": [partitions not read to the end]}
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from quixstreams import Application, message_context
from quixstreams.dataframe.windows import Collect, Count, Max, Min, Sum

AGGREGATORS = {"count": Count, "sum": Sum, "min": Min, "max": Max, "collect": Collect}
SAFETY_TIMEOUT_S = 60.0  # no message for this long: stop anyway (the test then fails)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """{partition: first offset past the last message}, for partitions holding any."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4()}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        return ends
    finally:
        consumer.close()


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(args: dict[str, Any]) -> None:
    bootstrap, topic = args["bootstrap"], args["topic"]
    pending = end_offsets(bootstrap, topic)
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-compare-{uuid.uuid4().hex}",
        auto_offset_reset="earliest",
        state_dir=args["state_dir"],
        use_changelog_topics=False,  # state in the state dir only: nothing to recover
        loglevel=args.get("loglevel", "WARNING"),
        # The embedded broker answers a group's first join after about half the session
        # timeout (23 s with librdkafka's 45 s default); this group has one member.
        consumer_extra_config={"session.timeout.ms": 2000, "heartbeat.interval.ms": 200},
    )
    column = args.get("timestamp_column")
    extractor = (lambda value, _h, _ts, _type: int(value[column])) if column else None
    sdf = app.dataframe(app.topic(topic, value_deserializer="json", timestamp_extractor=extractor))

    processed = 0

    def on_late(value, key, timestamp_ms, late_by_ms, start, end, _name, _topic, part, offset):
        emit(
            {
                "type": "late",
                "partition": part,
                "offset": offset,
                "timestamp": timestamp_ms,
                "start": start,
                "end": end,
                "late_by_ms": late_by_ms,
            }
        )
        return False  # no log line: the test counts them

    def count_and_stop(_value: Any) -> None:
        # Every message passes here before the window; the stop takes effect once this
        # message has gone through the window too (the poll loop checks it between
        # messages).
        nonlocal processed
        processed += 1
        ctx = message_context()
        if pending.get(ctx.partition, -1) <= ctx.offset + 1:
            pending.pop(ctx.partition, None)
        if not pending:
            app.stop()

    sdf = sdf.update(count_and_stop)

    w = args["window"]
    kind = w["kind"]
    if kind == "sliding":
        window = sdf.sliding_window(w["duration_ms"], grace_ms=w["grace_ms"], on_late=on_late)
    elif kind == "tumbling":
        window = sdf.tumbling_window(w["duration_ms"], grace_ms=w["grace_ms"], on_late=on_late)
    elif kind == "hopping":
        window = sdf.hopping_window(
            w["duration_ms"], w["step_ms"], grace_ms=w["grace_ms"], on_late=on_late
        )
    elif kind == "count_tumbling":
        window = sdf.tumbling_count_window(w["count"])
    elif kind == "count_hopping":
        window = sdf.hopping_count_window(w["count"], step=w["step"])
    elif kind == "count_sliding":
        window = sdf.sliding_count_window(w["count"])
    else:
        raise SystemExit(f"unknown window kind {kind!r}")

    aggregations = {
        name: AGGREGATORS[spec[0]](*spec[1:]) for name, spec in args["aggregations"].items()
    }
    windowed = window.agg(**aggregations)
    out = windowed.current() if args.get("emit") == "current" else windowed.final()

    def print_window(value: dict[str, Any], key: Any, _timestamp: int, _headers: Any) -> None:
        key = key.decode() if isinstance(key, bytes) else key
        emit({"type": "window", "key": key, **value})

    out.update(print_window, metadata=True)

    if pending:
        app.run(timeout=SAFETY_TIMEOUT_S)
    emit({"type": "done", "processed": processed, "unfinished": sorted(pending)})


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
