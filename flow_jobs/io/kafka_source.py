"""Kafka as a PySpark Python streaming data source, over confluent-kafka.

Spark's own ``kafka`` format needs the ``spark-sql-kafka-0-10`` jar, which cannot be
installed from the Python package registries; this source needs nothing but
``pip install``. It stays as small as PySpark's ``DataSourceStreamReader`` contract:

* an offset is a plain JSON dict ``{"<topic>": {"<partition>": <next offset>}}``, kept in
  Spark's offset log, so a restarted query resumes where its checkpoint says;
* ``partitions(start, end)`` plans one input partition per Kafka partition range, and
  ``read`` runs on executors, yielding Arrow record batches (no per-row Python objects
  reach Spark; JSON payloads are decoded later, in the JVM);
* ``latestOffset(start, limit)`` honours ``max_offsets_per_trigger`` (Spark's read limit)
  and ``prepareForTriggerAvailableNow`` pins the end of an ``availableNow`` run;
* a range is read up to its end offset and no further, so the last partial fetch never
  waits for a timeout, and ranges are deterministic on replay.

Data loss (a start offset already deleted by retention) fails the query with a message
naming the topic, partition and offsets, like Spark's ``failOnDataLoss``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

SOURCE_FORMAT = "flow_kafka"

#: Columns every Kafka source exposes, in order (Spark DDL).
KAFKA_COLUMNS_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, _event_ts TIMESTAMP"
)

_ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("_event_ts", pa.timestamp("us", tz="UTC")),
    ]
)

#: Options that belong to this source; everything prefixed ``kafka.`` goes to librdkafka.
_CLIENT_PREFIX = "kafka."

# librdkafka pauses a consumer for fetch.queue.backoff.ms (default 1000) whenever its
# local queue fills; measured here, 1 ms lifts a bare read from ~180k to ~1.6M msgs/s.
_CONSUMER_DEFAULTS = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "fetch.queue.backoff.ms": 1,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
}

_READ_CHUNK = 50_000

# Spark's TIMESTAMP range (years 1..9999) in epoch ms (flow_jobs.plan.event_time).
_MIN_TS_MS = -62_135_596_800_000
_MAX_TS_MS = 253_402_300_799_999


class KafkaDataLossError(RuntimeError):
    """A planned offset range is no longer (or not yet) readable from Kafka."""


@dataclass(frozen=True)
class KafkaSourceOptions:
    """The parsed options of one Kafka source (strings, as Spark passes them)."""

    bootstrap_servers: str
    topic: str
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    processing_time: bool = False
    fail_on_data_loss: bool = True
    read_timeout_ms: int = 120_000
    group_id: str = "flow-jobs"
    client_config: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_options(cls, options: dict[str, str]) -> KafkaSourceOptions:
        def required(key: str) -> str:
            value = options.get(key)
            if not value:
                raise ValueError(f"{SOURCE_FORMAT}: option {key!r} is required")
            return value

        starting = options.get("starting_offsets", "earliest")
        if starting not in ("earliest", "latest"):
            raise ValueError(
                f"{SOURCE_FORMAT}: starting_offsets={starting!r}; use 'earliest' or 'latest'"
            )
        max_offsets = options.get("max_offsets_per_trigger")
        return cls(
            bootstrap_servers=required("bootstrap_servers"),
            topic=required("topic"),
            starting_offsets=starting,
            max_offsets_per_trigger=int(max_offsets) if max_offsets else None,
            processing_time=options.get("time_mode", "event") == "processing",
            fail_on_data_loss=options.get("fail_on_data_loss", "true").lower() == "true",
            read_timeout_ms=int(options.get("read_timeout_ms", "120000")),
            group_id=options.get("group_id", "flow-jobs"),
            client_config=tuple(
                sorted(
                    (k[len(_CLIENT_PREFIX) :], v)
                    for k, v in options.items()
                    if k.startswith(_CLIENT_PREFIX)
                )
            ),
        )

    def consumer_config(self) -> dict[str, Any]:
        return {
            **_CONSUMER_DEFAULTS,
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            **dict(self.client_config),
        }


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Kafka partition's offsets [start, end) in one micro-batch."""

    topic: str
    partition: int
    start: int
    end: int


Offsets = dict[str, dict[str, int]]


def _offsets(topic: str, by_partition: dict[int, int]) -> Offsets:
    return {topic: {str(p): o for p, o in sorted(by_partition.items())}}


def _by_partition(offsets: Offsets, topic: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.get(topic, {}).items()}


def cap_offsets(start: dict[int, int], latest: dict[int, int], max_rows: int) -> dict[int, int]:
    """Advance each partition from ``start`` towards ``latest`` by at most ``max_rows`` in all.

    The budget is shared fairly (water-filling): a partition with little new data leaves
    its share to the others, so one busy partition cannot starve the rest.
    """
    pending = {p: max(0, latest[p] - start.get(p, 0)) for p in latest}
    grant = {p: 0 for p in latest}
    budget = max_rows
    open_parts = sorted(p for p, n in pending.items() if n > 0)
    while budget > 0 and open_parts:
        share = max(1, budget // len(open_parts))
        for p in list(open_parts):
            take = min(share, pending[p] - grant[p], budget)
            grant[p] += take
            budget -= take
            if grant[p] >= pending[p]:
                open_parts.remove(p)
            if budget == 0:
                break
    return {p: start.get(p, 0) + grant[p] for p in latest}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; ``read`` runs on executors."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._consumer: Any = None
        self._available_now_end: dict[int, int] | None = None

    # -- driver side -------------------------------------------------------------------
    def _client(self) -> Any:
        # The planner worker keeps this reader for the query's lifetime; one consumer
        # (metadata and watermark queries only, never assigned) serves every call.
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self.options.consumer_config())
        return self._consumer

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import TopicPartition

        consumer = self._client()
        topic = self.options.topic
        metadata = consumer.list_topics(topic, timeout=30)
        topic_md = metadata.topics.get(topic)
        if topic_md is None or topic_md.error is not None or not topic_md.partitions:
            reason = topic_md.error if topic_md is not None else "not found"
            raise RuntimeError(
                f"Kafka topic {topic!r} on {self.options.bootstrap_servers} "
                f"is not readable: {reason}"
            )
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in sorted(topic_md.partitions)
        }

    def initialOffset(self) -> dict:
        marks = self._watermarks()
        pick = 1 if self.options.starting_offsets == "latest" else 0
        return _offsets(self.options.topic, {p: m[pick] for p, m in marks.items()})

    def _latest(self) -> dict[int, int]:
        return {p: high for p, (_low, high) in self._watermarks().items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        topic = self.options.topic
        begin = _by_partition(start, topic)
        latest = self._available_now_end or self._latest()
        # A partition never moves backwards, even if the broker briefly reports less.
        latest = {p: max(o, begin.get(p, 0)) for p, o in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = cap_offsets(begin, latest, limit.max_rows)
        return _offsets(topic, latest)

    def reportLatestOffset(self) -> dict | None:
        return _offsets(self.options.topic, self._latest())

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        topic = self.options.topic
        begin = _by_partition(start, topic)
        return [
            KafkaRange(topic, p, begin.get(p, 0), stop)
            for p, stop in sorted(_by_partition(end, topic).items())
            if stop > begin.get(p, 0)
        ]

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing to acknowledge to Kafka.
        return None

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- executor side -----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        yield from read_range(self.options, partition)


def read_range(options: KafkaSourceOptions, rng: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Read offsets [rng.start, rng.end) of one partition as Arrow record batches."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(options.consumer_config())
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        next_offset = rng.start
        last_progress = time.monotonic()
        while next_offset < rng.end:
            messages = consumer.consume(min(_READ_CHUNK, rng.end - next_offset), 1.0)
            batch = []
            for m in messages:
                err = m.error()
                if err is None:
                    if m.offset() < rng.end:
                        batch.append(m)
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= rng.end:  # a gap (compaction, txn markers) up to end
                        next_offset = rng.end
                    continue
                _raise_read_error(options, rng, next_offset, err)
            if batch:
                next_offset = batch[-1].offset() + 1
                last_progress = time.monotonic()
                yield _to_arrow(rng, batch, options.processing_time)
            elif time.monotonic() - last_progress > options.read_timeout_ms / 1000:
                raise KafkaDataLossError(
                    f"Kafka {rng.topic}[{rng.partition}]: no record at offset {next_offset} "
                    f"within {options.read_timeout_ms} ms while reading [{rng.start}, "
                    f"{rng.end}); the broker no longer serves the planned range"
                )
    finally:
        consumer.close()


def _raise_read_error(options: KafkaSourceOptions, rng: KafkaRange, at: int, err: Any) -> None:
    from confluent_kafka import KafkaError

    where = f"Kafka {rng.topic}[{rng.partition}] reading [{rng.start}, {rng.end}) at {at}"
    if err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
        hint = (
            "records were deleted (retention) before they were processed; set "
            "fail_on_data_loss = false on the source to skip them"
        )
        if options.fail_on_data_loss:
            raise KafkaDataLossError(f"{where}: offset out of range: {hint}")
    raise RuntimeError(f"{where}: {err.str()}")


def _to_arrow(rng: KafkaRange, batch: list, processing_time: bool) -> pa.RecordBatch:
    n = len(batch)
    # Kafka timestamps are epoch milliseconds; a record without one (type 0) has none.
    # One outside Spark's TIMESTAMP range (e.g. 2^62) would overflow and fail the read on
    # every replay: it is NULL instead (a dead letter where it is the event time).
    kafka_ts = [
        ts * 1000 if kind and _MIN_TS_MS <= ts <= _MAX_TS_MS else None
        for kind, ts in (m.timestamp() for m in batch)
    ]
    ts_array = pa.array(kafka_ts, pa.timestamp("us", tz="UTC"))
    if processing_time:
        now_us = time.time_ns() // 1000
        event_ts = pa.array([now_us] * n, pa.timestamp("us", tz="UTC"))
    else:
        event_ts = ts_array
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in batch], pa.binary()),
            pa.array([m.value() for m in batch], pa.binary()),
            pa.array([rng.topic] * n, pa.string()),
            pa.array([rng.partition] * n, pa.int32()),
            pa.array([m.offset() for m in batch], pa.int64()),
            ts_array,
            event_ts,
        ],
        schema=_ARROW_SCHEMA,
    )


class KafkaDataSource(DataSource):
    """``spark.readStream.format("flow_kafka").option("topic", ...)...``"""

    @classmethod
    def name(cls) -> str:
        return SOURCE_FORMAT

    def schema(self) -> str:
        return KAFKA_COLUMNS_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.from_options(dict(self.options)))


def offsets_json(offsets: Offsets) -> str:
    return json.dumps(offsets, sort_keys=True)
