"""The executor-side consumer loop: one partition's offsets [start, end) as batches of
confluent-kafka messages, through broker outages (retried) and offsets that vanish while
reading (data loss: fail, or resume where the broker still serves the range).

Apart from ``flow_jobs.kafka.read``, which turns these messages into Arrow rows (decoded
or folded): this is the part that talks to the broker, and its ending rules (a range's
end may hold no record at all) are read here alone. It runs on Spark's executors, like
the reader: it imports nothing of the driver.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator
from typing import Any

from flow_jobs.kafka.options import KafkaDataLossError, KafkaSourceOptions
from flow_jobs.kafka.partitions import KafkaRange
from flow_jobs.kafka.retries import FAIL_HINT, Backoff, is_transient, retry
from flow_jobs.kafka.schema import READ_CHUNK

log = logging.getLogger(__name__)


def read_messages(options: KafkaSourceOptions, rng: KafkaRange) -> Iterator[tuple[list, list[int]]]:
    """Read offsets [rng.start, rng.end) of one partition: (messages, their offsets).

    The range is done when a record at or past ``end`` arrives, when the partition's end
    (EOF) is at or past it, or when the consumer's position is: the offsets between the
    last record and ``end`` may hold no record at all (transaction markers, aborted
    records, compaction), so waiting for one would hang until the read timeout."""
    from confluent_kafka import Consumer, Message, TopicPartition

    consumer = Consumer(options.consumer_config())
    where = f"Kafka {rng.topic}[{rng.partition}] reading [{rng.start}, {rng.end})"
    backoff = Backoff(options.retries, options.retry_backoff_ms, setting=options.retries_setting)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        next_offset = rng.start
        # The read timeout counts only time the broker answers without the records: it
        # starts at its first answer after the last records or after an outage, which
        # the retries wait out (``retries`` on the source, named if they run out).
        answering_since: float | None = None
        while next_offset < rng.end:
            messages = consumer.consume(min(READ_CHUNK, rng.end - next_offset), 1.0)
            done = False
            resume: int | None = None
            failures = backoff.failures
            if not any(map(Message.error, messages)):
                # The usual case, without a Python step per message: the records of one
                # partition come in offset order, so the range's part is a slice.
                offsets = list(map(Message.offset, messages))
                first = bisect.bisect_left(offsets, next_offset)
                last = bisect.bisect_left(offsets, rng.end)
                done = last < len(offsets)  # a record past the end: nothing is left
                batch, batch_offsets = messages[first:last], offsets[first:last]
            else:
                batch, done, resume = _sift(options, consumer, rng, messages, next_offset, backoff)
                batch_offsets = [m.offset() for m in batch]
                if backoff.failures > failures:  # the broker is away
                    answering_since = None
            if batch:
                next_offset = batch_offsets[-1] + 1
                answering_since = None
                backoff.succeeded()
                yield batch, batch_offsets
            if done or next_offset >= rng.end:
                return
            if resume is not None:
                next_offset = max(next_offset, resume)
                consumer.assign([TopicPartition(rng.topic, rng.partition, next_offset)])
                continue
            if batch:
                continue
            if _position(consumer, rng) >= rng.end:
                return  # only markers or aborted records were left
            # Nothing came: are the offsets still there? (Not every broker reports an
            # offset out of range: tansu, for one, just serves nothing.)
            low, high = marks = _marks(options, consumer, rng)  # waits out an outage
            if low > next_offset or high < rng.end:
                resume = _data_lost_while_reading(options, rng, next_offset, marks, "no record")
                if resume is None:
                    return
                next_offset = max(next_offset, resume)
                consumer.assign([TopicPartition(rng.topic, rng.partition, next_offset)])
                continue
            now = time.monotonic()
            if answering_since is None:
                answering_since = now
            elif now - answering_since > options.read_timeout_ms / 1000:
                raise KafkaDataLossError(
                    f"{where}: no record at offset {next_offset} within "
                    f"{options.read_timeout_ms} ms of the broker answering (earliest {low}, "
                    f"latest {high}); the broker no longer serves the planned range"
                )
    finally:
        consumer.close()


def _sift(
    options: KafkaSourceOptions,
    consumer: Any,
    rng: KafkaRange,
    messages: list,
    next_offset: int,
    backoff: Backoff,
) -> tuple[list, bool, int | None]:
    """The records of the range among ``messages`` that hold errors: (records, whether
    the range is done, where to resume after offsets vanished, or None)."""
    from confluent_kafka import KafkaError

    where = f"Kafka {rng.topic}[{rng.partition}] reading [{rng.start}, {rng.end})"
    lost = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
    batch = []
    done = False
    for m in messages:
        err = m.error()
        if err is None:
            if m.offset() >= rng.end:
                done = True  # past the end: nothing of the range is left
            elif m.offset() >= next_offset:
                batch.append(m)
            continue
        if err.code() == KafkaError._PARTITION_EOF:
            done = done or m.offset() >= rng.end
            continue
        if err.code() in lost:
            marks = _marks(options, consumer, rng)
            resume = _data_lost_while_reading(options, rng, next_offset, marks, err.str())
            return batch, resume is None, resume
        if is_transient(err):
            backoff.failed(f"{where} at {next_offset}", err.str())
            continue
        raise RuntimeError(f"{where} at {next_offset}: {err.str()}")
    return batch, done, None


def _position(consumer: Any, rng: KafkaRange) -> int:
    from confluent_kafka import TopicPartition

    [position] = consumer.position([TopicPartition(rng.topic, rng.partition)])
    return int(position.offset) if position.offset is not None else -1


def _marks(options: KafkaSourceOptions, consumer: Any, rng: KafkaRange) -> tuple[int, int]:
    """The partition's (earliest, latest) offsets: the latest as an offset query answers
    it or as this consumer's fetches found it, whichever is later (a query's answer can
    stop short of what a fetch returns: ``flow_jobs.kafka.offsets.confirm_ends``)."""
    from confluent_kafka import TopicPartition

    partition = TopicPartition(rng.topic, rng.partition)

    def ask() -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(partition, timeout=options.request_timeout_s)
        _low, fetched = consumer.get_watermark_offsets(partition, cached=True)
        return low, max(high, fetched)

    return retry(
        ask,
        f"Kafka {rng.topic}[{rng.partition}]",
        options.retries,
        options.retry_backoff_ms,
        setting=options.retries_setting,
    )


def _data_lost_while_reading(
    options: KafkaSourceOptions, rng: KafkaRange, at: int, marks: tuple[int, int], why: str
) -> int | None:
    """Offsets of the range vanished after it was planned (retention, a recreated
    topic): fail, or return where to resume (None: nothing of the range is left)."""
    low, high = marks
    what = (
        f"Kafka {rng.topic}[{rng.partition}]: offset {at} of the planned range [{rng.start}, "
        f"{rng.end}) is no longer served (earliest {low}, latest {high}: deleted by "
        f"retention, or the topic was recreated) [{why}]"
    )
    if options.fail_on_data_loss:
        raise KafkaDataLossError(f"{what}; {FAIL_HINT}")
    if at < low < rng.end and high >= rng.end:
        log.warning("%s; resuming at offset %s", what, low)
        return low
    log.warning("%s; skipping the rest of the range", what)
    return None
