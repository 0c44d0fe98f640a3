"""Per-batch progress: Spark's progress events joined with what the sink wrote."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from flow_jobs.ledger.batch_ledger import BatchLedger
from flow_jobs.runtime.caps import StateSizeWatch
from flow_jobs.runtime.display import Snapshot, SourceExtent
from flow_jobs.runtime.idleness import IdleSources
from flow_jobs.runtime.metrics import MetricsFeed
from flow_jobs.runtime.reports import (
    Progress,
    batches_after,
    duplicates_by_source,
    executed,
    input_rows,
    late_rows,
    late_rows_by_source,
    max_event_times,
    records_behind,
    state_rows,
    topic_offsets,
    watermark,
)
from flow_jobs.runtime.sink import BatchOutcome
from flow_jobs.sinks import describe_commit
from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger("flow_jobs.progress")


@dataclass(frozen=True)
class RunSummary:
    pipeline: str
    query_id: str
    batches: int
    input_rows: int
    windows_inserted: int
    windows_updated: int
    dead_lettered: int
    late_rows: int  # behind the watermark: dropped, or dead-lettered with late_data = "dlq"
    watermark: str | None
    #: the newest target commit of the run (``flow_jobs.sinks.describe_commit``), as
    #: its batch's ledger row records it
    target_commit: str | None
    ended_by: str
    #: rows a session row emitted "current" replaced (its earlier bounds)
    windows_superseded: int = 0
    #: records taken out by [[transform.dedup]] (dropped, or dead-lettered)
    duplicates: int = 0
    #: broker outages seen while the run lasted, per source (flow_jobs.runtime.outages)
    source_outages: dict[str, int] = field(default_factory=dict)
    target_kind: str = ""

    @property
    def target_commit_text(self) -> str:
        """The newest target commit, as every output says it ("Delta version 7")."""
        return describe_commit(self.target_kind, self.target_commit)

    def describe(self) -> str:
        return (
            f"pipeline {self.pipeline}: {self.batches} batches, {self.input_rows} rows in, "
            f"{self.windows_inserted + self.windows_updated} window rows merged "
            f"({self.windows_inserted} new, {self.windows_updated} updated"
            f"{_superseded(self.windows_superseded)}), "
            f"{self.dead_lettered} dead-lettered, {self.late_rows} late rows, "
            f"{_duplicates(self.duplicates)}"
            f"{_outages(self.source_outages)}"
            f"watermark {self.watermark or '-'}, last commit {self.target_commit_text} "
            f"({self.ended_by})"
        )


#: How many batches' reports a tracker keeps (a continuous run's history stays bounded;
#: its totals cover every batch).
RECENT_BATCHES = 1000


class ProgressTracker:
    """One query's progress: each batch's report joined with what the sink wrote for it,
    logged, added to the ledger row and to the metrics once, and folded into running
    totals (a continuous run keeps only its last ``RECENT_BATCHES`` reports in memory).

    Fed by polling the query (``reports.batches_after``) from the thread that awaits
    it, so no Python callback runs on Spark's listener bus while batches run.
    """

    def __init__(
        self,
        spec: PipelineSpec,
        outcomes: dict[int, BatchOutcome],
        ledger: BatchLedger | None = None,
        state_version: int = 0,
        idle: IdleSources | None = None,
    ) -> None:
        self.pipeline = spec.name
        self.target_kind = spec.target.kind
        self.idle = idle
        self.outcomes = outcomes  # the sink's, by batch id; taken here once reported
        self.ledger = ledger
        self.query_id: str | None = None  # set once the query has started
        #: the reports of the run's last ``RECENT_BATCHES`` batches, by batch id
        self.progress: dict[int, Progress] = {}
        self._totals = _Totals()
        self._lock = threading.Lock()
        # how far each source's watermark runs behind its highest event time
        lateness = spec.transform.stages()[0].watermark_delay_ms  # the stage reading them
        self.lateness_ms = {s.name: lateness for s in spec.sources}
        self.metrics = MetricsFeed(self.pipeline, self.lateness_ms)
        self._outages: dict[str, int] = {}  # broker outages per source, this run
        self.state_size = StateSizeWatch(spec)

    def outages(self) -> dict[str, int]:
        """Broker outages seen so far in the run, per source."""
        with self._lock:
            return dict(self._outages)

    def outage_started(self, sources: list[str]) -> None:
        """A broker outage began for these sources (``flow_jobs.runtime.outages``)."""
        with self._lock:
            for source in sources:
                self._outages[source] = self._outages.get(source, 0) + 1
        self.metrics.outage(sources)

    @property
    def newest(self) -> Progress | None:
        """The last batch's report."""
        with self._lock:
            return self.progress[next(reversed(self.progress))] if self.progress else None

    def poll(self, query: Any) -> None:
        newest = self.newest
        for report in batches_after(query, newest["batchId"] if newest else None):
            self.record(report)

    def record(self, progress: Progress) -> None:
        """One batch's report; a batch already recorded, or one that did not run, is
        ignored."""
        with self._lock:
            newest = next(reversed(self.progress)) if self.progress else None
            if not executed(progress) or (newest is not None and progress["batchId"] <= newest):
                return
            self.progress[progress["batchId"]] = progress
            if len(self.progress) > RECENT_BATCHES:
                del self.progress[next(iter(self.progress))]
            outcome = self.outcomes.pop(progress["batchId"], None)
            self._totals.add(progress, outcome)
        self._log(progress, outcome)
        self._to_ledger(progress, outcome)
        self.metrics.record(progress)
        self.state_size.observe(progress)
        if self.idle is not None:
            self.idle.observe(progress)

    def _to_ledger(self, p: Progress, outcome: BatchOutcome | None) -> None:
        """Spark's figures for a batch, added to the ledger row the sink wrote."""
        if self.ledger is None or self.query_id is None:
            return
        ledger, query_id = self.ledger, self.query_id
        self.ledger.store.retrying(  # tried again while the state store is away
            f"recording batch {p['batchId']}'s figures",
            lambda: ledger.add_progress(
                self.pipeline,
                query_id,
                int(p["batchId"]),
                input_rows=input_rows(p),
                late_rows=late_rows_by_source(p),
                duplicates=duplicates_by_source(p),
                batch_ms=(p.get("durationMs") or {}).get("triggerExecution"),
                write_ms=outcome.write_seconds * 1000 if outcome else None,
                max_event_times=max_event_times(p),
                lateness_ms=self.lateness_ms,
            ),
        )

    def batches_seen(self) -> int:
        with self._lock:
            return self._totals.batches

    def totals(self) -> _Totals:
        """The run's figures so far (a copy), the sink's unreported batches included."""
        return self._with_unreported()

    def _with_unreported(self) -> _Totals:
        """The totals, with the sink's batches whose report has not come (yet)."""
        with self._lock:
            totals = self._totals.copy()
        for outcome in list(self.outcomes.values()):
            totals.add_outcome(outcome)
        return totals

    def snapshot(self, extents: dict[str, SourceExtent], elapsed_s: float) -> Snapshot:
        """The run's figures so far, for a progress display (``runtime.display``)."""
        newest = self.newest
        totals = self._with_unreported()
        # End offsets only grow, and each batch's cover every partition of its topic:
        # the newest batch says how far every source has read.
        reached: dict[str, dict[int, int]] = {}
        for source in (newest or {}).get("sources") or ():
            reached.update(topic_offsets(source.get("endOffset")))
        return Snapshot(
            pipeline=self.pipeline,
            done={n: e.done(reached.get(e.topic, {})) for n, e in extents.items()},
            extents=extents,
            input_rows=totals.input_rows,
            windows_written=totals.windows_inserted + totals.windows_updated,
            dead_lettered=totals.dead_lettered,
            watermark=watermark(newest) if newest else None,
            batches=totals.batches,
            batch_id=newest["batchId"] if newest else None,
            elapsed_s=elapsed_s,
        )

    def input_rows(self) -> int:
        with self._lock:
            return self._totals.input_rows

    def _log(self, p: Progress, outcome: BatchOutcome | None) -> None:
        merged = "no window closed"
        if outcome is not None and outcome.merge is not None:
            m = outcome.merge
            merged = (
                "already written (replayed batch skipped)"
                if m.skipped
                else f"{m.inserted + m.updated} rows written ({m.inserted} new, "
                f"{m.updated} updated{_superseded(m.superseded)}), committed in "
                f"{describe_commit(self.target_kind, m.version)}"
            )
        log.info(
            "%s batch %s: %s rows in, %s; %s dead-lettered, %s late rows, "
            "%s state rows, watermark %s",
            self.pipeline,
            p["batchId"],
            input_rows(p),
            merged,
            outcome.dead_lettered if outcome else 0,
            late_rows(p),
            state_rows(p),
            watermark(p) or "-",
        )

    def summary(self, query_id: str, target_version: str | None, ended_by: str) -> RunSummary:
        """The run's figures; its target commit the newest batch's, else
        ``target_version`` (the target's as it stands: a run that wrote no batch)."""
        newest = self.newest
        totals = self._with_unreported()
        return RunSummary(
            pipeline=self.pipeline,
            query_id=query_id,
            batches=totals.batches,
            input_rows=totals.input_rows,
            windows_inserted=totals.windows_inserted,
            windows_updated=totals.windows_updated,
            dead_lettered=totals.dead_lettered,
            late_rows=totals.late_rows,
            watermark=watermark(newest) if newest else None,
            target_commit=totals.last_commit or target_version,
            ended_by=ended_by,
            windows_superseded=totals.windows_superseded,
            duplicates=totals.duplicates,
            source_outages=dict(self._outages),
            target_kind=self.target_kind,
        )


@dataclass
class _Totals:
    """A run's figures summed over its batches: from Spark's reports (batches, rows in,
    late rows) and from what the sink wrote (window rows, dead letters)."""

    batches: int = 0
    input_rows: int = 0
    late_rows: int = 0
    duplicates: int = 0
    windows_inserted: int = 0
    windows_updated: int = 0
    windows_superseded: int = 0
    dead_lettered: int = 0
    write_seconds: float = 0.0  # the sink's writes (the MERGE, the upsert, the produce)
    last_commit: str | None = None  # the newest batch's target commit

    def add(self, progress: Progress, outcome: BatchOutcome | None) -> None:
        self.batches += 1
        self.input_rows += input_rows(progress)
        self.late_rows += late_rows(progress)
        self.duplicates += sum(duplicates_by_source(progress).values())
        if outcome is not None:
            self.add_outcome(outcome)

    def add_outcome(self, outcome: BatchOutcome) -> None:
        """A batch's outcome; batches come in order (the unreported ones last)."""
        self.last_commit = outcome.commit or self.last_commit
        self.dead_lettered += outcome.dead_lettered
        self.write_seconds += outcome.write_seconds
        merge = outcome.merge
        if merge is not None and not merge.skipped:
            self.windows_inserted += merge.inserted
            self.windows_updated += merge.updated
            self.windows_superseded += merge.superseded

    def copy(self) -> _Totals:
        return replace(self)


def _duplicates(n: int) -> str:
    return f"{n} duplicates, " if n else ""


def _outages(by_source: dict[str, int]) -> str:
    if not by_source:
        return ""
    each = ", ".join(f"{s} {n}" for s, n in sorted(by_source.items()))
    return f"broker outages ({each}), "


def _superseded(n: int) -> str:
    return f", {n} superseded" if n else ""


class IdleHeartbeat:
    """A continuous run with nothing to read says so every ``every_s`` seconds, in one
    line: for how long, the watermark, and how far the last batch is behind the topics'
    ends (0 when the run is idle because the topics are)."""

    def __init__(
        self,
        tracker: ProgressTracker,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tracker, self.every_s, self.clock = tracker, every_s, clock
        self._seen = tracker.batches_seen()
        self._since = self._said = clock()

    def tick(
        self, last_report: Callable[[], Progress | None], busy: Callable[[], bool]
    ) -> str | None:
        """After each poll: the line said now, if any. ``busy`` (a batch runs, or the
        reader has found records) and ``last_report`` (the query's newest report, idle
        ones included; None before the first) are asked only when a line is due."""
        now, seen = self.clock(), self.tracker.batches_seen()
        if seen != self._seen:
            self._seen, self._since, self._said = seen, now, now
            return None
        if now - self._said < self.every_s:
            return None
        self._said = now
        report = last_report()
        # No report yet: the query still starts (its first batch plans, or runs).
        # Spark reports an idle trigger too, so a run that has nothing to read has one.
        if report is None or busy():  # a long batch (the first, say) is not idleness
            self._since = now
            return None
        newest = self.tracker.newest
        behind = records_behind(report)
        line = (
            f"{self.tracker.pipeline}: idle for {now - self._since:,.0f} s, no new records; "
            f"watermark {(watermark(newest) if newest else None) or '-'}"
            + ("" if behind is None else f"; {behind:,} records behind the topics' ends")
        )
        log.info("%s", line)
        return line
