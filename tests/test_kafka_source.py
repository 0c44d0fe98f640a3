"""The Kafka streaming source: offset planning, read limits, exact ranges, data loss."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from flow_jobs.kafka.options import KafkaDataLossError, KafkaSourceOptions
from flow_jobs.kafka.partitions import KafkaRange
from flow_jobs.kafka.planning import KafkaStreamReader, cap_offsets
from flow_jobs.kafka.read import read_range
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import send


def _cap(start: dict[int, int], latest: dict[int, int], max_rows: int) -> dict[int, int]:
    return cap_offsets(start, latest, max_rows)[0]


def test_cap_offsets_shares_the_budget_fairly() -> None:
    assert _cap({0: 0, 1: 0}, {0: 100, 1: 100}, 50) == {0: 25, 1: 25}
    # A partition with little new data leaves its share to the others.
    assert _cap({0: 0, 1: 0, 2: 0}, {0: 5, 1: 100, 2: 100}, 65) == {0: 5, 1: 30, 2: 30}
    assert _cap({0: 10}, {0: 12}, 50) == {0: 12}
    # A partition new to the query starts at 0 and never exceeds the budget in total.
    capped = _cap({0: 90}, {0: 100, 1: 1000}, 7)
    assert sum(capped[p] - {0: 90}.get(p, 0) for p in capped) == 7


def test_a_budget_smaller_than_the_partition_count_goes_round_the_partitions() -> None:
    start, latest, turn = dict.fromkeys(range(5), 0), dict.fromkeys(range(5), 100), 0
    seen = []
    for _ in range(5):
        start, turn = cap_offsets(start, latest, 2, turn)
        seen.append(dict(start))
    # Not partitions 0 and 1 until they drain: each partition in turn.
    assert seen[0] == {0: 1, 1: 1, 2: 0, 3: 0, 4: 0}
    assert seen[1] == {0: 1, 1: 1, 2: 1, 3: 1, 4: 0}
    assert seen[2] == {0: 2, 1: 1, 2: 1, 3: 1, 4: 1}
    assert seen[4] == dict.fromkeys(range(5), 2)


@settings(max_examples=300, deadline=None)
@given(
    pending=st.lists(st.sampled_from([0, 1, 2, 3, 10, 50, 10**6]), min_size=1, max_size=12),
    budget=st.integers(1, 40),
    batches=st.integers(1, 60),
)
def test_every_partition_with_data_advances_within_its_turn(
    pending: list[int], budget: int, batches: int
) -> None:
    """Whatever the budget: a batch takes min(budget, what is left), never passes the end,
    and a partition with data waits at most ceil(partitions / budget) - 1 batches."""
    latest = dict(enumerate(pending))
    start, turn = dict.fromkeys(latest, 0), 0
    waited = dict.fromkeys(latest, 0)
    for _ in range(batches):
        end, turn = cap_offsets(start, latest, budget, turn)
        left = sum(latest[p] - start[p] for p in latest)
        assert sum(end[p] - start[p] for p in latest) == min(budget, left)
        assert all(start[p] <= end[p] <= latest[p] for p in latest)
        for p in latest:
            if start[p] < latest[p]:
                waited[p] = 0 if end[p] > start[p] else waited[p] + 1
                assert waited[p] <= -(-len(latest) // budget) - 1, (p, waited)
        start = end


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
        before = int(time.time() * 1000)
        planned = reader.partitions({topic: {"0": 40, "1": 100}}, {topic: {"0": 100, "1": 100}})
        # Without a checkpoint to read batchTimestampMs from, the batch's time is when it
        # was planned (flow_jobs.kafka.schema.BATCH_TIME).
        now = planned[0].batch_timestamp_ms
        assert now is not None and before <= now <= int(time.time() * 1000)
        assert planned == [KafkaRange(topic, 0, 40, 100, batch_timestamp_ms=now)]
    finally:
        reader.stop()


def test_a_read_limit_below_the_partition_count_advances_every_partition(
    broker: EmbeddedBroker,
) -> None:
    topic = "budget-rotation"
    broker.create_topic(topic, partitions=3)
    send(
        broker.bootstrap_servers,
        topic,
        [Record(b"x", i % 3, timestamp_ms=1_700_000_000_000 + i) for i in range(30)],
    )
    reader = KafkaStreamReader(_options(broker, topic, max_offsets_per_trigger=1))
    try:
        offsets = reader.initialOffset()
        for _ in range(3):
            offsets = reader.latestOffset(offsets, ReadMaxRows(1))
        # One row a batch, each partition in turn (not partition 0 until it drains).
        assert offsets == {topic: {"0": 1, "1": 1, "2": 1}}
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
