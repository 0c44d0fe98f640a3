"""Kafka as a PySpark Python streaming data source, over confluent-kafka.

Spark's own ``kafka`` format needs the ``spark-sql-kafka-0-10`` jar, which cannot be
installed from the Python package registries; this source needs nothing but
``pip install``. It stays as small as PySpark's ``DataSourceStreamReader`` contract:

* an offset is a plain JSON dict ``{"<topic>": {"<partition>": <next offset>}}``, kept in
  Spark's offset log, so a restarted query resumes where its checkpoint says;
* ``partitions(start, end)`` plans one input partition per Kafka partition range, and
  ``read`` runs on executors, yielding Arrow record batches (no per-row Python objects
  reach Spark);
* with ``json_schema`` set (a payload schema Arrow decodes like ``from_json``), ``read``
  also decodes the payloads in bulk into the ``_decoded`` struct column; a record Arrow
  rejects is flagged ``_undecoded`` and left to ``from_json`` (``flow_jobs.io.json_decode``);
* every row carries ``_late_watermark``, the watermark Spark's window operators judge its
  batch by (from the checkpoint's offset log), so late rows can be counted one by one;
* with ``combine`` set (a ``flow_jobs.io.combine.CombinePlan``), ``read`` folds the
  records a window would aggregate into partial aggregates, one per (pane, group) and
  block, in the ``_partial`` column; the others pass through with a NULL one;
* with ``idle_file`` set, an idle source sends heartbeats: one row with no record and a
  ``_heartbeat`` watermark, which raises the source's own watermark so that it stops
  holding back the pipeline's (``flow_jobs.runtime.idleness`` decides when, and to what);
* a fresh checkpoint starts at ``starting_offsets``: the earliest or latest offsets, or
  by time (``timestamp:<epoch ms>``), each partition's first record stamped at or after
  it (``flow_jobs.io.kafka_time_offsets``);
* ``latestOffset(start, limit)`` honours ``max_offsets_per_trigger`` (Spark's read limit)
  and ``prepareForTriggerAvailableNow`` pins the end of an ``availableNow`` run;
* a range is read up to its end offset and no further, so the last partial fetch never
  waits for a timeout, and ranges are deterministic on replay.

Data loss fails the query with one line naming the topic, partition and offsets, like
Spark's ``failOnDataLoss``: a planned start already deleted (retention: the broker's
earliest offset is past it) or a partition whose latest offset went backwards (the topic
was deleted and recreated). With ``fail_on_data_loss = false`` the partition resumes at
the broker's earliest offset instead; the skip is planned on the driver and kept in the
batch's end offset (``"_data_loss"``), so it is replay-deterministic, and the ledger row
of the batch holds it. Retention that overtakes a range between planning and reading is
found by the executor (``_AUTO_OFFSET_RESET``) and treated the same way, logged there.

Transient broker errors (connection lost, all brokers down, leader changes, timeouts)
are retried with exponential backoff, ``retries`` in a row at most.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from flow_jobs.io.checkpoint_files import CheckpointFiles, ReaderCheckpoint, read_offset_entry
from flow_jobs.io.combine import EVENT_TS, PARTIAL, CombinePlan, Folder, RangeRows, partial_type
from flow_jobs.io.combine import ddl as combine_ddl
from flow_jobs.io.json_decode import JsonDecoder, arrow_schema
from flow_jobs.io.kafka_time_offsets import offsets_for_time
from flow_jobs.locations import local_path

SOURCE_FORMAT = "flow_kafka"
_TS = pa.timestamp("us", tz="UTC")

log = logging.getLogger(__name__)

#: Columns every Kafka source exposes, in order (Spark DDL).
KAFKA_COLUMNS_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
    "_event_ts TIMESTAMP, _late_watermark TIMESTAMP, _heartbeat TIMESTAMP, "
    "_batch_time TIMESTAMP"
)
#: A record's Kafka headers, in order (NULL: none): kept so a dead letter carries them.
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: The watermark Spark's window operators judge the row's micro-batch by: the one the
#: previous batch ran under (``batchWatermarkMs`` of Spark's offset log), stamped on every
#: row so the plan can single out late rows one by one (``flow_jobs.plan.late_rows``).
#: NULL in a query's first batch (and on a source read without a checkpoint).
LATE_WATERMARK = "_late_watermark"

#: NULL on every record. On a heartbeat row (no record: key, value and position NULL)
#: the watermark its source must reach: the lowest of the sources that are not idle.
HEARTBEAT = "_heartbeat"

#: The micro-batch's processing time on every row: its ``batchTimestampMs`` (offset log),
#: what ``current_timestamp()`` is in that batch. The event-time skew check compares with
#: this column rather than ``current_timestamp()``, which Spark turns into a literal in
#: the generated code, so every micro-batch compiled its scan stage anew (measured: ~3
#: compilations a batch, ~10 ms each). Where the offset log does not give it (a source
#: read without a checkpoint), the time the batch was planned.
BATCH_TIME = "_batch_time"

#: Key of an end offset holding the source's last heartbeat, ``{"seq": n, "watermark_ms":
#: …}``: a new ``seq`` makes Spark plan the source although no record is new, and the
#: offset log keeps it, so a replayed batch plans the same heartbeat row.
HEARTBEAT_KEY = "_heartbeat"

#: Columns a source reading with ``json_schema`` adds: the payload decoded by Arrow (its
#: fields, then a NULL ``__flow_corrupt_record``, the shape ``from_json`` gives) and
#: whether Arrow left the record to ``from_json`` (TRUE on a heartbeat row too).
DECODED = "_decoded"
UNDECODED = "_undecoded"
CORRUPT_RECORD = "__flow_corrupt_record"

#: A Kafka record's columns as the reader gives them (and the dead-letter tap keeps them).
RECORD_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", HEADERS_TYPE),
    ]
)

_ARROW_SCHEMA = pa.schema(
    [
        *RECORD_SCHEMA,
        ("_event_ts", pa.timestamp("us", tz="UTC")),
        (LATE_WATERMARK, pa.timestamp("us", tz="UTC")),
        (HEARTBEAT, pa.timestamp("us", tz="UTC")),
        (BATCH_TIME, pa.timestamp("us", tz="UTC")),
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


#: ``starting_offsets`` by time: ``timestamp:<epoch ms>`` (``KafkaSource.starting_option``).
_TIMESTAMP_OPTION = re.compile(r"^timestamp:(-?\d+)$")


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
    retries: int = 6
    retry_backoff_ms: int = 250
    group_id: str = "flow-jobs"
    client_config: tuple[tuple[str, str], ...] = ()
    checkpoint_location: str | None = None  # the query's, to read its offset log
    #: where the driver publishes which sources are idle (None: this source never is)
    idle_file: str | None = None
    source_name: str = ""  # the source's name in the idle file
    #: the payload's Spark schema (``StructType.json()``) to decode with Arrow, or None
    json_schema: str | None = None
    #: what to pre-aggregate in the reader (``flow_jobs.io.combine.CombinePlan`` as JSON)
    combine: str | None = None

    @classmethod
    def from_options(cls, options: dict[str, str]) -> KafkaSourceOptions:
        def required(key: str) -> str:
            value = options.get(key)
            if not value:
                raise ValueError(f"{SOURCE_FORMAT}: option {key!r} is required")
            return value

        starting = options.get("starting_offsets", "earliest")
        if starting not in ("earliest", "latest") and not _TIMESTAMP_OPTION.match(starting):
            raise ValueError(
                f"{SOURCE_FORMAT}: starting_offsets={starting!r}; use 'earliest', 'latest' "
                "or 'timestamp:<epoch ms>'"
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
            retries=int(options.get("retries", "6")),
            retry_backoff_ms=int(options.get("retry_backoff_ms", "250")),
            group_id=options.get("group_id", "flow-jobs"),
            checkpoint_location=options.get("checkpoint_location") or None,
            idle_file=options.get("idle_file") or None,
            source_name=options.get("source_name", ""),
            json_schema=options.get("json_schema") or None,
            combine=options.get("combine") or None,
            client_config=tuple(
                sorted(
                    (k[len(_CLIENT_PREFIX) :], v)
                    for k, v in options.items()
                    if k.startswith(_CLIENT_PREFIX)
                )
            ),
        )

    @property
    def starting_timestamp_ms(self) -> int | None:
        """The time a fresh checkpoint starts at (``timestamp:<epoch ms>``), else None."""
        found = _TIMESTAMP_OPTION.match(self.starting_offsets)
        return int(found.group(1)) if found else None

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
    late_watermark_ms: int | None = None  # the previous batch's watermark (offset log)
    heartbeat_ms: int | None = None  # set: not a Kafka range, the source's heartbeat row
    #: the batch's ``batchTimestampMs`` (offset log): its ``current_timestamp()``
    #: (``BATCH_TIME``)
    batch_timestamp_ms: int | None = None


Offsets = dict[str, dict[str, int]]


def _offsets(topic: str, by_partition: dict[int, int]) -> Offsets:
    return {topic: {str(p): o for p, o in sorted(by_partition.items())}}


def _by_partition(offsets: Offsets, topic: str) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.get(topic, {}).items()}


#: Key of an end offset that records the partitions a batch resumed elsewhere after data
#: loss: ``{"<partition>": {"expected": next offset, "resumed_at": offset, "reason": …}}``.
DATA_LOSS_KEY = "_data_loss"


@dataclass(frozen=True)
class DataLoss:
    partition: int
    expected: int  # the next offset the checkpoint holds
    resumed_at: int  # where reading resumes: the broker's earliest offset
    reason: str  # "deleted" (retention) | "recreated" (the latest offset went back)

    def describe(self, topic: str) -> str:
        if self.reason == "deleted":
            return (
                f"Kafka {topic}[{self.partition}]: offsets {self.expected}.."
                f"{self.resumed_at - 1} were deleted (retention) before they were read"
            )
        return (
            f"Kafka {topic}[{self.partition}]: the latest offset went back below "
            f"{self.expected} (the topic was deleted and recreated, or truncated); its "
            f"records from offset {self.expected} on are gone"
        )


def find_data_loss(begin: dict[int, int], marks: dict[int, tuple[int, int]]) -> list[DataLoss]:
    """Partitions whose next offset the broker no longer serves: deleted by retention
    (earliest offset past it) or gone backwards (latest offset below it)."""
    losses = []
    for p, expected in sorted(begin.items()):
        if p not in marks:
            continue
        low, high = marks[p]
        if high < expected:
            losses.append(DataLoss(p, expected, low, "recreated"))
        elif low > expected:
            losses.append(DataLoss(p, expected, low, "deleted"))
    return losses


def _losses(offsets: dict) -> dict[int, dict[str, Any]]:
    return {int(p): v for p, v in (offsets.get(DATA_LOSS_KEY) or {}).items()}


_FAIL_HINT = "set fail_on_data_loss = false on the source to skip to the earliest offset"

#: librdkafka error codes that a retry (or librdkafka's own reconnect) can cure.
_TRANSIENT_NAMES = (
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
    "_TIMED_OUT",
    "NOT_LEADER_FOR_PARTITION",
    "NOT_LEADER_OR_FOLLOWER",
    "LEADER_NOT_AVAILABLE",
    "REQUEST_TIMED_OUT",
    "NETWORK_EXCEPTION",
)


def is_transient(err: Any) -> bool:
    from confluent_kafka import KafkaError

    codes = {getattr(KafkaError, n) for n in _TRANSIENT_NAMES if hasattr(KafkaError, n)}
    return err.code() in codes or bool(err.retriable())


class Backoff:
    """Exponential backoff over consecutive transient errors, ``retries`` at most."""

    def __init__(self, retries: int, base_ms: int, sleep: Any = time.sleep) -> None:
        self.retries, self.base_ms, self.sleep = retries, base_ms, sleep
        self.failures = 0

    def failed(self, what: str, err: str) -> None:
        """Wait before the next try, or raise once ``retries`` tries in a row failed."""
        self.failures += 1
        if self.failures > self.retries:
            raise RuntimeError(
                f"{what}: {err} ({self.retries} retries with backoff exhausted; raise "
                "retries on the source if the broker needs longer to recover)"
            )
        log.warning("%s: %s; retry %d of %d", what, err, self.failures, self.retries)
        self.sleep(min(self.base_ms * 2 ** (self.failures - 1), 30_000) / 1000)

    def succeeded(self) -> None:
        self.failures = 0


def retry(call: Any, what: str, retries: int, base_ms: int, sleep: Any = time.sleep) -> Any:
    """``call()``, retried on transient Kafka errors (``KafkaException``)."""
    from confluent_kafka import KafkaException

    backoff = Backoff(retries, base_ms, sleep)
    while True:
        try:
            return call()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if err is None or not hasattr(err, "code") or not is_transient(err):
                raise
            backoff.failed(what, err.str())


def cap_offsets(
    start: dict[int, int], latest: dict[int, int], max_rows: int, turn: int = 0
) -> tuple[dict[int, int], int]:
    """Advance each partition from ``start`` towards ``latest`` by at most ``max_rows`` in
    all; return the new offsets and the ``turn`` to pass to the next call.

    The budget is shared fairly (water-filling): a partition with little new data leaves
    its share to the others, so one busy partition cannot starve the rest. What does not
    divide evenly (all of it, when the budget is smaller than the number of partitions)
    goes one row each round the partitions, from partition ``turn`` on: every partition
    with data advances at least once every ceil(partitions / budget) calls, instead of the
    low-numbered ones taking the budget until they drain while the others' rows fall
    behind the watermark those moved.
    """
    pending = {p: max(0, latest[p] - start.get(p, 0)) for p in latest}
    grant = dict.fromkeys(latest, 0)
    budget = max_rows
    open_parts = [p for p in sorted(latest) if pending[p] > 0]
    while open_parts and budget >= len(open_parts):
        share = budget // len(open_parts)
        for p in list(open_parts):
            take = min(share, pending[p] - grant[p])
            grant[p] += take
            budget -= take
            if grant[p] >= pending[p]:
                open_parts.remove(p)
    if budget and open_parts:
        order = [p for p in open_parts if p >= turn] + [p for p in open_parts if p < turn]
        for p in order[:budget]:
            grant[p] += 1
        turn = order[budget - 1] + 1
    return {p: start.get(p, 0) + grant[p] for p in latest}, turn


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offset ranges on the driver; ``read`` runs on executors."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self._consumer: Any = None
        self._available_now_end: dict[int, int] | None = None
        self._turn = 0  # where cap_offsets hands out the next uneven rows
        self._run_start: dict[int, int] | None = None  # an availableNow run's first start
        self._heartbeat_sent: int | None = None  # this query run's last heartbeat
        location = options.checkpoint_location
        #: the query's checkpoint, opened on first use (a remote one over the driver's JVM)
        self._checkpoint = ReaderCheckpoint(location) if location else None

    # -- driver side -------------------------------------------------------------------
    def _client(self) -> Any:
        # The planner worker keeps this reader for the query's lifetime; one consumer
        # (metadata and watermark queries only, never assigned) serves every call.
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(self.options.consumer_config())
        return self._consumer

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        o = self.options
        return retry(self._read_watermarks, f"Kafka {o.topic}", o.retries, o.retry_backoff_ms)

    def _read_watermarks(self) -> dict[int, tuple[int, int]]:
        return read_watermarks(self._client(), self.options)

    def initialOffset(self) -> dict:
        marks = self._watermarks()
        at_ms = self.options.starting_timestamp_ms
        if at_ms is not None:
            return _offsets(self.options.topic, self._offsets_at(marks, at_ms))
        pick = 1 if self.options.starting_offsets == "latest" else 0
        return _offsets(self.options.topic, {p: m[pick] for p, m in marks.items()})

    def _offsets_at(self, marks: dict[int, tuple[int, int]], at_ms: int) -> dict[int, int]:
        found = time_offsets(self.options, marks, at_ms)
        log.info("Kafka %s: starting at %s ms, offsets %s", self.options.topic, at_ms, found)
        return found

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
        marks = self._watermarks()
        losses = find_data_loss(begin, marks)
        if losses and self.options.fail_on_data_loss:
            raise KafkaDataLossError(f"{losses[0].describe(topic)}; {_FAIL_HINT}")
        for loss in losses:
            log.warning("%s; resuming at offset %s", loss.describe(topic), loss.resumed_at)
            begin[loss.partition] = loss.resumed_at
        if self._available_now_end is not None:  # pinned before the loss was seen
            self._available_now_end = {
                p: max(o, begin.get(p, 0)) for p, o in self._available_now_end.items()
            }
        latest = self._available_now_end or {p: high for p, (_low, high) in marks.items()}
        latest = {p: max(o, begin.get(p, 0)) for p, o in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest, self._turn = cap_offsets(begin, latest, limit.max_rows, self._turn)
        end: dict[str, Any] = _offsets(topic, latest)
        carried = start.get(HEARTBEAT_KEY)
        beat = self._heartbeat(begin, latest)
        if beat is not None:
            seq = int((carried or {}).get("seq", 0)) + 1
            end[HEARTBEAT_KEY] = {"seq": seq, "watermark_ms": beat}
            self._heartbeat_sent = beat
        elif carried is not None:  # unchanged: no batch for it
            end[HEARTBEAT_KEY] = carried
        if losses:  # kept in the offset log: a replay plans the same ranges
            end[DATA_LOSS_KEY] = {
                str(x.partition): {
                    "expected": x.expected,
                    "resumed_at": x.resumed_at,
                    "reason": x.reason,
                }
                for x in losses
            }
        return end

    def _heartbeat(self, begin: dict[int, int], latest: dict[int, int]) -> int | None:
        """The watermark this batch's heartbeat raises the source to, or None."""
        if self.options.idle_file is None:
            return None
        if self._available_now_end is not None and self._run_start is None:
            self._run_start = dict(begin)
        if any(o > begin.get(p, 0) for p, o in latest.items()):
            return None  # records of its own: not idle
        target = idle_target(self.options.idle_file, self.options.source_name)
        if self._available_now_end is not None:
            # A replay does not look at the clock: a source is idle for the whole run
            # when the run has nothing of it to read (the driver found so at the start,
            # and another source has records: runtime.idleness.replay_targets), and it
            # still has none now; for none of it otherwise.
            empty = all(o <= (self._run_start or {}).get(p, 0) for p, o in latest.items())
            target = target if empty else None
        sent = self._heartbeat_sent
        return target if target is not None and (sent is None or target > sent) else None

    def reportLatestOffset(self) -> dict | None:
        return _offsets(self.options.topic, self._latest())

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        topic = self.options.topic
        begin = _by_partition(start, topic)
        for p, loss in _losses(end).items():
            begin[p] = int(loss["resumed_at"])
        ranges = [
            (p, begin.get(p, 0), stop)
            for p, stop in sorted(_by_partition(end, topic).items())
            if stop > begin.get(p, 0)
        ]
        beat = end.get(HEARTBEAT_KEY)
        if beat == start.get(HEARTBEAT_KEY):
            beat = None
        if not ranges and beat is None:
            return []
        files = self._checkpoint.files() if self._checkpoint is not None else None
        mark, now = batch_stamps(files, end)
        if now is None:  # no checkpoint to read it from: see BATCH_TIME
            now = int(time.time() * 1000)
        planned = [
            KafkaRange(topic, p, first, stop, mark, batch_timestamp_ms=now)
            for p, first, stop in ranges
        ]
        if beat is not None:
            planned.append(KafkaRange(topic, -1, 0, 0, mark, int(beat["watermark_ms"]), now))
        return planned

    def commit(self, end: dict) -> None:
        # Offsets live in Spark's checkpoint; nothing to acknowledge to Kafka.
        return None

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._checkpoint is not None:
            self._checkpoint.close()

    # -- executor side -----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        decoder = json_decoder(self.options)
        plan = combine_plan(self.options)
        if partition.heartbeat_ms is not None:
            row = _heartbeat_row(partition, decoder)
            if plan is not None and decoder is not None:
                row = _with_partial(row, partial_type(plan, decoder.schema))
            yield row
            return
        if plan is None or decoder is None:
            yield from read_range(self.options, partition)
            return
        yield from read_folded(self.options, partition, decoder, plan)


def read_watermarks(consumer: Any, options: KafkaSourceOptions) -> dict[int, tuple[int, int]]:
    """Each partition's (earliest, latest) offsets on the broker."""
    from confluent_kafka import TopicPartition

    topic = options.topic
    metadata = consumer.list_topics(topic, timeout=30)
    topic_md = metadata.topics.get(topic)
    if topic_md is None or topic_md.error is not None or not topic_md.partitions:
        reason = topic_md.error if topic_md is not None else "not found"
        raise RuntimeError(
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


#: A heartbeat's watermark when a source is idle for a whole availableNow run: Spark's
#: highest TIMESTAMP less a year, so that adding any lateness_ms stays in range.
IDLE_FOR_THE_RUN_MS = _MAX_TS_MS - 366 * 86_400_000


def idle_file(checkpoint: str) -> str:
    """Where the driver publishes a query's idle sources for its Kafka readers (JSON):
    beside the checkpoint's folders where it is local, else in the temp folder."""
    folder = local_path(checkpoint)
    if folder is None:
        digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
        folder = os.path.join(tempfile.gettempdir(), "flow-jobs-idle", digest)
    return os.path.join(folder, "flow_idle_sources.json")


def idle_target(path: str, source: str) -> int | None:
    """The watermark (epoch ms) the driver asks an idle ``source`` to reach, or None."""
    try:
        with open(path, encoding="utf-8") as f:
            targets = json.load(f)
    except (OSError, ValueError):
        return None  # not written yet (no source idle so far), or being replaced
    value = targets.get(source) if isinstance(targets, dict) else None
    return int(value) if isinstance(value, int) else None


def _heartbeat_row(rng: KafkaRange, decoder: JsonDecoder | None = None) -> pa.RecordBatch:
    ts_type = pa.timestamp("us", tz="UTC")
    mark = rng.late_watermark_ms
    assert rng.heartbeat_ms is not None
    columns = [
        pa.nulls(1, pa.binary()),
        pa.nulls(1, pa.binary()),
        pa.array([rng.topic], pa.string()),
        pa.nulls(1, pa.int32()),
        pa.nulls(1, pa.int64()),
        pa.nulls(1, ts_type),
        pa.nulls(1, HEADERS_TYPE),
        pa.nulls(1, ts_type),
        pa.array([None if mark is None else mark * 1000], ts_type),
        pa.array([rng.heartbeat_ms * 1000], ts_type),
        _batch_time(rng, 1),
    ]
    if decoder is None:
        return pa.RecordBatch.from_arrays(columns, schema=_ARROW_SCHEMA)
    schema = _decoded_schema(decoder)
    decoded = pa.nulls(1, schema.field(DECODED).type)
    return pa.RecordBatch.from_arrays([*columns, decoded, pa.array([True])], schema=schema)


def batch_stamps(files: CheckpointFiles | None, end: dict) -> tuple[int | None, int | None]:
    """(late watermark, batch timestamp) of the micro-batch that reads up to ``end``: the
    watermark the batch before it ran under (epoch ms; None in a query's first batch),
    and the batch's own ``batchTimestampMs``, its ``current_timestamp()``.

    Spark writes a batch's offsets and the watermark it runs under (``batchWatermarkMs``)
    to ``offsets/<batch id>`` before it plans the batch's partitions, so the newest entry
    is this batch's (on a replay too: nothing newer is written before it has run), and
    the entry before it holds the watermark Spark's operators filter this batch by.
    ``files``: the query's checkpoint, local or remote (``flow_jobs.io.checkpoint_files``);
    None where the query has none (a source read on its own)."""
    if files is None:
        return None, None
    try:
        names = files.names("offsets")
    except FileNotFoundError:
        return None, None
    ids = sorted((int(n) for n in names if n.isdigit()), reverse=True)
    for batch in ids[:2]:  # a batch planned again after a restart is still the newest
        entry = read_offset_entry(files, batch)
        if entry is None or end not in entry.sources:
            continue
        previous = read_offset_entry(files, batch - 1)
        return (previous.watermark_ms if previous else None), entry.timestamp_ms
    log.warning(
        "no offset log entry in %s/offsets holds %s: late rows not stamped", files.location, end
    )
    return None, None


def read_range(options: KafkaSourceOptions, rng: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Read offsets [rng.start, rng.end) of one partition as Arrow record batches."""
    decoder = json_decoder(options)
    for batch, offsets in read_messages(options, rng):
        yield _to_arrow(rng, batch, offsets, options.processing_time, decoder)


def read_folded(
    options: KafkaSourceOptions, rng: KafkaRange, decoder: JsonDecoder, plan: CombinePlan
) -> Iterator[pa.RecordBatch]:
    """``read_range`` with the records the window would aggregate folded into partials
    (``flow_jobs.io.combine``), without building their Kafka columns: only the records
    that pass through become full rows."""
    from confluent_kafka import Message

    payload = decoder.schema
    ptype = partial_type(plan, payload)
    schema = _decoded_schema(decoder).append(pa.field(PARTIAL, ptype))
    late = rng.late_watermark_ms
    stamp = pa.scalar(None if late is None else late * 1000, _TS)
    now = None if rng.batch_timestamp_ms is None else rng.batch_timestamp_ms * 1000
    meta = RangeRows(schema, rng.topic, rng.partition, stamp, pa.scalar(now, _TS))
    folder = Folder(plan, payload, meta, rng.batch_timestamp_ms, late)
    for batch, offsets in read_messages(options, rng):
        decoded, undecoded = decoder.decode(list(map(Message.value, batch)))
        stamps = None
        if plan.time_field == EVENT_TS:
            ms, missing = _kafka_stamps(batch)
            stamps = np.where(missing, 0, ms) * 1000, ~missing
        undecoded_np = undecoded.to_numpy(zero_copy_only=False)
        ok = folder.add(decoded, undecoded_np, np.asarray(offsets, dtype=np.int64), stamps)
        if not ok.any():
            yield _with_partial(_to_arrow(rng, batch, offsets, False, decoder), ptype)
        elif not ok.all():
            rest = [m for m, keep in zip(batch, ok, strict=True) if not keep]
            rest_offsets = [o for o, keep in zip(offsets, ok, strict=True) if not keep]
            yield _with_partial(_to_arrow(rng, rest, rest_offsets, False, decoder), ptype)
        if folder.full:
            yield from _emitted(folder)
    yield from _emitted(folder)


def _emitted(folder: Folder) -> Iterator[pa.RecordBatch]:
    partials = folder.emit()
    if partials is not None:
        yield from partials.to_batches()


def _with_partial(batch: pa.RecordBatch, ptype: pa.DataType) -> pa.RecordBatch:
    return batch.append_column(PARTIAL, pa.nulls(batch.num_rows, ptype))


def read_messages(options: KafkaSourceOptions, rng: KafkaRange) -> Iterator[tuple[list, list[int]]]:
    """Read offsets [rng.start, rng.end) of one partition: (messages, their offsets).

    The range is done when a record at or past ``end`` arrives, when the partition's end
    (EOF) is at or past it, or when the consumer's position is: the offsets between the
    last record and ``end`` may hold no record at all (transaction markers, aborted
    records, compaction), so waiting for one would hang until the read timeout."""
    from confluent_kafka import Consumer, Message, TopicPartition

    consumer = Consumer(options.consumer_config())
    where = f"Kafka {rng.topic}[{rng.partition}] reading [{rng.start}, {rng.end})"
    backoff = Backoff(options.retries, options.retry_backoff_ms)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.start)])
        next_offset = rng.start
        last_progress = time.monotonic()
        while next_offset < rng.end:
            messages = consumer.consume(min(_READ_CHUNK, rng.end - next_offset), 1.0)
            done = False
            resume: int | None = None
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
            if batch:
                next_offset = batch_offsets[-1] + 1
                last_progress = time.monotonic()
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
            low, high = marks = _marks(options, consumer, rng)
            if low > next_offset or high < rng.end:
                resume = _data_lost_while_reading(options, rng, next_offset, marks, "no record")
                if resume is None:
                    return
                next_offset = max(next_offset, resume)
                consumer.assign([TopicPartition(rng.topic, rng.partition, next_offset)])
                continue
            if time.monotonic() - last_progress > options.read_timeout_ms / 1000:
                raise KafkaDataLossError(
                    f"{where}: no record at offset {next_offset} within "
                    f"{options.read_timeout_ms} ms; the broker no longer serves the planned "
                    "range"
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


def combine_plan(options: KafkaSourceOptions) -> CombinePlan | None:
    """What this source pre-aggregates in the reader (``flow_jobs.io.combine``), or None."""
    return CombinePlan.from_json(options.combine) if options.combine else None


def json_decoder(options: KafkaSourceOptions) -> JsonDecoder | None:
    """The bulk decoder of a source reading with ``json_schema``, else None."""
    if options.json_schema is None:
        return None
    schema = arrow_schema(options.json_schema)
    if schema is None:
        raise ValueError(f"{SOURCE_FORMAT}: json_schema has a type Arrow does not decode")
    return JsonDecoder(schema)


def _position(consumer: Any, rng: KafkaRange) -> int:
    from confluent_kafka import TopicPartition

    [position] = consumer.position([TopicPartition(rng.topic, rng.partition)])
    return int(position.offset) if position.offset is not None else -1


def _marks(options: KafkaSourceOptions, consumer: Any, rng: KafkaRange) -> tuple[int, int]:
    from confluent_kafka import TopicPartition

    return retry(
        lambda: consumer.get_watermark_offsets(
            TopicPartition(rng.topic, rng.partition), timeout=30
        ),
        f"Kafka {rng.topic}[{rng.partition}]",
        options.retries,
        options.retry_backoff_ms,
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
        raise KafkaDataLossError(f"{what}; {_FAIL_HINT}")
    if at < low < rng.end and high >= rng.end:
        log.warning("%s; resuming at offset %s", what, low)
        return low
    log.warning("%s; skipping the rest of the range", what)
    return None


def _to_arrow(
    rng: KafkaRange,
    batch: list,
    offsets: list[int],
    processing_time: bool,
    decoder: JsonDecoder | None = None,
) -> pa.RecordBatch:
    from confluent_kafka import Message

    n = len(batch)
    ms, missing = _kafka_stamps(batch)
    ts_type = pa.timestamp("us", tz="UTC")
    ts_array = pa.array(np.where(missing, 0, ms) * 1000, ts_type, mask=missing)
    mark = rng.late_watermark_ms
    late_watermark = (
        pa.nulls(n, ts_type) if mark is None else pa.repeat(pa.scalar(mark * 1000, ts_type), n)
    )
    if processing_time:
        event_ts = pa.repeat(pa.scalar(time.time_ns() // 1000, ts_type), n)
    else:
        event_ts = ts_array
    values = list(map(Message.value, batch))
    columns = [
        pa.array(list(map(Message.key, batch)), pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(rng.topic, pa.string()), n),
        pa.repeat(pa.scalar(rng.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        ts_array,
        _headers(batch),
        event_ts,
        late_watermark,
        pa.nulls(n, ts_type),
        _batch_time(rng, n),
    ]
    if decoder is None:
        return pa.RecordBatch.from_arrays(columns, schema=_ARROW_SCHEMA)
    decoded, undecoded = decoder.decode(values)
    return pa.RecordBatch.from_arrays(
        [*columns, _with_corrupt_field(decoded), undecoded], schema=_decoded_schema(decoder)
    )


def _batch_time(rng: KafkaRange, n: int) -> pa.Array:
    """BATCH_TIME (the planner always sets it; NULL only on a range made by hand)."""
    now = rng.batch_timestamp_ms
    return pa.repeat(pa.scalar(None if now is None else now * 1000, _TS), n)


def _kafka_stamps(batch: list) -> tuple[np.ndarray, np.ndarray]:
    """The records' Kafka timestamps (epoch ms) and where they are missing. A record
    without one (type 0) has none; one outside Spark's TIMESTAMP range (e.g. 2^62) would
    overflow and fail the read on every replay: it is missing too (a dead letter where it
    is the event time)."""
    from confluent_kafka import Message

    stamps = np.array(list(map(Message.timestamp, batch)), dtype=np.int64).reshape(len(batch), 2)
    kind, ms = stamps[:, 0], stamps[:, 1]
    return ms, (kind == 0) | (ms < _MIN_TS_MS) | (ms > _MAX_TS_MS)


def _decoded_schema(decoder: JsonDecoder) -> pa.Schema:
    fields = [*decoder.schema, pa.field(CORRUPT_RECORD, pa.string())]
    return _ARROW_SCHEMA.append(pa.field(DECODED, pa.struct(fields))).append(
        pa.field(UNDECODED, pa.bool_())
    )


def _with_corrupt_field(decoded: pa.StructArray) -> pa.StructArray:
    """``decoded`` with ``from_json``'s corrupt-record field, NULL on every row."""
    n = len(decoded)
    fields = [decoded.type.field(i) for i in range(decoded.type.num_fields)]
    return pa.StructArray.from_arrays(
        [*decoded.flatten(), pa.nulls(n, pa.string())],
        fields=[*fields, pa.field(CORRUPT_RECORD, pa.string())],
        mask=decoded.is_null(),
    )


def _headers(batch: list) -> pa.Array:
    headers = [m.headers() for m in batch]
    if not any(headers):  # the usual case: no record has headers
        return pa.nulls(len(batch), HEADERS_TYPE)
    return pa.array(
        [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
        HEADERS_TYPE,
    )


class KafkaDataSource(DataSource):
    """``spark.readStream.format("flow_kafka").option("topic", ...)...``"""

    @classmethod
    def name(cls) -> str:
        return SOURCE_FORMAT

    def schema(self) -> str:
        payload = self.options.get("json_schema")
        if not payload:
            return KAFKA_COLUMNS_DDL
        fields = ", ".join(
            f"{_quote(f['name'])}: {_DDL_TYPES[f['type']]}" for f in json.loads(payload)["fields"]
        )
        ddl = (
            f"{KAFKA_COLUMNS_DDL}, {DECODED} STRUCT<{fields}, {CORRUPT_RECORD}: STRING>, "
            f"{UNDECODED} BOOLEAN"
        )
        combine = self.options.get("combine")
        if not combine:
            return ddl
        schema = arrow_schema(payload)
        assert schema is not None, "pre-aggregation needs a payload Arrow decodes"
        partial = partial_type(CombinePlan.from_json(combine), schema)
        return f"{ddl}, {PARTIAL} {combine_ddl(partial)}"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.from_options(dict(self.options)))


#: Spark's JSON type names of the types Arrow decodes (``json_decode``), as DDL.
_DDL_TYPES = {
    "string": "STRING",
    "long": "BIGINT",
    "integer": "INT",
    "short": "SMALLINT",
    "byte": "TINYINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
}


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def offsets_json(offsets: Offsets) -> str:
    return json.dumps(offsets, sort_keys=True)
