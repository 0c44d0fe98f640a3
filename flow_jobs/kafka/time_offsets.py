"""Where a Kafka partition reaches a time: the first offset whose record is stamped at or
after it (``starting_offsets = { timestamp = … }``, ``flow-jobs reset --from``).

The broker answers this with its time index (``offsets_for_times``). Not every broker
keeps one: measured, the embedded broker the tests and the demo use (tansu) answers
offset 0 for every time. So each answer is checked against the records themselves: the
record at the answer must be stamped at or after the time, and the one before it
before the time. An answer that fails is replaced by a binary search over the
partition's offsets, reading one record's timestamp per step.

The search needs a partition's records stamped before the time to come before those
stamped at or after it: true when timestamps never decrease within a partition (a
topic with ``message.timestamp.type = LogAppendTime``, or a producer stamping events in
order); where they go back and forth across the time, it finds *a* crossing, not
necessarily the first. A broker's time index has no such limit.

Offsets stay exact: a position the search lands on may be a transaction marker or a
gap left by compaction; reading from it reads from the next record, as Kafka does.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

#: A partition's (earliest, latest) offsets: ``get_watermark_offsets``.
Marks = dict[int, tuple[int, int]]


def offsets_for_time(
    consumer: Any, topic: str, marks: Marks, at_ms: int, timeout_s: float = 30.0
) -> dict[int, int]:
    """Each partition's first offset with a record stamped at or after ``at_ms`` (epoch
    ms); its latest offset where there is none. ``consumer`` is one this call may assign
    (not a query's planning consumer, which is never assigned)."""
    from confluent_kafka import TopicPartition

    asked = [TopicPartition(topic, p, at_ms) for p, (low, high) in marks.items() if high > low]
    answered = consumer.offsets_for_times(asked, timeout=timeout_s) if asked else []
    answers = {tp.partition: tp.offset for tp in answered if tp.error is None}
    stamps = RecordTimestamps(consumer, topic, timeout_s)
    offsets: dict[int, int] = {}
    searched: list[int] = []
    for p, (low, high) in sorted(marks.items()):
        answer = answers.get(p, -1)
        # -1: no record stamped at or after the time, so the partition's end.
        answer = high if answer < 0 else min(max(answer, low), high)
        if low == high or stamps.is_first_at(p, answer, at_ms, low, high):
            offsets[p] = answer
            continue
        searched.append(p)
        offsets[p] = first_offset_at(
            lambda o, p=p, high=high: stamps.at(p, o, high), low, high, at_ms
        )
    if searched:
        log.warning(
            "Kafka %s: the broker's offsets for time %s ms were wrong for partitions %s "
            "(a broker without a time index answers so); found them by reading record "
            "timestamps instead, which assumes they never decrease within a partition",
            topic,
            at_ms,
            searched,
        )
    return offsets


def first_offset_at(timestamp_at: Any, low: int, high: int, at_ms: int) -> int:
    """The least offset ``o`` in [low, high] with ``timestamp_at(o) >= at_ms``, where
    ``timestamp_at(o)`` is the timestamp of the first record at or after offset ``o``
    (None past the last record: counts as after every time). Binary search: needs the
    records stamped before ``at_ms`` to precede the others (see the module's note)."""
    while low < high:
        middle = (low + high) // 2
        stamp = timestamp_at(middle)
        if stamp is None or stamp >= at_ms:
            high = middle
        else:
            low = middle + 1
    return low


class RecordTimestamps:
    """Reads the timestamp of the first record at or after an offset of a partition."""

    def __init__(self, consumer: Any, topic: str, timeout_s: float) -> None:
        self.consumer, self.topic, self.timeout_s = consumer, topic, timeout_s

    def is_first_at(self, partition: int, offset: int, at_ms: int, low: int, high: int) -> bool:
        """Whether ``offset`` is the partition's first one at or after ``at_ms``: the
        record there is not older, the one before it is. A gap just before ``offset``
        (a marker, compaction) reads as the record at ``offset``, fails the check and
        sends the partition to the search: slower, still right."""
        if offset < high:
            stamp = self.at(partition, offset, high)
            if stamp is not None and stamp < at_ms:
                return False
        if offset > low:
            before = self.at(partition, offset - 1, high)
            if before is None or before >= at_ms:
                return False
        return True

    def at(self, partition: int, offset: int, high: int) -> int | None:
        """The timestamp (epoch ms) of the first record at or after ``offset`` and
        before ``high``; None where there is none."""
        from confluent_kafka import KafkaError, TopicPartition

        if offset >= high:
            return None
        # assign() with an offset starts a new fetch: records fetched for an earlier
        # position are discarded by librdkafka, never returned here.
        self.consumer.assign([TopicPartition(self.topic, partition, offset)])
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            for message in self.consumer.consume(1, 1.0):
                err = message.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return None
                    if err.retriable():
                        continue
                    raise RuntimeError(
                        f"Kafka {self.topic}[{partition}] reading offset {offset}: {err.str()}"
                    )
                if message.partition() != partition or message.offset() < offset:
                    continue
                if message.offset() >= high:
                    return None
                kind, stamp = message.timestamp()
                if kind == 0:  # no timestamp: cannot be placed in time
                    raise RuntimeError(
                        f"Kafka {self.topic}[{partition}] offset {message.offset()} has no "
                        "timestamp: starting_offsets by time needs timestamped records"
                    )
                return int(stamp)
        raise RuntimeError(
            f"Kafka {self.topic}[{partition}]: no record at offset {offset} within "
            f"{self.timeout_s:.0f} s while looking for a start by time"
        )
