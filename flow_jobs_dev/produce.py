"""``make produce`` (``python -m flow_jobs_dev.produce``): a JSON-lines file to a topic.

Each non-blank line of the file is one record's value, sent as it is by a plain
confluent-kafka ``Producer`` with its default batching, as a user's own producer would
send it; ``--key FIELD`` keys each record by a field of its line (records of one key go
to one partition), else the producer spreads them. A topic that does not exist yet is
created with ``--partitions``. Prints how many records each partition received.

    python -m flow_jobs_dev.produce events.jsonl --topic events --bootstrap-servers 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from flow_jobs.librdkafka_logs import librdkafka_logger


def lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The file's non-blank lines, with their line numbers (from 1)."""
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip(b"\r\n")
            if line.strip():
                yield number, line


def key_of(path: Path, number: int, line: bytes, field: str) -> bytes | None:
    try:
        value = json.loads(line).get(field)
    except (ValueError, AttributeError):
        raise SystemExit(
            f"error: {path}:{number}: not a JSON object, so it has no field {field!r} to key by"
        ) from None
    return None if value is None else str(value).encode()


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create ``topic`` unless the broker has it; whether it was created."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": librdkafka_logger()})
    try:
        if topic in admin.list_topics(timeout=10).topics:
            return False
    except KafkaException as e:
        raise SystemExit(
            f"error: no Kafka broker answered at {bootstrap} ({e.args[0].str()}); start one "
            "with `make broker`, or give its address with --bootstrap-servers / BROKER="
        ) from None
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)
    return True


def produce_file(
    path: Path, bootstrap: str, topic: str, key_field: str | None = None
) -> Counter[int]:
    """Send each line of ``path`` as a record; returns the records delivered per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": librdkafka_logger()})
    delivered: Counter[int] = Counter()
    failures: list[str] = []

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            delivered[msg.partition()] += 1  # type: ignore[attr-defined]
        else:
            failures.append(str(err))

    for number, line in lines(path):
        key = key_of(path, number, line, key_field) if key_field else None
        while True:
            try:
                producer.produce(topic, value=line, key=key, on_delivery=on_delivery)
                break
            except BufferError:  # its queue is full: let it send some first
                producer.poll(0.1)
        producer.poll(0)
    producer.flush()
    if failures:
        raise SystemExit(f"error: {len(failures)} records not delivered to {topic}: {failures[0]}")
    return delivered


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flow_jobs_dev.produce",
        description="Send each line of a JSON-lines file as one record to a Kafka topic.",
    )
    parser.add_argument("file", type=Path, help="a JSON-lines file: one record per line")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092")
    parser.add_argument(
        "--partitions", type=int, default=2, help="for a topic created here (default 2)"
    )
    parser.add_argument("--key", metavar="FIELD", help="key each record by this field")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        parser.error(f"{args.file}: no such file")
    created = ensure_topic(args.bootstrap_servers, args.topic, args.partitions)
    delivered = produce_file(args.file, args.bootstrap_servers, args.topic, args.key)
    spread = ", ".join(f"{p}: {n:,}" for p, n in sorted(delivered.items()))
    made = f" (created, {args.partitions} partitions)" if created else ""
    print(
        f"sent {sum(delivered.values()):,} records from {args.file} to topic "
        f"{args.topic!r}{made} on {args.bootstrap_servers}; per partition {spread or '-'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
