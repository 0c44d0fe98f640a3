"""Reading Spark's streaming progress reports: the one place that knows their fields.

The progress tracker (logs, run summary, ledger, metrics) and the state cap read the
same report; these functions are what they read.
"""

from __future__ import annotations

import json
from typing import Any

from flow_jobs.plan.sources import OBSERVED_PREFIX

Progress = dict[str, Any]

#: Spark's name for a stream-stream join's state operator; every other one is a window's.
JOIN_OPERATOR = "symmetricHashJoin"

#: Each deduplicated source's observation (``flow_jobs.dedup``): ``duplicates``, its
#: records dropped or dead-lettered as duplicates in the batch.
DUPLICATES_PREFIX = "flow_dedup_"


def as_dict(report: Any) -> Progress:
    """A ``StreamingQueryProgress`` (or an already-parsed report) as a dict."""
    return json.loads(report.json) if hasattr(report, "json") else dict(report)


def executed(progress: Progress) -> bool:
    """Whether the report is of a batch that ran. While a query has nothing to do, Spark
    adds a report every ``spark.sql.streaming.noDataProgressEventInterval`` (10 s) that
    carries the id of the batch that will run next and no ``addBatch`` time
    (``tests/test_spark_contracts.py``); the batch's own report comes when it runs."""
    return "addBatch" in (progress.get("durationMs") or {})


def batches_after(query: Any, newest: int | None) -> list[Progress]:
    """The reports of the query's batches that ran after batch ``newest`` (all of them
    when None), oldest first, one per batch.

    Spark keeps a query's last reports (``spark.sql.streaming.numRecentProgressUpdates``,
    100); ``query.recentProgress`` turns every one of them into Python objects, a JVM
    round trip each, however many are new. This reads the JVM's array from its newest
    end and converts only the reports after ``newest``, so a poll between two batches
    costs a few round trips, not a hundred."""
    held = query._jsq.recentProgress()
    fresh: list[Progress] = []
    for i in range(len(held) - 1, -1, -1):
        report = held[i]
        if newest is not None and report.batchId() <= newest:
            break
        fresh.append(json.loads(report.json()))
    return [p for p in reversed(fresh) if executed(p)]


#: Where Spark's operators dropped rows themselves (``numRowsDroppedByWatermark``: a
#: join's, or a window's whose event time is computed in [transform].sql), the figure is
#: theirs, under this name; it counts partial aggregates, not rows.
OPERATOR_LATE = "_operator"


def late_rows_by_source(progress: Progress) -> dict[str, int]:
    """Late rows of the batch per source, row by row (counted at the sources, see
    ``flow_jobs.plan.late_rows``), plus what Spark's operators dropped themselves."""
    late = {
        source: int(metrics.get("late_rows") or 0)
        for source, metrics in source_metrics(progress).items()
    }
    dropped = sum(
        int(op.get("numRowsDroppedByWatermark", 0)) for op in progress.get("stateOperators", [])
    )
    if dropped:
        late[OPERATOR_LATE] = dropped
    return late


def duplicates_by_source(progress: Progress) -> dict[str, int]:
    """Records of the batch taken out as duplicates, per deduplicated source
    (``flow_jobs.dedup``: dropped, or dead-lettered)."""
    return {
        name.removeprefix(DUPLICATES_PREFIX): int((metrics or {}).get("duplicates") or 0)
        for name, metrics in (progress.get("observedMetrics") or {}).items()
        if name.startswith(DUPLICATES_PREFIX)
    }


def input_rows(progress: Progress) -> int:
    """The batch's Kafka records (and heartbeat rows): Spark's ``numInputRows``, which
    counts a partial aggregate from the reader once, plus the records partials hold
    beyond one each (``folded_rows``, ``flow_jobs.combine.decide``)."""
    folded = sum(int(m.get("folded_rows") or 0) for m in source_metrics(progress).values())
    return int(progress.get("numInputRows", 0)) + folded


def late_rows(progress: Progress) -> int:
    return sum(late_rows_by_source(progress).values())


def state_rows(progress: Progress) -> int:
    """State rows over every stateful operator (a join's buffered rows included)."""
    return sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))


def state_bytes(progress: Progress) -> int:
    """The state's memory over every stateful operator, as the state stores report it
    (``memoryUsedBytes``: RocksDB's memtables and cache, or the in-memory maps)."""
    return sum(int(op.get("memoryUsedBytes", 0)) for op in progress.get("stateOperators", []))


def window_state_rows(progress: Progress) -> int:
    """State rows of the window operators: one per open (window, group)."""
    return sum(
        int(op.get("numRowsTotal", 0))
        for op in progress.get("stateOperators", [])
        if op.get("operatorName") != JOIN_OPERATOR
    )


#: What Spark reports as a batch's watermark before there is one (its offset log's 0).
_NO_WATERMARK = "1970-01-01T00:00:00.000Z"


def watermark(progress: Progress) -> str | None:
    """The watermark the batch ran under, or None before the first (as in the ledger)."""
    mark = progress.get("eventTime", {}).get("watermark")
    return None if mark == _NO_WATERMARK else mark


def max_event_times(progress: Progress) -> dict[str, int | None]:
    """Each source's highest event time in this batch, epoch ms (observed in its scan)."""
    return {
        source: metrics.get("max_event_time_ms")
        for source, metrics in source_metrics(progress).items()
    }


def source_metrics(progress: Progress) -> dict[str, dict[str, Any]]:
    """Each source view's observed metrics (``flow_jobs.plan.sources``), by source name."""
    return {
        name.removeprefix(OBSERVED_PREFIX): metrics or {}
        for name, metrics in (progress.get("observedMetrics") or {}).items()
        if name.startswith(OBSERVED_PREFIX)
    }


def topic_offsets(offset: Any) -> dict[str, dict[int, int]]:
    """A source's offset in a report (``endOffset``, ``latestOffset``: JSON text or a
    dict) as {topic: {partition: offset}}, without the reader's own keys (heartbeats,
    data loss)."""
    value = json.loads(offset) if isinstance(offset, str) else offset
    return {
        topic: {int(k): int(v) for k, v in partitions.items() if str(k).isdigit()}
        for topic, partitions in (value or {}).items()
        if isinstance(partitions, dict) and not topic.startswith("_")
    }


def records_behind(progress: Progress) -> int | None:
    """How many offsets the batch's end is behind the topics' ends as the reader last
    saw them (``latestOffset``), or None where a source does not say."""
    behind = 0
    for source in progress.get("sources") or ():
        if source.get("latestOffset") is None:
            return None
        end = topic_offsets(source.get("endOffset"))
        for topic, latest in topic_offsets(source["latestOffset"]).items():
            reached = end.get(topic, {})
            behind += sum(max(0, o - reached.get(p, 0)) for p, o in latest.items())
    return behind
