"""Per-batch progress: Spark's progress events joined with what the sink wrote."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from flow_jobs.io.ledger import BatchLedger
from flow_jobs.runtime.display import Snapshot, SourceExtent
from flow_jobs.runtime.idleness import IdleSources
from flow_jobs.runtime.reports import (
    Progress,
    as_dict,
    input_rows,
    late_rows,
    late_rows_by_source,
    max_event_times,
    state_rows,
    watermark,
)
from flow_jobs.runtime.sink import BatchOutcome
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
    target_version: str | None
    ended_by: str
    #: rows a session row emitted "current" replaced (its earlier bounds)
    windows_superseded: int = 0

    def describe(self) -> str:
        return (
            f"pipeline {self.pipeline}: {self.batches} batches, {self.input_rows} rows in, "
            f"{self.windows_inserted + self.windows_updated} window rows merged "
            f"({self.windows_inserted} new, {self.windows_updated} updated"
            f"{_superseded(self.windows_superseded)}), "
            f"{self.dead_lettered} dead-lettered, {self.late_rows} late rows, "
            f"watermark {self.watermark or '-'}, target version "
            f"{self.target_version if self.target_version is not None else '-'} "
            f"({self.ended_by})"
        )


class ProgressTracker:
    """Collects one query's progress reports (by batch id) and logs each batch once.

    Fed by polling ``query.recentProgress`` (Spark keeps the last 100 reports) from the
    thread that awaits the query, so no Python listener callback outlives the run.
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
        self.idle = idle
        self.outcomes = outcomes
        self.ledger = ledger
        self.query_id: str | None = None  # set once the query has started
        self.progress: dict[int, Progress] = {}
        self._input_rows = 0  # over self.progress
        self._lock = threading.Lock()
        # how far each source's watermark runs behind its highest event time
        window, join = spec.transform.window, spec.transform.join
        lateness = join.lateness_ms if join else window.watermark_delay_ms if window else 0
        self.lateness_ms = {s.name: lateness for s in spec.sources}

    def poll(self, query: Any) -> None:
        for report in query.recentProgress:
            self.record(as_dict(report))

    def record(self, progress: Progress) -> None:
        with self._lock:
            fresh = progress["batchId"] not in self.progress
            self.progress[progress["batchId"]] = progress
            if fresh:  # a running total: a display asks for it after every batch
                self._input_rows += input_rows(progress)
        if fresh:
            self._log(progress)
            self._to_ledger(progress)
            if self.idle is not None:
                self.idle.observe(progress)

    def _to_ledger(self, p: Progress) -> None:
        """Spark's figures for a batch, added to the ledger row the sink wrote."""
        if self.ledger is None or self.query_id is None:
            return
        outcome = self.outcomes.get(p["batchId"])
        self.ledger.add_progress(
            self.pipeline,
            self.query_id,
            int(p["batchId"]),
            input_rows=input_rows(p),
            late_rows=late_rows_by_source(p),
            batch_ms=(p.get("durationMs") or {}).get("triggerExecution"),
            write_ms=outcome.write_seconds * 1000 if outcome else None,
            max_event_times=max_event_times(p),
            lateness_ms=self.lateness_ms,
        )

    def batches_seen(self) -> int:
        with self._lock:
            return len(self.progress)

    def snapshot(self, extents: dict[str, SourceExtent], elapsed_s: float) -> Snapshot:
        """The run's figures so far, for a progress display (``runtime.display``)."""
        with self._lock:
            newest = self.progress[max(self.progress)] if self.progress else None
            batches, input_rows = len(self.progress), self._input_rows
        # End offsets only grow, and each batch's cover every partition of its topic:
        # the newest batch says how far every source has read.
        reached: dict[str, dict[int, int]] = {}
        for source in (newest or {}).get("sources") or ():
            end = source.get("endOffset")
            end = json.loads(end) if isinstance(end, str) else end
            for topic, offsets in (end or {}).items():
                if isinstance(offsets, dict):
                    reached[topic] = {
                        int(k): int(v) for k, v in offsets.items() if str(k).isdigit()
                    }
        merged = [o.merge for o in self.outcomes.values() if o.merge is not None]
        return Snapshot(
            pipeline=self.pipeline,
            done={n: e.done(reached.get(e.topic, {})) for n, e in extents.items()},
            extents=extents,
            input_rows=input_rows,
            windows_written=sum(m.inserted + m.updated for m in merged if not m.skipped),
            dead_lettered=sum(o.dead_lettered for o in self.outcomes.values()),
            watermark=watermark(newest) if newest else None,
            batches=batches,
            elapsed_s=elapsed_s,
        )

    def input_rows(self) -> int:
        with self._lock:
            return self._input_rows

    def _log(self, p: Progress) -> None:
        outcome = self.outcomes.get(p["batchId"])
        merged = "no window closed"
        if outcome is not None and outcome.merge is not None:
            m = outcome.merge
            merged = (
                "already written (replayed batch skipped)"
                if m.skipped
                else f"{m.inserted + m.updated} rows written ({m.inserted} new, "
                f"{m.updated} updated{_superseded(m.superseded)}), target version {m.version}"
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
            watermark(p),
        )

    def summary(self, query_id: str, target_version: str | None, ended_by: str) -> RunSummary:
        with self._lock:
            progress = list(self.progress.values())
        outcomes = [o for o in self.outcomes.values() if o.merge is not None]
        last = max(progress, key=lambda p: p["batchId"]) if progress else {}
        return RunSummary(
            pipeline=self.pipeline,
            query_id=query_id,
            batches=len(progress),
            input_rows=sum(input_rows(p) for p in progress),
            windows_inserted=sum(o.merge.inserted for o in outcomes if o.merge),
            windows_updated=sum(o.merge.updated for o in outcomes if o.merge),
            dead_lettered=sum(o.dead_lettered for o in self.outcomes.values()),
            late_rows=sum(late_rows(p) for p in progress),
            watermark=watermark(last) if last else None,
            target_version=target_version,
            ended_by=ended_by,
            windows_superseded=sum(o.merge.superseded for o in outcomes if o.merge),
        )


def _superseded(n: int) -> str:
    return f", {n} superseded" if n else ""
