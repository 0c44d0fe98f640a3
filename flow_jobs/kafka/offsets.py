"""A topic's offsets on the broker: its end offsets (one function for every caller) and
offsets by time."""

from __future__ import annotations

import time
from typing import Any

from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.retries import retry
from flow_jobs.kafka.time_offsets import offsets_for_time


class TopicNotReadable(RuntimeError):
    """The brokers answered without the topic (or its partitions)."""


#: Settings of a consumer that asks for offsets: a fetch at a partition's end answers
#: at once instead of after the broker's long-poll wait (500 ms by default), and what it
#: prefetches beyond the end stays small.
ASKING_CONFIG = {"fetch.wait.max.ms": 10, "queued.max.messages.kbytes": 1024}

#: How long the fetches confirming the end offsets may take to answer, in all.
CONFIRM_TIMEOUT_S = 10.0


def read_watermarks(consumer: Any, options: KafkaSourceOptions) -> dict[int, tuple[int, int]]:
    """Each partition's (earliest, latest) offsets on the broker, the latest confirmed by
    a fetch at it (``confirm_ends``). ``consumer`` is one that only asks for offsets
    (``ASKING_CONFIG``): it is assigned while it confirms, and unassigned after."""
    from confluent_kafka import TopicPartition

    topic = options.topic
    timeout_s = options.request_timeout_s
    metadata = consumer.list_topics(topic, timeout=timeout_s)
    topic_md = metadata.topics.get(topic)
    if topic_md is None or topic_md.error is not None or not topic_md.partitions:
        reason = topic_md.error if topic_md is not None else "not found"
        raise TopicNotReadable(
            f"Kafka topic {topic!r} on {options.bootstrap_servers} is not readable: {reason}"
        )
    marks = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
        for p in sorted(topic_md.partitions)
    }
    return confirm_ends(consumer, topic, marks)


def confirm_ends(
    consumer: Any,
    topic: str,
    marks: dict[int, tuple[int, int]],
    timeout_s: float = CONFIRM_TIMEOUT_S,
) -> dict[int, tuple[int, int]]:
    """``marks`` with each partition's latest offset confirmed by a fetch at it.

    A broker's answer to an end-offset query (ListOffsets) can stop short of the records
    a fetch returns: tansu answers with the base offset of a partition's last record
    batch + 1, so the rest of the last batch a producer sent stays invisible to a reader
    that trusts it. A fetch at that offset returns the records still there, then the
    partition's end (librdkafka's EOF, at the last stable offset under
    ``read_committed``, its default): the end is the later of the two. On Kafka the
    fetch finds nothing and confirms the answer. A partition whose records keep coming
    ends at the last record fetched by ``timeout_s``: any later end is as good, and the
    next planning sees more."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    ends = {p: high for p, (_low, high) in marks.items()}
    pending = set(marks)
    fetched: set[int] = set()  # partitions that returned a record, if not yet their end
    consumer.assign([TopicPartition(topic, p, high) for p, high in ends.items()])
    try:
        deadline = time.monotonic() + timeout_s
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                if pending <= fetched:
                    break
                raise KafkaException(
                    KafkaError(
                        KafkaError._TIMED_OUT,
                        f"no fetch answer at the end of {topic} partitions "
                        f"{sorted(pending - fetched)} within {timeout_s:.0f} s",
                    )
                )
            first = consumer.poll(min(left, 0.5))  # consume() would wait for all 1000
            queued = [first, *consumer.consume(1000, 0)] if first is not None else []
            for message in queued:
                p, err = message.partition(), message.error()
                if err is None:
                    ends[p] = max(ends[p], message.offset() + 1)
                    fetched.add(p)
                elif err.code() == KafkaError._PARTITION_EOF:
                    ends[p] = max(ends[p], message.offset())
                    pending.discard(p)
                else:
                    raise KafkaException(err)
    finally:
        consumer.unassign()
    return {p: (low, ends[p]) for p, (low, _high) in marks.items()}


def time_offsets(
    options: KafkaSourceOptions, marks: dict[int, tuple[int, int]], at_ms: int
) -> dict[int, int]:
    """Each partition's first offset stamped at or after ``at_ms``, its latest where
    there is none: where a start by time begins (``flow_jobs.kafka.time_offsets``).
    A consumer of its own: the lookup assigns it, a planning consumer never is."""
    from confluent_kafka import Consumer

    # Each step of a search re-assigns the consumer, which waits for the fetch in
    # flight: measured, 0.5 s a step at librdkafka's default fetch.wait.max.ms.
    consumer = Consumer({**options.consumer_config(), "fetch.wait.max.ms": 10})
    try:
        return retry(
            lambda: offsets_for_time(consumer, options.topic, marks, at_ms),
            f"Kafka {options.topic}",
            options.retries,
            options.retry_backoff_ms,
            setting=options.retries_setting,
        )
    finally:
        consumer.close()


def _driver_options(source: Any, group_id: str) -> KafkaSourceOptions:
    """A spec source's (``KafkaSource``) options for a look-up of the driver's own."""
    return KafkaSourceOptions(
        bootstrap_servers=source.bootstrap_servers,
        topic=source.topic,
        group_id=group_id,
        retries=source.retries,
        retry_backoff_ms=source.retry_backoff_ms,
        request_timeout_ms=source.request_timeout_ms,
        client_config=tuple(
            sorted((k, v.get_secret_value()) for k, v in source.client_config.items())
        ),
    )


def source_watermarks(source: Any, group_id: str) -> dict[int, tuple[int, int]]:
    """A spec source's (``KafkaSource``) partitions' (earliest, latest) offsets, asked of
    the broker with a short-lived consumer (the driver's idleness rule and progress
    display); raises when the broker cannot say."""
    from confluent_kafka import Consumer

    options = _driver_options(source, group_id)
    consumer = Consumer({**options.consumer_config(), **ASKING_CONFIG})
    try:
        return read_watermarks(consumer, options)
    finally:
        consumer.close()


def source_time_offsets(
    source: Any, group_id: str, marks: dict[int, tuple[int, int]], at_ms: int
) -> dict[int, int]:
    """Where a fresh checkpoint of a spec source (``KafkaSource``) starting at ``at_ms``
    begins each partition, as its reader finds it (``time_offsets``); raises when the
    broker cannot say."""
    return time_offsets(_driver_options(source, group_id), marks, at_ms)
