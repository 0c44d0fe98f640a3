"""The Kafka streaming source: offset planning, read limits, exact ranges, data loss."""

from __future__ import annotations

import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from flow_jobs.embedded.broker import EmbeddedBroker
from flow_jobs.embedded.producer import Record
from flow_jobs.io.kafka_source import (
    KafkaDataLossError,
    KafkaRange,
    KafkaSourceOptions,
    KafkaStreamReader,
    cap_offsets,
    read_range,
)
from tests.support import send


def test_cap_offsets_shares_the_budget_fairly() -> None:
    assert cap_offsets({0: 0, 1: 0}, {0: 100, 1: 100}, 50) == {0: 25, 1: 25}
    # A partition with little new data leaves its share to the others.
    assert cap_offsets({0: 0, 1: 0, 2: 0}, {0: 5, 1: 100, 2: 100}, 65) == {0: 5, 1: 30, 2: 30}
    assert cap_offsets({0: 10}, {0: 12}, 50) == {0: 12}
    # A partition new to the query starts at 0 and never exceeds the budget in total.
    capped = cap_offsets({0: 90}, {0: 100, 1: 1000}, 7)
    assert sum(capped[p] - {0: 90}.get(p, 0) for p in capped) == 7


def _options(broker: EmbeddedBroker, topic: str, **extra: object) -> KafkaSourceOptions:
    return KafkaSourceOptions(bootstrap_servers=broker.bootstrap_servers, topic=topic, **extra)


def _fill(broker: EmbeddedBroker, topic: str, per_partition: int) -> None:
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(b"v-%d-%d" % (i % 2, i // 2), i % 2, timestamp_ms=1_700_000_000_000 + i)
            for i in range(per_partition * 2)
        ],
    )


def test_read_limit_and_available_now_pin(broker: EmbeddedBroker, topic: str) -> None:
    _fill(broker, topic, 100)
    reader = KafkaStreamReader(_options(broker, topic, max_offsets_per_trigger=60))
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        assert reader.getDefaultReadLimit() == ReadMaxRows(60)
        assert reader.latestOffset(start, ReadMaxRows(60)) == {topic: {"0": 30, "1": 30}}
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 100, "1": 100}}

        reader.prepareForTriggerAvailableNow()
        _fill(broker, topic, 5)  # arrives after the run's end was pinned
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 100, "1": 100}}
        planned = reader.partitions({topic: {"0": 40, "1": 100}}, {topic: {"0": 100, "1": 100}})
        assert planned == [KafkaRange(topic, 0, 40, 100)]
    finally:
        reader.stop()


def test_a_range_reads_exactly_its_offsets(broker: EmbeddedBroker, topic: str) -> None:
    _fill(broker, topic, 120)
    batches = list(read_range(_options(broker, topic), KafkaRange(topic, 1, 7, 111)))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    values = [v for b in batches for v in b.column("value").to_pylist()]
    assert offsets == list(range(7, 111))
    assert values == [b"v-1-%d" % o for o in offsets]
    event_ts = [t for b in batches for t in b.column("_event_ts").to_pylist()]
    kafka_ts = [t for b in batches for t in b.column("timestamp").to_pylist()]
    assert event_ts == kafka_ts


def test_processing_time_stamps_the_arrival_time(broker: EmbeddedBroker, topic: str) -> None:
    _fill(broker, topic, 3)
    before = time.time()
    (batch,) = read_range(_options(broker, topic, processing_time=True), KafkaRange(topic, 0, 0, 3))
    stamps = [t.timestamp() for t in batch.column("_event_ts").to_pylist()]
    assert all(before - 1 <= s <= time.time() + 1 for s in stamps)
    assert batch.column("timestamp")[0].as_py().year == 2023  # the Kafka timestamp stays


def test_an_unreadable_range_fails_loudly(broker: EmbeddedBroker, topic: str) -> None:
    _fill(broker, topic, 10)
    with pytest.raises(KafkaDataLossError, match=rf"{topic}\[0\].*\[100, 105\)"):
        list(
            read_range(
                _options(broker, topic, read_timeout_ms=2_000), KafkaRange(topic, 0, 100, 105)
            )
        )
