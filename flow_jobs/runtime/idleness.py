"""Idle sources (seed 000): which ones leave the pipeline's minimum watermark, and how.

The pipeline's watermark is the lowest of its sources' (``plan.sources.SourceWatermark``).
A source with no new record for ``source_idleness_ms`` of processing time is idle: it
should stop holding that minimum back until it has records again, and when every source
is idle the watermark does not move.

Spark has no idleness: each source's watermark is its highest event time less the
lateness, it only rises, and a source without any record holds the minimum at 0. So an
idle source raises its own: the run publishes, after every micro-batch's report and
every half second, the watermark each idle source must reach, the lowest watermark of
the sources that are not idle, to a small JSON file; the source's Kafka reader, finding
a higher value there and no record of its own, plans a heartbeat row that carries it
(``io.kafka_source``). Once the source has records again it is no longer idle, sends no
heartbeat, and holds the minimum from where its records and its last heartbeat left it:
records behind the watermark reached meanwhile are late, as they would be in Flink.

This runs only in continuous runs. An ``--available-now`` run is a replay and does not
look at the clock: a source with nothing to read in the run is idle for all of it (its
reader sends one heartbeat to Spark's highest timestamp), any other source for none.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable

from flow_jobs.runtime.reports import Progress, source_metrics

log = logging.getLogger(__name__)


class IdleSources:
    """Tracks the sources' watermarks and last records; publishes the idle ones' targets."""

    def __init__(
        self,
        path: str,
        sources: Iterable[str],
        lateness_ms: int,
        idleness_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.lateness_ms = lateness_ms
        self.idleness_s = idleness_ms / 1000
        self._clock = clock
        now = clock()
        self._last_record = {s: now for s in sources}  # a run starts with none idle
        self._watermark: dict[str, int] = {}
        self._published: dict[str, int] | None = None
        self.publish()  # clears what an earlier run left

    def observe(self, progress: Progress) -> None:
        """One micro-batch's report: which sources had records, and their event times."""
        now = self._clock()
        for source, metrics in source_metrics(progress).items():
            if source not in self._last_record:
                continue
            if int(metrics.get("rows") or 0) > 0:
                self._last_record[source] = now
            latest = metrics.get("max_event_time_ms")
            if latest is not None:
                mark = int(latest) - self.lateness_ms
                self._watermark[source] = max(mark, self._watermark.get(source, mark))

    def idle(self) -> set[str]:
        now = self._clock()
        return {s for s, at in self._last_record.items() if now - at > self.idleness_s}

    def targets(self) -> dict[str, int]:
        """Each idle source's target: the lowest watermark of the sources not idle.
        None idle, or none of the others with a watermark yet: no target."""
        idle = self.idle()
        active = [m for s, m in self._watermark.items() if s not in idle]
        if not idle or not active:
            return {}
        lowest = min(active)
        return {s: lowest for s in sorted(idle)}

    def publish(self) -> None:
        """Write the targets where the readers look, when they changed (atomically)."""
        targets = self.targets()
        if targets == self._published:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        staging = f"{self.path}.{os.getpid()}.tmp"
        with open(staging, "w", encoding="utf-8") as f:
            json.dump(targets, f)
        os.replace(staging, self.path)
        if targets:
            log.info("idle sources leave the watermark's minimum: %s", targets)
        self._published = targets
