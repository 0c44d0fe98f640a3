"""Spark's contracts that flow-jobs relies on, pinned against the Spark we ship.

Each test states one behaviour of Spark (not of flow-jobs) and names the code in
flow-jobs that depends on it: a Spark upgrade that changes the behaviour fails here,
where the cause is plain, rather than as a wrong window somewhere else. The queries are
tiny and read JSON files or a probe source, one file (or one offset) per micro-batch,
with ``processAllAvailable`` between them. Where a test needs exact batch boundaries it
turns Spark's no-data batches off for its own query (the setting is per query, kept in
its offset log) and says so.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery

from flow_jobs.runtime.observations import Observations
from flow_jobs.runtime.reports import batches_after, executed
from tests.contract_sources import OffsetLogProbe

# Spark as users run it: generated code (the suite's session interprets: conftest.py)
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("generated_code")]

_SCHEMA = "k STRING, t TIMESTAMP"
_INPUT = "k STRING, ms BIGINT, register BIGINT, delete BIGINT"


class Files:
    """A folder a file stream reads, one new file per micro-batch."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.n = 0

    def add(self, *seconds: int, key: str = "a") -> None:
        """One file of rows (``k``, ``t``) at these event times (seconds)."""
        self.write([{"k": key, "t": f"1970-01-01T00:00:{s:02d}Z"} for s in seconds])

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        # Spark's file listing skips names starting with "." or "_": write there, then
        # rename, so a micro-batch never reads half a file.
        staging = self.folder / f".{self.n}.tmp"
        staging.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows), encoding="utf-8")
        staging.rename(self.folder / f"{self.n:04d}.json")
        self.n += 1

    def stream(self, spark: SparkSession) -> DataFrame:
        return (
            spark.readStream.schema(_SCHEMA).option("maxFilesPerTrigger", 1).json(str(self.folder))
        )


def _offsets(checkpoint: Path, batch: int) -> tuple[list[str], dict[str, Any]]:
    lines = (checkpoint / "offsets" / str(batch)).read_text(encoding="utf-8").splitlines()
    return lines, json.loads(lines[1])


def _newest(checkpoint: Path, folder: str) -> int:
    return max(int(p.name) for p in (checkpoint / folder).iterdir() if p.name.isdigit())


@pytest.fixture
def no_data_batches_off(spark: SparkSession) -> Iterator[None]:
    """Exact batch boundaries: one micro-batch per file, no watermark-only batches."""
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.unset(key)


def _consume(batch: DataFrame, batch_id: int) -> None:
    # Spark 4.2 and 4.3 fail a batch whose stateful operators never ran (state stores
    # not committed): a sink must run the batch's plan, as flow-jobs' sink always does.
    batch.collect()


def _stop(query: StreamingQuery) -> None:
    query.stop()
    query.awaitTermination()


# -- the offset log -------------------------------------------------------------------


def test_a_batch_s_offset_log_entry_is_the_newest_when_its_partitions_are_planned(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark writes ``offsets/<N>`` (a version line, a metadata line with
    ``batchWatermarkMs`` and ``batchTimestampMs``, then one line per source in plan
    order, the source's own offset JSON) before it asks a Python source for batch N's
    partitions, and nothing newer exists then; ``batchTimestampMs`` is what
    ``current_timestamp()`` is in the batch's streaming plan.

    Depends on it: ``flow_jobs.kafka.heartbeats.batch_stamps`` (the late-row stamp and
    the skew bound of pre-aggregation take the newest entry holding the batch's end
    offsets), ``flow_jobs.runtime.checkpoint.read_offset_log`` (the ledger's offsets and
    watermark per batch) and ``flow_jobs.runtime.idleness.run_start``."""
    spark.dataSource.register(OffsetLogProbe)
    checkpoint, probe, latest = tmp_path / "ckpt", tmp_path / "probe.jsonl", tmp_path / "n"
    seen: dict[int, int] = {}

    def record(batch: DataFrame, batch_id: int) -> None:
        now = batch.select("now").limit(1).collect()
        if now:
            seen[batch_id] = int(now[0]["now"].timestamp() * 1000)

    latest.write_text("2")
    query = (
        spark.readStream.format("flow_contract_probe")
        .option("latest", str(latest))
        .option("checkpoint", str(checkpoint))
        .option("probe", str(probe))
        .load()
        # in the streaming plan (a query on the batch inside foreachBatch is a new one)
        .withColumn("now", F.current_timestamp())
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
        latest.write_text("5")
        query.processAllAvailable()
    finally:
        _stop(query)
    calls = [json.loads(line) for line in probe.read_text(encoding="utf-8").splitlines()]
    assert [c["end"] for c in calls] == [{"block": 2}, {"block": 5}]
    assert [c["newest"] for c in calls] == [0, 1]
    for batch, call in enumerate(calls):
        lines = call["lines"]
        assert lines[0] == "v1"
        metadata = json.loads(lines[1])
        assert isinstance(metadata["batchWatermarkMs"], int)
        assert json.loads(lines[2]) == call["end"]  # the one source's line, as it gave it
        assert len(lines) == 3
        assert metadata["batchTimestampMs"] == seen[batch]
        # what Spark committed: the same file, unchanged since the reader saw it
        assert _offsets(checkpoint, batch)[0] == lines


def test_a_window_drops_rows_whose_window_closed_by_the_previous_batch_s_watermark(
    spark: SparkSession, tmp_path: Path, no_data_batches_off: None
) -> None:
    """``batchWatermarkMs`` of ``offsets/<N>`` is the highest event time of batches
    before N less the delay, and Spark evicts (closes) windows by it in batch N; but a
    window aggregation drops batch N's late rows by the watermark of batch N - 1 (its
    ``offsets/<N-1>`` entry), and judges the row's *window*, not its event time: a row
    is dropped when its window ends at or before W(N-1). So a row below W(N) whose window
    closes in batch N still counts in it, and a row below W(N-1) whose window is still
    open is aggregated too.

    Depends on it: ``flow_jobs.plan.late_rows`` (the spec reference's "Late rows"): the
    Kafka reader stamps each row with W(N-1) (``flow_jobs.kafka.heartbeats.batch_stamps``)
    and a row is late when its event time is at or below it; every row Spark would drop
    (its window ended at or before W(N-1)) is therefore late by that rule already, and
    Spark's own filter finds nothing left to drop, so the late-row count and the dead
    letters hold every row a window misses."""
    files, checkpoint = Files(tmp_path / "in"), tmp_path / "ckpt"
    out: list[tuple[int, int]] = []
    windows = (
        files.stream(spark)
        .withWatermark("t", "0 seconds")
        .groupBy(F.window("t", "10 seconds"))
        .count()
    )

    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend((int(r["window"]["start"].timestamp()), r["count"]) for r in batch.collect())

    query = (
        windows.writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        files.add(15)  # batch 0 runs under 0
        query.processAllAvailable()
        # batch 1 runs under 15 s, drops by 0: 4 s counts in [0, 10), closed by 15 s
        files.add(12, 25, 4)
        query.processAllAvailable()
        # batch 2 runs under 25 s, drops by 15 s: 3 s ([0, 10) ended) is dropped, 13 s
        # (below 15 s, but [10, 20) is open) counts in [10, 20), closed by 25 s
        files.add(13, 3)
        query.processAllAvailable()
        files.add(45)
        query.processAllAvailable()
    finally:
        _stop(query)
    marks = [_offsets(checkpoint, n)[1]["batchWatermarkMs"] for n in range(4)]
    progress = {p["batchId"]: p for p in query.recentProgress}
    dropped = [progress[n]["stateOperators"][0]["numRowsDroppedByWatermark"] for n in range(4)]
    assert marks == [0, 15_000, 25_000, 25_000]
    assert dropped == [0, 0, 1, 0]
    assert out == [(0, 1), (10, 3)]


def test_a_session_takes_a_row_at_its_end_and_a_gap_per_row(
    spark: SparkSession, tmp_path: Path, no_data_batches_off: None
) -> None:
    """A streaming ``session_window`` gives a row the session [t, t + gap) and merges
    sessions that overlap *or touch*: a row exactly one gap after the last joins its
    session, within a batch and across batches (from the state). With a gap column (a
    calendar interval per row) a row's session is [t, t + its gap), and merged sessions
    end at the latest end, not at the last row's.

    Depends on it: ``flow_jobs.windows.session`` and the spec reference's session row
    (a row at or before the running session's end joins it); the Kafka reader's session
    partials (``flow_jobs.kafka.combine``), each given [first, last + gap) by a gap per
    row (``flow_jobs.plan.windows``)."""
    folder, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    files = Files(folder)
    out: list[tuple[str, int, int, int]] = []
    gap = F.make_interval(secs=F.coalesce(F.col("g"), F.lit(10)).cast("decimal(18,6)"))
    sessions = (
        spark.readStream.schema("k STRING, t TIMESTAMP, g BIGINT")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .withWatermark("t", "0 seconds")
        .groupBy(F.session_window("t", gap), "k")
        .count()
    )

    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend(
            (r["k"], int(r["session_window"]["start"].timestamp()),
             int(r["session_window"]["end"].timestamp()), r["count"])
            for r in batch.collect()
        )  # fmt: skip

    def at(key: str, second: int, g: int | None = None) -> dict[str, Any]:
        return {"k": key, "t": f"1970-01-01T00:00:{second:02d}Z", "g": g}

    query = (
        sessions.writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        # a: 10 s is one gap after 0 s (one batch), 20 s one gap after 10 s (the state)
        # b: [1, 26) by its own gap takes [3, 13), then 26 s at its end
        for rows in (
            [at("a", 0), at("a", 10), at("b", 1, 25), at("b", 3)],
            [at("a", 20)],
            [at("b", 26)],
            [at("z", 59)],
            [at("z", 59)],  # runs under the watermark 59 s: the sessions close
        ):
            files.write(rows)
            query.processAllAvailable()
    finally:
        _stop(query)
    assert sorted(out) == [("a", 0, 30, 3), ("b", 1, 36, 3)]


def test_an_exploded_window_struct_marked_as_event_time_closes_and_drops_by_its_end(
    spark: SparkSession, tmp_path: Path, no_data_batches_off: None
) -> None:
    """A row exploded into several (start, end) structs, the struct column carrying the
    watermark-delay mark, groups in append mode like ``window()``'s struct: a window
    closes in the batch whose watermark is at or above its end (exactly at it too), and
    a batch's row is dropped from each of its windows that ended at or before the
    previous batch's watermark, and kept in the others.

    Depends on it: cumulating windows on Spark's aggregation
    (``flow_jobs.windows.cumulate``, ``flow_jobs.plan.windows._exploded``)."""
    files, checkpoint = Files(tmp_path / "in"), tmp_path / "ckpt"
    out: list[tuple[int, int, int]] = []
    t = F.unix_seconds(F.col("t"))
    start = t - F.pmod(t, F.lit(20))
    first = start + (F.floor((t - start) / 5) + 1) * 5
    ends = F.sequence(first, start + 20, F.lit(5).cast("bigint"))
    windows = F.transform(
        ends,
        lambda e: F.struct(
            F.timestamp_seconds(start).alias("start"), F.timestamp_seconds(e).alias("end")
        ),
    )
    mark = {"spark.watermarkDelayMs": 0}
    frame = (
        files.stream(spark)
        .withWatermark("t", "0 seconds")
        .withColumn("w", F.explode(windows))
        .withColumn("w", F.col("w").alias("w", metadata=mark))
        .groupBy("w")
        .count()
    )

    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend(
            (int(r["w"]["start"].timestamp()), int(r["w"]["end"].timestamp()), r["count"])
            for r in batch.collect()
        )

    query = (
        frame.writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        files.add(3)  # batch 0 (watermark 0): in [0, 5), [0, 10), [0, 15), [0, 20)
        query.processAllAvailable()
        files.add(10)  # batch 1 (3 s): [0, 15), [0, 20)
        query.processAllAvailable()
        files.add(7)  # batch 2 (10 s, drops by 3 s): closes [0, 5) and, at its end, [0, 10)
        query.processAllAvailable()
        files.add(8)  # batch 3 (10 s, drops by 10 s): [0, 10) ended, [0, 15) and [0, 20) not
        query.processAllAvailable()
        files.add(40)
        query.processAllAvailable()
        files.add(40)  # batch 5 (40 s): [0, 15) and [0, 20) close
        query.processAllAvailable()
    finally:
        _stop(query)
    marks = [_offsets(checkpoint, n)[1]["batchWatermarkMs"] for n in range(6)]
    progress = {p["batchId"]: p for p in query.recentProgress}
    dropped = [progress[n]["stateOperators"][0]["numRowsDroppedByWatermark"] for n in range(6)]
    assert marks == [0, 3_000, 10_000, 10_000, 10_000, 40_000]
    assert dropped == [0, 0, 0, 1, 0, 0]
    assert sorted(out) == [(0, 5, 1), (0, 10, 2), (0, 15, 4), (0, 20, 4)]
    state = spark.read.format("statestore").load(str(checkpoint))
    assert state.schema["key"].dataType.fieldNames() == ["w"]


class _HoldUntilWatermark(StatefulProcessor):
    """Holds each row until the watermark reaches its time (``transformWithState``,
    rows as ``Row``), then emits it: the shape of flow_jobs.dedup.processor."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.held = handle.getListState("held", "ms BIGINT")

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        for r in rows:
            ms = int(r["t"].timestamp() * 1000)
            self.held.appendValue((ms,))
            self.handle.registerTimer(ms)
        return iter(())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Any]:
        watermark = timerValues.getCurrentWatermarkInMs()
        held = [r[0] for r in self.held.get()] if self.held.exists() else []
        self.held.clear()
        later = [(ms,) for ms in held if ms > watermark]
        if later:
            self.held.put(later)
        for ms in sorted(ms for ms in held if ms <= watermark):
            yield _Released(key[0], pd.Timestamp(ms, unit="ms", tz="UTC").to_pydatetime())

    def close(self) -> None:
        pass


_Released = Row("k", "t")


def test_rows_released_at_the_watermark_by_a_state_operator_reach_a_window_that_closes_then(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``transformWithState`` in event time with ``eventTimeColumnName`` chains into a
    window aggregation: a row the operator emits when the watermark W reaches its time
    is aggregated in that batch, even in a window that W closes in the same batch (its
    end at W exactly, too): the window drops a batch's rows only by the previous batch's
    watermark. Timers fire in Spark's no-data batches, which advance the watermark.

    Depends on it: ``flow_jobs.dedup.processor`` releases each record once the watermark
    reaches it, into the window (``flow_jobs.dedup.compile``)."""
    files, out = Files(tmp_path / "in"), []
    held = (
        files.stream(spark)
        .withWatermark("t", "0 seconds")
        .groupBy("k")
        .transformWithState(
            _HoldUntilWatermark(), "k STRING, t TIMESTAMP", "Append", "EventTime",
            eventTimeColumnName="t",
        )
    )  # fmt: skip

    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend((int(r["w"]["start"].timestamp()), r["count"]) for r in batch.collect())

    query = (
        held.groupBy(F.window("t", "10 seconds").alias("w"))
        .count()
        .writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        for seconds in [(3, 4), (12,), (19, 20), (35,)]:
            files.add(*seconds)
            query.processAllAvailable()
        # 19 and 20 are held until the watermark is 20 s: [10, 20) closes in that same
        # batch with 12 and 19 in it
        assert sorted(out) == [(0, 2), (10, 2), (20, 1)]
    finally:
        _stop(query)


class _EmitBelowTheWatermark(StatefulProcessor):
    """Emits, for each timer, one row at the firing watermark less ``below_ms``: the
    shape of a window join emitting a window at its end less 1 ms."""

    def __init__(self, below_ms: int) -> None:
        self.below_ms = below_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        for r in rows:
            self.handle.registerTimer(int(r["t"].timestamp() * 1000))
        return iter(())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Any]:
        ms = timerValues.getCurrentWatermarkInMs() - self.below_ms
        yield _Released(key[0], pd.Timestamp(ms, unit="ms", tz="UTC").to_pydatetime())

    def close(self) -> None:
        pass


@pytest.mark.parametrize("below_ms", [1, 5_000])
def test_a_state_operator_may_emit_below_the_watermark_down_to_the_previous_batch_s(
    spark: SparkSession, tmp_path: Path, below_ms: int
) -> None:
    """An event-time ``transformWithState`` with ``eventTimeColumnName`` may emit a row
    below the watermark its timers fire at, as long as it is not below the previous
    batch's (the late-event watermark): 1 ms below reaches the window downstream; 5 s
    below, past the previous batch's watermark, fails the query with
    ``EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED``.

    Depends on it (next): a window over a window join's rows at their window's end less
    1 ms (Flink's ``window_time``); the join emits a window in the first batch whose
    watermark reaches its end, so never below the previous batch's."""
    files, out = Files(tmp_path / "in"), []
    emitted = (
        files.stream(spark)
        .withWatermark("t", "0 seconds")
        .groupBy("k")
        .transformWithState(
            _EmitBelowTheWatermark(below_ms), "k STRING, t TIMESTAMP", "Append", "EventTime",
            eventTimeColumnName="t",
        )
    )  # fmt: skip

    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend((int(r["w"]["start"].timestamp()), r["count"]) for r in batch.collect())

    query = (
        emitted.groupBy(F.window("t", "10 seconds").alias("w"))
        .count()
        .writeStream.outputMode("append")
        .foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    if below_ms == 5_000:  # the timer at 3 s fires at 3 s, the previous batch's 0
        with pytest.raises(Exception, match="EMITTING_ROWS_OLDER_THAN_WATERMARK"):
            try:
                for seconds in [(3,), (12,)]:
                    files.add(*seconds)
                    query.processAllAvailable()
            finally:
                _stop(query)  # the failed query's error again
        return
    try:
        for seconds in [(3,), (12,), (25,), (40,)]:
            files.add(*seconds)
            query.processAllAvailable()
        # rows at 2.999, 11.999, 24.999 and 39.999 s, each in its window ([30, 40) closes
        # in the batch that emits its row: the window drops by the previous watermark)
        assert sorted(out) == [(0, 1), (10, 1), (20, 1), (30, 1)]
    finally:
        _stop(query)


def test_to_json_and_back_gives_every_value_exactly(spark: SparkSession) -> None:
    """``to_json`` of a row and ``from_json`` with its schema, with microsecond
    timestamps and NULL fields written out, give back every value: NaN, the
    infinities, -0.0, integers past 2^53, decimals, binary, nested structs, arrays and
    maps with NULLs.

    Depends on it: ``flow_jobs.dedup.compile`` carries each source row through the dedup
    operator as one JSON string."""
    from decimal import Decimal

    from flow_jobs.plan.carried_rows import JSON_OPTIONS as _JSON

    schema = (
        "u STRING, d DOUBLE, f FLOAT, n BIGINT, dec DECIMAL(20,4), ts TIMESTAMP, b BINARY, "
        "k STRUCT<key: BINARY, value: BINARY, headers: ARRAY<STRUCT<key: STRING, "
        "value: BINARY>>>, m MAP<STRING, INT>, a ARRAY<DOUBLE>"
    )
    at = pd.Timestamp("2024-01-01T00:00:00.123456Z").to_pydatetime()
    rows = [
        ("x", float("nan"), float("inf"), 2**53 + 1, Decimal("12.3456"), at, b"\x00\xff",
         (b"k", None, [("h", b"\x01"), ("g", None)]), {"a": 1}, [1.5, float("-inf"), None]),
        (None, None, -0.0, None, None, None, None, None, None, None),
        ("", 5e-324, 3.4e38, -1, Decimal("-0.0001"), at, b"", (None, b"", []), {}, []),
    ]  # fmt: skip
    frame = spark.createDataFrame(rows, schema)
    packed = F.to_json(F.struct(*frame.columns), _JSON)
    back = frame.select(F.from_json(packed, frame.schema, _JSON).alias("r")).select("r.*")
    assert [repr(r) for r in back.collect()] == [repr(r) for r in frame.collect()]


def test_the_commit_log_holds_the_next_batch_s_watermark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``commits/<N>`` is ``v1`` then ``{"nextBatchWatermarkMs": ...}``: the watermark
    batch N computed, which a restart resumes from.

    Depends on it: ``flow_jobs.runtime.inspect`` and the ledger read a stopped query's
    watermark from the checkpoint, and a restart must not reopen what it closed."""
    files, checkpoint = Files(tmp_path / "in"), tmp_path / "ckpt"
    frame = files.stream(spark).withWatermark("t", "2 seconds").groupBy(F.window("t", "5 seconds"))
    query = (
        frame.count()
        .writeStream.outputMode("append")
        .foreachBatch(_consume)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        files.add(30)
        query.processAllAvailable()
    finally:
        _stop(query)
    last = _newest(checkpoint, "commits")
    lines = (checkpoint / "commits" / str(last)).read_text(encoding="utf-8").splitlines()
    assert lines[0] == "v1"
    assert json.loads(lines[1]) == {"nextBatchWatermarkMs": 28_000}


# -- watermarks over several sources --------------------------------------------------


def test_per_source_watermarks_do_not_survive_a_restart(
    spark: SparkSession, tmp_path: Path, no_data_batches_off: None
) -> None:
    """Spark keeps one watermark per ``withWatermark`` node and takes the lowest
    (``multipleWatermarkPolicy = min``), but only the global one is checkpointed: after
    a restart a node that has had no row since holds the minimum at 0, wherever it
    stood before, so the global watermark does not move until every node has rows
    again (it never goes back either).

    Depends on it: ``flow_jobs.plan.sources.SourceWatermark`` (one node per source) and
    ``flow_jobs.runtime.idleness``: an idle source's heartbeat is what lifts its node,
    after a restart as before, so a quiet topic cannot stall the windows of a busy one."""
    fast, slow, checkpoint = Files(tmp_path / "a"), Files(tmp_path / "b"), tmp_path / "ckpt"

    def start() -> StreamingQuery:
        a = fast.stream(spark).withWatermark("t", "0 seconds")
        b = slow.stream(spark).withWatermark("t", "0 seconds")
        return (
            a.unionByName(b)
            .groupBy(F.window("t", "5 seconds"))
            .count()
            .writeStream.outputMode("append")
            .foreachBatch(_consume)
            .option("checkpointLocation", str(checkpoint))
            .start()
        )

    def watermark() -> int:
        last = _newest(checkpoint, "commits")
        lines = (checkpoint / "commits" / str(last)).read_text(encoding="utf-8").splitlines()
        return int(json.loads(lines[1])["nextBatchWatermarkMs"])

    query = start()
    try:
        fast.add(40)
        slow.add(20)
        query.processAllAvailable()
        first = watermark()
        slow.add(30)  # the fast node, still at 40 s, is not the minimum: 30 s is
        query.processAllAvailable()
        running = watermark()
    finally:
        _stop(query)
    query = start()
    try:
        slow.add(35)  # after the restart the fast node has no row: it holds the min at 0
        query.processAllAvailable()
        restarted = watermark()
        fast.add(41)
        query.processAllAvailable()
        both = watermark()
    finally:
        _stop(query)
    assert (first, running, restarted, both) == (20_000, 30_000, 30_000, 35_000)


def test_a_column_carrying_the_watermark_delay_metadata_is_watermarked(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``withWatermark`` marks its column with ``spark.watermarkDelayMs`` in the column's
    metadata, and Spark's window aggregation treats any column carrying that mark as the
    watermarked event time (append mode accepts it, windows close by it); without the
    mark append mode is refused.

    Depends on it: ``flow_jobs.plan.event_time.with_event_time`` with per-source
    watermarks: the window's time column only carries the mark, since Spark refuses a
    second ``withWatermark`` downstream of the sources' own nodes."""
    files = Files(tmp_path / "in")
    marked = files.stream(spark).withWatermark("t", "1 second")
    assert marked.schema["t"].metadata == {"spark.watermarkDelayMs": 1000}
    hidden = (
        files.stream(spark)
        .withColumn("hidden", F.col("t"))
        .withWatermark("hidden", "1 second")
        .drop("hidden")
    )
    out: list[int] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        out.extend(int(r["window"]["start"].timestamp()) for r in batch.collect())

    def start(frame: DataFrame, name: str) -> StreamingQuery:
        return (
            frame.groupBy(F.window("when", "5 seconds"))
            .count()
            .writeStream.outputMode("append")
            .foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / name))
            .start()
        )

    bare = hidden.withColumn("when", F.col("t"))
    with pytest.raises(Exception, match=r"STREAMING_OUTPUT_MODE\.UNSUPPORTED_OPERATION"):
        start(bare, "bare")
    carried = hidden.withColumn(
        "when", F.col("t").alias("when", metadata={"spark.watermarkDelayMs": 1000})
    )
    query = start(carried, "marked")
    try:
        files.add(1, 3)
        query.processAllAvailable()
        files.add(20)
        query.processAllAvailable()
    finally:
        _stop(query)
    assert out == [0]


# -- progress reports and observations -----------------------------------------------


def test_an_idle_query_reports_the_next_batch_id_without_add_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    """While a query has nothing to do, Spark adds a report to ``recentProgress`` every
    ``noDataProgressEventInterval``, carrying the id of the batch that has *not run yet*
    (the next one) and no ``addBatch`` time; when that batch runs, its own report comes
    with the same id.

    Depends on it: ``flow_jobs.runtime.reports.executed`` and ``batches_after``: the
    progress tracker keeps one report per batch that ran, so an idle report never takes
    the place of the batch's own in the log, the ledger row and the run's totals."""
    files = Files(tmp_path / "in")
    key = "spark.sql.streaming.noDataProgressEventInterval"
    spark.conf.set(key, "50ms")
    try:
        files.add(1)
        query = (
            files.stream(spark)
            .writeStream.foreachBatch(_consume)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="20 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
            _await(lambda: len(_reports(query)) >= 3, "idle reports")
            files.add(2)
            query.processAllAvailable()
            _await(lambda: 1 in {p["batchId"] for p in _reports(query) if executed(p)}, "batch 1")
            reports = _reports(query)
            fresh = batches_after(query, None)
            after_first = batches_after(query, 0)
        finally:
            _stop(query)
    finally:
        spark.conf.unset(key)
    idle = [p for p in reports if "addBatch" not in p["durationMs"]]
    assert idle and {p["batchId"] for p in idle} <= {1, 2}  # the batch to come
    assert all(p["numInputRows"] == 0 for p in idle)
    assert [p["batchId"] for p in reports if "addBatch" in p["durationMs"]] == [0, 1]
    assert [p["batchId"] for p in fresh] == [0, 1]
    assert [p["batchId"] for p in after_first] == [1]
    assert fresh[1]["numInputRows"] == 1


def test_foreach_batch_reads_the_batch_s_observation_and_empties_it(
    spark: SparkSession, tmp_path: Path, no_data_batches_off: None
) -> None:
    """Inside ``foreachBatch``, once the batch's action has run, the query's current
    execution (``StreamExecution.lastExecution``) holds the batch's observations:
    ``collect_list`` in an observation collects the batch's rows (across a shuffle to a
    window); emptying the observation's accumulator leaves the progress report with an
    empty list, and Spark's row count (``numInputRows``, from the scan's metrics) whole.

    Depends on it: ``flow_jobs.runtime.observations`` and the dead letters
    (``flow_jobs.dead_letters``, ``flow_jobs.dead_letters.divert``): bad rows reach
    the driver before the batch commits, and never sit in Spark's progress reports."""
    files, checkpoint = Files(tmp_path / "in"), tmp_path / "ckpt"
    bad = F.col("k") == "bad"
    frame = (
        files.stream(spark)
        .observe(
            "test_taps:bad",
            F.collect_list(F.when(bad, F.struct("k", "t"))).alias("rows"),
        )
        .where(~bad | (F.spark_partition_id() < 0))
        .withWatermark("t", "0 seconds")
        .groupBy(F.window("t", "10 seconds"))
        .count()
    )
    taken: dict[int, dict[str, list[Any]]] = {}
    taps = Observations("test_taps:")
    holder: dict[str, StreamingQuery] = {}

    def collect(batch: DataFrame, batch_id: int) -> None:
        batch.collect()
        taken[batch_id] = {
            n: [r["t"].second for r in rows] for n, rows in taps.take(holder["q"]).items()
        }

    files.write(
        [{"k": "a", "t": "1970-01-01T00:00:01Z"}, {"k": "bad", "t": "1970-01-01T00:00:02Z"}]
    )
    query = holder["q"] = (
        frame.writeStream.outputMode("update")
        .foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        query.processAllAvailable()
        files.write(
            [{"k": "bad", "t": "1970-01-01T00:00:03Z"}, {"k": "bad", "t": "1970-01-01T00:00:04Z"}]
        )
        query.processAllAvailable()
    finally:
        _stop(query)
    assert taken[0] == {"test_taps:bad": [2]}
    assert sorted(taken[1]["test_taps:bad"]) == [3, 4]  # the tasks' lists, in either order
    progress = {p["batchId"]: p for p in _reports(query)}
    for batch_id, rows in ((0, 2), (1, 2)):
        assert progress[batch_id]["observedMetrics"]["test_taps:bad"] == {"rows": []}
        assert progress[batch_id]["numInputRows"] == rows


def test_a_filter_above_an_observation_is_not_pushed_below_it(spark: SparkSession) -> None:
    """The optimizer combines a filter written after an observation with the ones above
    it, and never moves it below: the observation sees every row of its child.

    Depends on it: the dead-letter taps (``flow_jobs.dead_letters.divert``): a bad row
    (malformed, NULL event time) has NULL payload columns, and a ``[transform].sql``
    WHERE on them, pushed below the tap, would drop it without a dead letter
    (``tests/test_dead_letters.py`` runs such a filter end to end)."""
    reason = F.when(F.col("id") < 3, F.lit("bad"))
    frame = (
        spark.range(10)
        .withColumn("r", reason)
        .observe("contract", F.collect_list(F.when(F.col("r").isNotNull(), F.col("id"))))
        .where(F.col("r").isNull())
        .drop("r")
        .where(F.col("id") > 5)
    )
    plan = frame._jdf.queryExecution().optimizedPlan()
    lines = [line.strip(" +-:") for line in plan.toString().splitlines()]
    observation = next(i for i, line in enumerate(lines) if line.startswith("CollectMetrics"))
    assert any("(id#" in line and "> 5)" in line for line in lines[:observation])
    assert not any("> 5)" in line for line in lines[observation + 1 :])


def test_these_contracts_run_on_generated_code(spark: SparkSession) -> None:
    """The suite's session interprets (tests/conftest.py, INTERPRETED); these tests hold
    Spark as users run it, on whole-stage generated code (the ``generated_code``
    fixture). Checked on the plan of a filter: its stage is a generated one."""
    plan = spark.range(10).filter("id > 5")._jdf.queryExecution().executedPlan().toString()
    assert "*(" in plan and "Filter" in plan


def test_python_workers_take_pyspark_from_spark_home_first(spark: SparkSession) -> None:
    """Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every
    Python process it starts; PySpark's pip install ships that zip without bytecode.

    Depends on it: ``flow_jobs.runtime.session._spark_home_without_python_zips``, which
    points a local session's ``SPARK_HOME`` at the install without its zips, so that
    those processes import the same PySpark from site-packages, compiled once (the
    planner of every streaming query started 1.1 s sooner). Checked: the worker's path
    still begins with that ``SPARK_HOME``'s zip, and its PySpark is the driver's."""
    import os

    import pyspark

    def where(_: int) -> str:
        import sys

        import pyspark as worker_pyspark

        return json.dumps([sys.path, worker_pyspark.__file__])

    found = spark.range(1).select(F.udf(where)("id")).first()
    assert found is not None
    path, module = json.loads(found[0])
    zip_path = Path(os.environ["SPARK_HOME"]) / "python" / "lib" / "pyspark.zip"
    assert str(zip_path) in path[:3]
    assert not zip_path.exists()
    assert Path(module).resolve() == Path(pyspark.__file__).resolve()


def test_a_reused_python_worker_collects_fully_between_tasks_and_keeps_a_freeze(
    spark: SparkSession,
) -> None:
    """PySpark's daemon runs ``gc.collect()`` after every task of a reused worker, and
    what ``gc.freeze()`` moved to the permanent generation stays there for the worker's
    later tasks.

    Depends on it: ``flow_jobs.worker_heap.freeze_worker_heap``, called where the Kafka
    reader and the state operators start a task, so that those full collections no
    longer walk every imported module. Checked: a task that freezes the heap and counts
    full collections from then on; a later task in the same worker process sees at least
    one full collection in between and its heap still frozen."""

    def first(_: int) -> str:
        import builtins
        import gc
        import os

        seen = {"full": 0}

        def count(phase: str, info: dict[str, int]) -> None:
            if phase == "start" and info["generation"] == 2:
                seen["full"] += 1

        gc.freeze()
        gc.callbacks.append(count)
        builtins._flow_jobs_contract_seen = seen  # type: ignore[attr-defined]
        return json.dumps([os.getpid(), gc.get_freeze_count()])

    def later(_: int) -> str:
        import builtins
        import gc
        import os

        seen = getattr(builtins, "_flow_jobs_contract_seen", None)
        full = None if seen is None else seen["full"]
        return json.dumps([os.getpid(), gc.get_freeze_count(), full])

    one = spark.range(1, numPartitions=1)
    pid, frozen = json.loads(one.select(F.udf(first)("id")).first()[0])  # type: ignore[index]
    assert frozen > 0
    for _ in range(5):  # the idle worker of the first task takes the next one
        found = json.loads(one.select(F.udf(later)("id")).first()[0])  # type: ignore[index]
        if found[0] == pid:
            break
    assert found[0] == pid, "no Python worker was reused"
    _, still_frozen, full_collections = found
    assert still_frozen > 0  # (objects freed by reference counting leave it)
    assert full_collections is not None and full_collections >= 1


def _reports(query: StreamingQuery) -> list[dict[str, Any]]:
    return [json.loads(p.json()) for p in query._jsq.recentProgress()]


def _await(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# -- settings flow-jobs cannot run under ----------------------------------------------


def test_async_progress_tracking_is_refused_for_a_foreach_batch_sink(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Asynchronous progress tracking lets Spark plan batch N + 1 (and write its offset
    log entry) before batch N commits, which would break "the newest ``offsets/<N>`` is
    the batch being planned"; Spark refuses it for ``foreachBatch`` sinks, the only kind
    flow-jobs writes through.

    Depends on it: ``flow_jobs.kafka.heartbeats.batch_stamps`` and the sink's ledger row
    per batch (``flow_jobs.runtime.sink``); ``[spark] conf`` refuses the setting too
    (``flow_jobs.spec.models``), since it is a query option there is no place for."""
    files = Files(tmp_path / "in")
    files.add(1)
    writer = (
        files.stream(spark)
        .writeStream.foreachBatch(_consume)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .option("asyncProgressTrackingEnabled", "true")
    )
    with pytest.raises(Exception, match="does not support async progress tracking"):
        query = writer.start()
        try:
            query.processAllAvailable()
        finally:
            _stop(query)


# -- state schema ---------------------------------------------------------------------


def _add(folder: Path, n: int, rows: list[dict[str, Any]]) -> None:
    """A file the stream reads whole (written aside, then renamed into the folder)."""
    staging = folder.parent / f".{folder.name}-{n}.tmp"
    staging.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    staging.rename(folder / f"{n:04d}.json")


def _run(
    spark: SparkSession, folder: Path, checkpoint: Path, aggregations: list[Column]
) -> list[dict[str, Any]]:
    """One run of a windowed aggregation over the folder's new files, on ``checkpoint``;
    the rows it emitted (update mode: each batch's changed windows)."""
    emitted: list[dict[str, Any]] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        emitted.extend({c: row[c] for c in ("k", "total", "hi")} for row in batch.collect())

    frame = (
        spark.readStream.schema("k STRING, t TIMESTAMP, x DOUBLE")
        .option("maxFilesPerTrigger", 1)
        .json(str(folder))
        .withWatermark("t", "1 hour")  # every window stays open: its buffers in state
        .groupBy(F.window("t", "10 seconds"), "k")
        # No projection after it: a select would push its column order into the
        # aggregate (the optimizer collapses the two), hiding the agg(...) order.
        .agg(*aggregations)
    )
    query = (
        frame.writeStream.outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
        query.awaitTermination()
    return emitted


def test_aggregation_buffers_of_one_type_that_swap_places_resume_mixed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark checks a restarted aggregation's state against the new query's by the
    buffers' types, in ``agg(...)`` order, not by their names: ``sum(x)`` and ``max(x)``
    of a DOUBLE swapped are accepted (no ``STATE_STORE_*_SCHEMA_NOT_COMPATIBLE``), and an
    open window then folds new rows into the other aggregate's buffer. What depends on
    it: the fingerprint's ``transform.window.aggregations.order``
    (``flow_jobs.spec.fingerprint``), which refuses such a restart, since Spark won't."""
    folder, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    folder.mkdir()
    total, hi = F.sum("x").alias("total"), F.max("x").alias("hi")
    _add(folder, 0, [{"k": "a", "t": "1970-01-01T00:00:01Z", "x": x} for x in (1.0, 2.0)])
    first = _run(spark, folder, checkpoint, [total, hi])
    assert first == [{"k": "a", "total": 3.0, "hi": 2.0}]

    _add(folder, 1, [{"k": "a", "t": "1970-01-01T00:00:02Z", "x": 2.5}])
    swapped = _run(spark, folder, checkpoint, [hi, total])  # no error: accepted
    # By name it would be total 5.5, hi 2.5. By position the max reads the sum's buffer
    # (max(3.0, 2.5)) and the sum the max's (2.0 + 2.5).
    assert swapped == [{"k": "a", "total": 4.5, "hi": 3.0}]


# -- timers -------------------------------------------------------------------------------

_EVENTS = "event STRING, k STRING, at BIGINT, watermark BIGINT"


class _ScriptedTimers(StatefulProcessor):
    """Registers and deletes the timers its input rows name, lists a key's timers on each
    input (event "listed"), reports every firing ("fired", with the batch's watermark),
    and in the handler of a firing at ``expiry`` registers ``on_fire[expiry]``."""

    def __init__(self, on_fire: Mapping[int, Sequence[int]]) -> None:
        self.on_fire = {int(k): [int(t) for t in v] for k, v in on_fire.items()}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        for pdf in rows:
            for _, row in pdf.iterrows():
                if pd.notna(row["register"]):
                    self.handle.registerTimer(int(row["register"]))
                if pd.notna(row["delete"]):
                    self.handle.deleteTimer(int(row["delete"]))
        watermark = timerValues.getCurrentWatermarkInMs()
        listed = sorted(self.handle.listTimers())
        yield _events([("listed", key[0], t, watermark) for t in listed])

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        for t in self.on_fire.get(expiry, []):
            self.handle.registerTimer(t)
        yield _events([("fired", key[0], expiry, timerValues.getCurrentWatermarkInMs())])

    def close(self) -> None:
        return None


def _events(rows: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["event", "k", "at", "watermark"]).astype(
        {"at": "int64", "watermark": "int64"}
    )


class _TimerQuery:
    """``_ScriptedTimers`` over a folder, event time ``ms`` with no delay: after a batch
    whose highest ``ms`` is T, Spark's watermark is T (a no-data batch runs with it)."""

    def __init__(
        self, spark: SparkSession, workdir: Path, on_fire: Mapping[int, Sequence[int]]
    ) -> None:
        self.spark = spark
        self.source = Files(workdir / "in")
        self.name = f"timers_{uuid.uuid4().hex[:8]}"
        stream = (
            spark.readStream.schema(_INPUT)
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source.folder))
            .withColumn("ts", F.timestamp_millis("ms"))
            .withWatermark("ts", "0 seconds")
            .groupBy("k")
            .transformWithStateInPandas(_ScriptedTimers(on_fire), _EVENTS, "Append", "EventTime")
        )
        self.query: StreamingQuery = (
            stream.writeStream.format("memory")
            .queryName(self.name)
            .outputMode("append")
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .start()
        )

    def batch(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.source.write([{"register": None, "delete": None, **r} for r in rows])
        self.query.processAllAvailable()

    def events(self, kind: str) -> list[tuple[str, int, int]]:
        """(key, timestamp, batch watermark) of the events of one kind, in order."""
        rows = self.spark.sql(f"SELECT * FROM {self.name} WHERE event = '{kind}'").collect()
        return sorted((r["k"], r["at"], r["watermark"]) for r in rows)

    def __enter__(self) -> _TimerQuery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.query.stop()


def test_an_event_time_timer_fires_when_the_watermark_equals_it(
    spark: SparkSession, workdir: Path
) -> None:
    """A timer at T fires in the first micro-batch whose watermark is >= T: at W = T,
    not only once W > T; one at T + 1 waits for W = T + 1.

    flow_jobs.kernels.timers registers each group's timer AT the lowest watermark at
    which its windows have work ("due"). Were the rule W > T, a timer at due would fire
    one batch late (at the first W above it); registering at due - 1 under the rule
    that holds here fired with nothing to do and lost the timer (an earlier flow-jobs)."""
    with _TimerQuery(spark, workdir, {}) as q:
        q.batch(
            [
                {"k": "equal", "ms": 1_000, "register": 5_000},
                {"k": "above", "ms": 1_000, "register": 5_001},
                {"k": "clock", "ms": 5_000},
            ]
        )
        assert q.events("fired") == [("equal", 5_000, 5_000)]
        q.batch([{"k": "clock", "ms": 5_001}])
        assert q.events("fired") == [("above", 5_001, 5_001), ("equal", 5_000, 5_000)]


def test_a_fired_timer_is_deleted_after_its_handler_even_if_registered_again(
    spark: SparkSession, workdir: Path
) -> None:
    """Inside handleExpiredTimer for T, registering T again is undone: Spark deletes T
    after the handler returns. A timer registered there at another time stays.

    flow_jobs.kernels.timers: inside the handler the group's saved timer, if it is the
    fired one, counts as gone (``settle`` given the ``Firing``), and the timer registered
    next must differ from the fired one (``wanted``: above the watermark)."""
    with _TimerQuery(spark, workdir, {5_000: [5_000, 5_002]}) as q:
        q.batch([{"k": "a", "ms": 1_000, "register": 5_000}, {"k": "clock", "ms": 5_000}])
        assert q.events("fired") == [("a", 5_000, 5_000)]
        q.batch([{"k": "a", "ms": 5_001}, {"k": "clock", "ms": 6_000}])
        # listed in each data batch (the second's watermark is still 5 000)
        assert q.events("listed") == [("a", 5_000, 0), ("a", 5_002, 5_000)]
        assert q.events("fired") == [("a", 5_000, 5_000), ("a", 5_002, 6_000)]


def test_deleting_a_timer_that_is_not_registered_is_harmless(
    spark: SparkSession, workdir: Path
) -> None:
    """``deleteTimer`` of a time the key holds no timer for neither fails the query nor
    touches the key's other timers.

    flow_jobs.windows.processor: a checkpoint written before timers were set at their
    due watermark can hold a group whose saved timer (due - 1) Spark has already fired
    and deleted; on the group's next input ``timers.settle`` deletes that saved value
    before registering the new one, and the run must go on."""
    with _TimerQuery(spark, workdir, {}) as q:
        q.batch([{"k": "a", "ms": 1_000, "register": 9_000}])
        q.batch([{"k": "a", "ms": 1_001, "delete": 4_242}])
        assert q.events("listed") == [("a", 9_000, 0), ("a", 9_000, 1_000)]
        q.batch([{"k": "clock", "ms": 9_000}])
        assert q.events("fired") == [("a", 9_000, 9_000)]


def test_a_timer_registered_at_or_below_the_watermark_on_input_fires_in_that_batch(
    spark: SparkSession, workdir: Path
) -> None:
    """A timer registered in handleInputRows at or below the batch's watermark fires in
    the same micro-batch, after the inputs (the batch's timer pass lists the timers
    then).

    flow_jobs.windows.processor registers a timer at ``due`` on input even when a
    row's windows are due at once (a row above the previous batch's watermark, in a
    window due at or below this batch's): their close runs in the batch the row arrives
    in, as tests/spark_timers.py (the models of tests/test_reopen.py and
    tests/test_timers.py) assumes."""
    with _TimerQuery(spark, workdir, {}) as q:
        q.batch([{"k": "clock", "ms": 5_000}])
        q.batch([{"k": "b", "ms": 5_001, "register": 5_000}, {"k": "c", "ms": 5_001}])
        assert q.events("fired") == [("b", 5_000, 5_000)]


# -- the state schema call on the driver (flow_jobs.plan.deferred) ----------------------


def _note(path: str, *what: Any) -> None:
    """Append ``what`` and the module this process runs as (``python -m``), if any."""
    import sys

    main = getattr(sys.modules["__main__"], "__spec__", None)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps([*what, main.name if main else None]) + "\n")


class _Counting(StatefulProcessor):
    """Counts each key's rows in a value state; notes every process that unpickles it
    and every ``init()``, with what ``_schema_only`` said of its handle."""

    def __init__(self, notes: str) -> None:
        self.notes = notes

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        _note(self.notes, "unpickled")

    def init(self, handle: StatefulProcessorHandle) -> None:
        from flow_jobs.plan.deferred import _schema_only

        _note(self.notes, "init", _schema_only(handle))
        self.count = handle.getValueState("count", "n BIGINT")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        n = sum(len(pdf) for pdf in rows) + (self.count.get()[0] if self.count.exists() else 0)
        self.count.update((n,))
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    def close(self) -> None:
        return None


def test_the_driver_calls_init_for_the_schema_only_with_the_handle_in_pre_init(
    spark: SparkSession, workdir: Path
) -> None:
    """Spark calls a processor's ``init()`` in a process of its own on the driver
    (``transform_with_state_driver_worker``) to collect the state schema, with the
    handle in ``PRE_INIT``, and in the executors with the handle in another state.

    ``flow_jobs.plan.deferred`` declares the recorded state variables in the driver's
    call (``_schema_only``): the processor it wraps is neither unpickled nor called
    there, only in the executors (a wrapper that took an executor's call for the
    driver's would never call it), and its state reads back in the next batch."""
    from flow_jobs.plan.deferred import deferred

    notes = workdir / "notes.jsonl"
    processor = _Counting(str(notes))
    source = Files(workdir / "in")
    query = (
        source.stream(spark)
        .groupBy("k")
        .transformWithStateInPandas(deferred(processor), "k STRING, n BIGINT", "Update", "None")
        .writeStream.format("memory")
        .queryName(name := f"deferred_{uuid.uuid4().hex[:8]}")
        .outputMode("update")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .start()
    )
    try:
        source.add(1, 2, key="a")
        source.add(3, key="b")
        query.processAllAvailable()
        source.add(4, key="a")
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql(f"SELECT k, max(n) AS n FROM {name} GROUP BY k").collect()
    assert sorted((r["k"], r["n"]) for r in rows) == [("a", 3), ("b", 1)]
    seen = [json.loads(line) for line in notes.read_text().splitlines()]
    driver = "pyspark.sql.streaming.transform_with_state_driver_worker"
    on_driver = [n[:-1] for n in seen if n[-1] == driver]
    executors = [n[:-1] for n in seen if n[-1] == "pyspark.daemon"]
    assert on_driver == []
    assert ["unpickled"] in executors
    assert [n for n in executors if n[0] == "init"] and all(
        n == ["init", False] for n in executors if n[0] == "init"
    )
