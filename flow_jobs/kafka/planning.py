"""Planning on the driver: offsets, read limits, budgets, heartbeats and data loss."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from flow_jobs.io.checkpoint_gateway import ReaderCheckpoint
from flow_jobs.kafka.combine import partial_type
from flow_jobs.kafka.data_loss import DATA_LOSS_KEY, find_data_loss, recorded_losses
from flow_jobs.kafka.heartbeats import batch_stamps, idle_target
from flow_jobs.kafka.offsets import (
    ASKING_CONFIG,
    TopicNotReadable,
    read_watermarks,
    time_offsets,
)
from flow_jobs.kafka.options import KafkaDataLossError, KafkaSourceOptions
from flow_jobs.kafka.partitions import KafkaRange, partition_offsets, topic_offsets
from flow_jobs.kafka.read import (
    combine_plan,
    heartbeat_row,
    payload_decoder,
    read_folded,
    read_range,
    with_partial,
)
from flow_jobs.kafka.retries import FAIL_HINT, Backoff, retry
from flow_jobs.kafka.schema import HEARTBEAT_KEY
from flow_jobs.worker_heap import freeze_worker_heap

log = logging.getLogger(__name__)


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
        self._topic_seen = False  # the brokers answered with the topic once
        self._newest: dict[int, int] | None = None  # the ends the last planning saw
        location = options.checkpoint_location
        #: the query's checkpoint, opened on first use (a remote one over the driver's JVM)
        self._checkpoint = ReaderCheckpoint(location) if location else None

    # -- driver side -------------------------------------------------------------------
    def _client(self) -> Any:
        # The planner worker keeps this reader for the query's lifetime; one consumer
        # (offset queries only, assigned only while it confirms the ends) serves them all.
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer({**self.options.consumer_config(), **ASKING_CONFIG})
        return self._consumer

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        """Each partition's offsets, with the reader's retries on transient errors; a
        topic the brokers answer without, once this query has read it, is one too: a
        restarted broker may answer before it has loaded its topics (a missing topic at
        the start fails at once)."""
        o = self.options
        backoff = Backoff(o.retries, o.retry_backoff_ms, setting=o.retries_setting)
        while True:
            try:
                marks = retry(
                    self._read_watermarks,
                    f"Kafka {o.topic}",
                    o.retries,
                    o.retry_backoff_ms,
                    setting=o.retries_setting,
                )
            except TopicNotReadable as e:
                if not self._topic_seen:
                    raise
                backoff.failed(f"Kafka {o.topic}", f"{e} (a broker restarting?)")
                continue
            self._topic_seen = True
            self._newest = {p: high for p, (_low, high) in marks.items()}
            return marks

    def _read_watermarks(self) -> dict[int, tuple[int, int]]:
        client = self._client()
        try:
            return read_watermarks(client, self.options)
        finally:
            client.poll(0)  # serves its queued log lines (flow_jobs.librdkafka_logs)

    def initialOffset(self) -> dict:
        marks = self._watermarks()
        at_ms = self.options.starting_timestamp_ms
        if at_ms is not None:
            return topic_offsets(self.options.topic, self._offsets_at(marks, at_ms))
        pick = 1 if self.options.starting_offsets == "latest" else 0
        return topic_offsets(self.options.topic, {p: m[pick] for p, m in marks.items()})

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
        begin = partition_offsets(start, topic)
        marks = self._watermarks()
        losses = find_data_loss(begin, marks)
        if losses and self.options.fail_on_data_loss:
            raise KafkaDataLossError(f"{losses[0].describe(topic)}; {FAIL_HINT}")
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
        end: dict[str, Any] = topic_offsets(topic, latest)
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
        # Spark asks right after latestOffset, for its progress report: that planning's
        # answer, rather than a second round trip (a query and a confirming fetch).
        newest = self._newest if self._newest is not None else self._latest()
        return topic_offsets(self.options.topic, newest)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        topic = self.options.topic
        begin = partition_offsets(start, topic)
        for p, loss in recorded_losses(end).items():
            begin[p] = int(loss["resumed_at"])
        ranges = [
            (p, begin.get(p, 0), stop)
            for p, stop in sorted(partition_offsets(end, topic).items())
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
        decoder = payload_decoder(self.options)
        plan = combine_plan(self.options)
        freeze_worker_heap()  # after the imports of the decoders: flow_jobs.worker_heap
        if partition.heartbeat_ms is not None:
            row = heartbeat_row(partition, decoder)
            if plan is not None and decoder is not None:
                row = with_partial(row, partial_type(plan, decoder.schema))
            yield row
            return
        if plan is None or decoder is None:
            yield from read_range(self.options, partition)
            return
        yield from read_folded(self.options, partition, decoder, plan)
