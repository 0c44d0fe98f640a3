"""Exact Kafka reads: gaps (transactions), data loss (recreated topics), transient errors.

The local broker (tansu) supports transactions (commit and abort) and deleting and
recreating a topic, but not ``DeleteRecords`` (the broker drops the connection): the
"deleted by retention" path is covered by the pure planning function
(``find_data_loss``) and, at read time, by a range the broker no longer serves after
the topic was recreated, which librdkafka reports with the same error
(``_AUTO_OFFSET_RESET``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from flow_jobs.kafka.data_loss import DATA_LOSS_KEY, DataLoss, find_data_loss
from flow_jobs.kafka.options import KafkaDataLossError, KafkaSourceOptions
from flow_jobs.kafka.partitions import KafkaRange
from flow_jobs.kafka.planning import KafkaStreamReader
from flow_jobs.kafka.read import read_range
from flow_jobs.kafka.retries import retry
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from tests.reference import reference_windows
from tests.support import assert_same_windows, make_spec, random_clicks, read_windows, send
from tests.support import to_records as click_records

WINDOW = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "event_time_column": "ts",
    "lateness_ms": 0,
    "group_by": ["user_id"],
    "aggregations": [{"agg": "count", "as": "n"}],
}
# A hang on a gap would fail the read after this, not after the default 120 s.
FAST = {"read_timeout_ms": 4_000}


def _options(broker: EmbeddedBroker, topic: str, **extra: object) -> KafkaSourceOptions:
    return KafkaSourceOptions(bootstrap_servers=broker.bootstrap_servers, topic=topic, **extra)


def _transactional(broker: EmbeddedBroker, topic: str, plan: list[tuple[str, list[bytes]]]) -> None:
    """Produce each (commit|abort, values) group to partition 0 in its own transaction."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{topic}"}
    )
    producer.init_transactions(30)
    for outcome, values in plan:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value, partition=0)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def _read(options: KafkaSourceOptions, rng: KafkaRange) -> list[tuple[int, bytes]]:
    return [
        (o, v)
        for batch in read_range(options, rng)
        for o, v in zip(
            batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True
        )
    ]


def test_ranges_ending_on_transaction_gaps_end_without_waiting(
    broker: EmbeddedBroker, topic: str
) -> None:
    _transactional(
        broker,
        topic,
        [
            ("commit", [b"c0", b"c1", b"c2"]),
            ("abort", [b"a0", b"a1"]),
            ("commit", [b"c3"]),
            ("abort", [b"a2"]),  # the partition ends on aborted data
        ],
    )
    reader = KafkaStreamReader(_options(broker, topic, **FAST))
    try:
        end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    finally:
        reader.stop()
    high = end[topic]["0"]
    whole = _read(_options(broker, topic, **FAST), KafkaRange(topic, 0, 0, high))
    assert [v for _, v in whole] == [b"c0", b"c1", b"c2", b"c3"]
    c3 = dict((v, o) for o, v in whole)[b"c3"]
    assert c3 < high - 1  # the range's last offsets hold no committed record
    # A range that ends inside the aborted records, and one that holds nothing but them.
    assert [v for _, v in _read(_options(broker, topic, **FAST), KafkaRange(topic, 0, 0, c3))] == [
        b"c0",
        b"c1",
        b"c2",
    ]
    assert _read(_options(broker, topic, **FAST), KafkaRange(topic, 0, c3 + 1, high)) == []


def test_a_windowed_pipeline_reads_a_transactional_topic(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(31), 120, step_ms=500)
    committed = [r.value for r in click_records(events)]
    aborted = [b'{"user_id": "x", "ts": 1700000000000}'] * 3
    plan = []
    for i in range(0, len(committed), 20):
        plan += [("commit", committed[i : i + 20]), ("abort", aborted)]
    _transactional(broker, topic, plan)
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, WINDOW, source={"max_offsets_per_trigger": 23}
    )
    summary = PipelineRunner(spec, spark).run(available_now=True)
    assert summary.input_rows == len(events)
    expected = reference_windows(
        events,
        time_key="ts",
        duration_ms=10_000,
        group_by=["user_id"],
        aggregations=[("count", None, "n")],
        watermark_ms=max(e["ts"] for e in events),
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


def _recreate(broker: EmbeddedBroker, topic: str, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.delete_topics([topic], request_timeout=30).values():
        future.result(30)
    broker.create_topic(topic, partitions=2)
    if records:
        events = random_clicks(random.Random(1), records)
        send(broker.bootstrap_servers, topic, click_records(events))


def test_a_recreated_topic_is_data_loss_not_masked(broker: EmbeddedBroker, topic: str) -> None:
    send(broker.bootstrap_servers, topic, click_records(random_clicks(random.Random(2), 40)))
    committed = {topic: {"0": 20, "1": 20}}  # what a checkpoint read before the recreation
    _recreate(broker, topic, 6)  # 3 records a partition: offsets went backwards

    strict = KafkaStreamReader(_options(broker, topic))
    try:
        with pytest.raises(KafkaDataLossError) as error:
            strict.latestOffset(committed, ReadAllAvailable())
    finally:
        strict.stop()
    message = str(error.value)
    assert f"Kafka {topic}[0]: the latest offset went back below 20" in message
    assert "fail_on_data_loss = false" in message

    lenient = KafkaStreamReader(_options(broker, topic, fail_on_data_loss=False))
    try:
        end = lenient.latestOffset(committed, ReadAllAvailable())
        assert end[topic] == {"0": 3, "1": 3}
        assert end[DATA_LOSS_KEY] == {
            p: {"expected": 20, "resumed_at": 0, "reason": "recreated"} for p in ("0", "1")
        }
        ranges = lenient.partitions(committed, end)  # the same plan on a replay
        now = ranges[0].batch_timestamp_ms  # no checkpoint: the time it was planned
        assert ranges == [
            KafkaRange(topic, 0, 0, 3, batch_timestamp_ms=now),
            KafkaRange(topic, 1, 0, 3, batch_timestamp_ms=now),
        ]
        assert lenient.latestOffset(end, ReadAllAvailable()) == {topic: {"0": 3, "1": 3}}
    finally:
        lenient.stop()


def test_offsets_gone_while_reading_fail_or_skip(broker: EmbeddedBroker, topic: str) -> None:
    send(broker.bootstrap_servers, topic, click_records(random_clicks(random.Random(3), 40)))
    _recreate(broker, topic, 0)  # a planned range [5, 15) is gone before it is read
    rng = KafkaRange(topic, 0, 5, 15)
    with pytest.raises(KafkaDataLossError, match=rf"{topic}\[0\]: offset 5 of .*\[5, 15\)"):
        _read(_options(broker, topic, **FAST), rng)
    assert _read(_options(broker, topic, fail_on_data_loss=False, **FAST), rng) == []


def test_a_pipeline_skips_lost_offsets_and_records_them(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    send(broker.bootstrap_servers, topic, click_records(random_clicks(random.Random(4), 40)))
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, WINDOW, source={"fail_on_data_loss": False}
    )
    assert PipelineRunner(spec, spark).run(available_now=True).input_rows == 40
    _recreate(broker, topic, 0)
    later = random_clicks(random.Random(5), 10, start_ms=1_800_000_000_000)
    send(broker.bootstrap_servers, topic, click_records(later))
    again = PipelineRunner(spec, spark).run(available_now=True)
    assert again.input_rows == 10  # the new topic's records, from its earliest offset
    batches = LedgerStore.for_spec(spec).recent_batches(spec.name, 10)
    lost = [b["end_offsets"]["clicks"].get(DATA_LOSS_KEY) for b in batches if b["end_offsets"]]
    lost = [x for x in lost if x]
    assert lost == [
        {p: {"expected": 20, "resumed_at": 0, "reason": "recreated"} for p in ("0", "1")}
    ]


def test_find_data_loss_retention_and_recreation() -> None:
    marks = {0: (0, 100), 1: (50, 120), 2: (0, 7), 3: (0, 10)}
    begin = {0: 30, 1: 40, 2: 9, 3: 10}
    assert find_data_loss(begin, marks) == [
        DataLoss(1, 40, 50, "deleted"),
        DataLoss(2, 9, 0, "recreated"),
    ]
    assert "offsets 40..49 were deleted" in DataLoss(1, 40, 50, "deleted").describe("t")


def test_transient_errors_are_retried_with_backoff_then_fail() -> None:
    calls, waits = [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) <= 3:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return "ok"

    assert retry(flaky, "Kafka t", 3, 100, sleep=waits.append) == "ok"
    assert waits == [0.1, 0.2, 0.4]

    calls.clear()
    with pytest.raises(RuntimeError, match="2 retries with backoff exhausted"):
        retry(flaky, "Kafka t", 2, 100, sleep=waits.append)

    # the failure names the source, its brokers and the setting to raise
    options = KafkaSourceOptions(
        bootstrap_servers="b1:9092", topic="t", retries=1, source_name="clicks"
    )
    calls.clear()
    with pytest.raises(RuntimeError) as failed:
        retry(flaky, "Kafka t", 1, 100, sleep=waits.append, setting=options.retries_setting)
    assert "raise retries (now 1) on source 'clicks', brokers b1:9092," in str(failed.value)

    def fatal() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):  # not transient: no retry
        retry(fatal, "Kafka t", 5, 100, sleep=waits.append)
