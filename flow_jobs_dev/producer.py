"""Produce records to a topic so that every one of them is visible to offset queries.

tansu answers ListOffsets (the high watermark) with the base offset of a partition's
*last record batch* + 1, so the tail of a multi-record batch stays invisible to a reader
planning by offsets until more data arrives. We do not special-case the source for it;
producers of test and demo data send each partition's last record in a batch of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import Producer

from flow_jobs.librdkafka_logs import librdkafka_logger


@dataclass(frozen=True)
class Record:
    value: bytes | None
    partition: int
    key: bytes | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def produce(bootstrap_servers: str, topic: str, records: Iterable[Record]) -> int:
    """Produce in order; returns the number of records delivered."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 1_000_000,
            "enable.idempotence": False,
            "logger": librdkafka_logger(),  # its lines through Python's logging
        }
    )
    delivered = 0
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            failures.append(str(err))

    last_by_partition: dict[int, Record] = {}
    for record in records:
        held = last_by_partition.get(record.partition)
        if held is not None:
            _send(producer, topic, held, on_delivery)
        last_by_partition[record.partition] = record
    producer.flush()
    # One flush later, each partition's final batch holds exactly its last record.
    for record in last_by_partition.values():
        _send(producer, topic, record, on_delivery)
    producer.flush()
    if failures:
        raise RuntimeError(f"{len(failures)} records not delivered to {topic}: {failures[0]}")
    return delivered


def _send(producer: Producer, topic: str, record: Record, on_delivery: object) -> None:
    kwargs: dict = {"timestamp": record.timestamp_ms} if record.timestamp_ms is not None else {}
    if record.headers:
        kwargs["headers"] = list(record.headers)
    while True:
        try:
            producer.produce(
                topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                on_delivery=on_delivery,
                **kwargs,
            )
            return
        except BufferError:
            producer.poll(0.05)
