"""A topic's offsets on the broker: its end offsets (one function for every caller) and
offsets by time."""

from __future__ import annotations

from typing import Any

from flow_jobs.io.kafka_time_offsets import offsets_for_time
from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.retries import retry


class TopicNotReadable(RuntimeError):
    """The brokers answered without the topic (or its partitions)."""


def read_watermarks(consumer: Any, options: KafkaSourceOptions) -> dict[int, tuple[int, int]]:
    """Each partition's (earliest, latest) offsets on the broker."""
    from confluent_kafka import TopicPartition

    topic = options.topic
    metadata = consumer.list_topics(topic, timeout=30)
    topic_md = metadata.topics.get(topic)
    if topic_md is None or topic_md.error is not None or not topic_md.partitions:
        reason = topic_md.error if topic_md is not None else "not found"
        raise TopicNotReadable(
            f"Kafka topic {topic!r} on {options.bootstrap_servers} is not readable: {reason}"
        )
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        for p in sorted(topic_md.partitions)
    }


def time_offsets(
    options: KafkaSourceOptions, marks: dict[int, tuple[int, int]], at_ms: int
) -> dict[int, int]:
    """Each partition's first offset stamped at or after ``at_ms``, its latest where
    there is none: where a start by time begins (``flow_jobs.io.kafka_time_offsets``).
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
    consumer = Consumer(options.consumer_config())
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
