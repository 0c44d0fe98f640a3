"""A planned input partition: one Kafka partition's offset range."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Kafka partition's offsets [start, end) in one micro-batch."""

    topic: str
    partition: int
    start: int
    end: int
    late_watermark_ms: int | None = None  # the previous batch's watermark (offset log)
    heartbeat_ms: int | None = None  # set: not a Kafka range, the source's heartbeat row
    #: the batch's ``batchTimestampMs`` (offset log): its ``current_timestamp()``
    #: (``BATCH_TIME``)
    batch_timestamp_ms: int | None = None


Offsets = dict[str, dict[str, int]]


def topic_offsets(topic: str, by_partition: dict[int, int]) -> Offsets:
    return {topic: {str(p): o for p, o in sorted(by_partition.items())}}


def partition_offsets(offsets: Offsets, topic: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.get(topic, {}).items()}
