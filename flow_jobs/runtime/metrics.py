"""Prometheus metrics from Spark's own progress reports.

Seven metrics, labelled by pipeline (docs/guide/operating.md lists them):

* ``flow_windows_active``: state rows of the window operator after the last batch —
  one per open (window, group): the windows still waiting for the watermark;
* ``flow_windows_emitted_total``: rows written to the target (counted by the batch sink:
  Spark reports no output rows for ``foreachBatch``; a skipped replay counts nothing);
* ``flow_late_rows_total{source=…}``: rows behind the watermark, counted row by row at
  each source (``flow_jobs.plan.late_rows``), dropped or dead-lettered; ``source=
  "_operator"`` holds what Spark's operators dropped themselves (a join's late rows);
* ``flow_duplicates_total{source=…}``: records ``[[transform.dedup]]`` took out of a
  source (``flow_jobs.dedup``), dropped or dead-lettered;
* ``flow_source_outages_total{source=…}``: broker outages the run saw for a source's
  cluster (``flow_jobs.runtime.outages``), counted when each begins;
* ``flow_state_groups``: state rows over every stateful operator (a join's buffered
  rows included); a gauge, so no ``_total`` suffix (that is for counters): the name
  ``flow_state_groups_total`` it had until 0.1 is removed, not kept as an alias;
* ``flow_watermark_seconds``: per source (its highest event time minus lateness, from
  the observable metrics each source view reports) and ``source="_global"`` (Spark's
  watermark).

The run's progress tracker feeds them each batch's report (``MetricsFeed``), on the
driver: no Python listener on Spark's listener bus, whose every event would call into
Python while batches run. ``serve`` starts the HTTP endpoint once per process.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server

from flow_jobs.ledger.batch_ledger import source_watermark_ms
from flow_jobs.runtime.reports import (
    duplicates_by_source,
    late_rows_by_source,
    max_event_times,
    state_rows,
    watermark,
    window_state_rows,
)

log = logging.getLogger(__name__)


_Metric = TypeVar("_Metric", Counter, Gauge)


class FlowMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def per_pipeline(kind: type[_Metric], name: str, doc: str, *labels: str) -> _Metric:
            return kind(name, doc, ["pipeline", *labels], registry=registry)

        self.windows_active = per_pipeline(
            Gauge, "flow_windows_active", "open (window, group) state rows"
        )
        self.windows_emitted = per_pipeline(
            Counter, "flow_windows_emitted", "rows emitted to the target"
        )
        self.late_rows = per_pipeline(
            Counter,
            "flow_late_rows",
            "rows behind the watermark, per source (dropped or dead-lettered)",
            "source",
        )
        self.duplicates = per_pipeline(
            Counter,
            "flow_duplicates",
            "records [[transform.dedup]] took out, per source (dropped or dead-lettered)",
            "source",
        )
        self.outages = per_pipeline(
            Counter,
            "flow_source_outages",
            "broker outages seen for a source's cluster, counted as each begins",
            "source",
        )
        self.state_groups = per_pipeline(
            Gauge, "flow_state_groups", "state rows over all operators"
        )
        self.watermark = per_pipeline(
            Gauge, "flow_watermark_seconds", "event-time watermark, epoch seconds", "source"
        )


_metrics: FlowMetrics | None = None
_served: set[int] = set()
_lock = threading.Lock()


def metrics() -> FlowMetrics:
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = FlowMetrics()
        return _metrics


def serve(port: int) -> None:
    """Expose the default registry on ``port`` (once per process)."""
    with _lock:
        if port in _served:
            return
        start_http_server(port)
        _served.add(port)
    log.info("Prometheus metrics on http://0.0.0.0:%s/metrics", port)


class MetricsFeed:
    """Feeds ``FlowMetrics`` from one pipeline's batch reports (its progress tracker
    hands each over once)."""

    def __init__(self, pipeline: str, lateness_ms: dict[str, int]) -> None:
        self.pipeline = pipeline
        self.lateness_ms = lateness_ms  # source -> lateness
        self._source_marks: dict[str, int] = {}  # epoch ms

    def outage(self, sources: list[str]) -> None:
        for source in sources:
            metrics().outages.labels(self.pipeline, source).inc()

    def record(self, p: dict[str, Any]) -> None:
        try:
            self._record(p)
        except Exception:  # a metrics bug must never fail the run
            log.exception("metrics: cannot record progress")

    def _record(self, p: dict[str, Any]) -> None:
        m, pipeline = metrics(), self.pipeline
        m.windows_active.labels(pipeline).set(window_state_rows(p))
        m.state_groups.labels(pipeline).set(state_rows(p))
        for source, late in late_rows_by_source(p).items():
            m.late_rows.labels(pipeline, source).inc(late)
        for source, duplicates in duplicates_by_source(p).items():
            m.duplicates.labels(pipeline, source).inc(duplicates)
        mark = watermark(p)
        if mark:
            seconds = datetime.fromisoformat(mark.replace("Z", "+00:00")).timestamp()
            m.watermark.labels(pipeline, "_global").set(seconds)
        for source, latest in max_event_times(p).items():
            lateness = self.lateness_ms.get(source, 0)
            mark_ms = source_watermark_ms(self._source_marks.get(source), latest, lateness)
            if mark_ms is None:
                continue
            self._source_marks[source] = mark_ms
            m.watermark.labels(pipeline, source).set(mark_ms / 1000)
