"""Idle sources: which ones leave the pipeline's minimum watermark, and how.

The rules: docs/spec-reference.md, "Watermarks over several sources".

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
(``flow_jobs.kafka``). Once the source has records again it is no longer idle, sends no
heartbeat, and holds the minimum from where its records and its last heartbeat left it:
records behind the watermark reached meanwhile are late, as they would be in Flink.

The clock rules continuous runs only. An ``--available-now`` run is a replay and does
not look at it: a source with nothing to read in the run is idle for all of it (its
reader sends one heartbeat to Spark's highest timestamp, less a year), any other source
for none; when no source has anything to read, none is idle (``replay_targets``). A
fresh checkpoint starting by time reads from each partition's first record at or after
it: a source with none has nothing to read (``_has_records``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable

from flow_jobs.instants import epoch_ms
from flow_jobs.io.checkpoint_files import checkpoint_files, logged_batches
from flow_jobs.kafka.heartbeats import IDLE_FOR_THE_RUN_MS
from flow_jobs.kafka.offsets import source_time_offsets, source_watermarks
from flow_jobs.runtime.checkpoint import read_offset_log
from flow_jobs.runtime.reports import Progress, source_metrics
from flow_jobs.spec.models import KafkaSource, PipelineSpec

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
        self._replay: dict[str, int] | None = None  # set: an --available-now run's
        self.publish()  # clears what an earlier run left

    def publish_replay(self, targets: dict[str, int]) -> None:
        """An --available-now run: these targets, for the whole run (no clock)."""
        self._replay = dict(targets)
        self.publish()

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
        if self._replay is not None:
            return dict(self._replay)
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


def replay_targets(spec: PipelineSpec, checkpoint: str) -> dict[str, int]:
    """An --available-now run's idle sources: those with nothing to read from where the
    checkpoint stands to the broker's latest offsets, each lifted to
    ``IDLE_FOR_THE_RUN_MS``, provided another source has records to read. None when no
    source has (every source idle: the watermark must not move); a source in doubt
    counts as having records, which can only hold the watermark back, never push it on.
    Each reader checks again that it has nothing to read before it sends its heartbeat."""
    begin = run_start(spec, checkpoint)
    empty = [s.name for s in spec.sources if not _has_records(s, begin.get(s.name))]
    if len(empty) == len(spec.sources):
        return {}
    return {name: IDLE_FOR_THE_RUN_MS for name in empty}


def run_start(spec: PipelineSpec, checkpoint: str) -> dict[str, dict[int, int]]:
    """Where the run's first batch starts reading each source (source -> partition ->
    offset): the newest committed batch's end offsets; {} for a fresh checkpoint."""
    files = checkpoint_files(checkpoint)
    try:
        planned = logged_batches(files, "offsets")
        done = set(logged_batches(files, "commits"))
    except FileNotFoundError:
        return {}
    committed = [b for b in planned if b in done]
    entry = read_offset_log(checkpoint, committed[-1], spec) if committed else None
    if entry is None:
        return {}
    starts: dict[str, dict[int, int]] = {}
    for source in spec.sources:
        value = entry.offsets.get(source.name) or {}
        by_partition = value.get(source.topic) if isinstance(value, dict) else None
        if isinstance(by_partition, dict):
            starts[source.name] = {int(p): int(o) for p, o in by_partition.items()}
    return starts


def _has_records(source: KafkaSource, begin: dict[int, int] | None) -> bool:
    """Whether the source has records to read from ``begin`` (partition -> offset; None:
    a fresh checkpoint, which starts at ``starting_offsets``) to the broker's latest
    offsets. Where the broker cannot say, it has."""
    try:
        marks = source_watermarks(source, "flow-jobs-idleness")
    except Exception as e:  # in doubt: it has records (holds the watermark, never lifts it)
        log.warning("source %s: could not read its offsets (%s); not idle", source.name, e)
        return True
    if begin is None:  # a fresh checkpoint starts at starting_offsets
        start = source.starting_offsets
        if start == "latest":
            return False
        if not isinstance(start, str):
            # By time (the spec's, or `flow-jobs reset --from`'s: the runner puts it
            # there): each partition starts at its first record stamped at or after it,
            # where the reader will look it up too. None after it: nothing to read.
            try:
                begin = source_time_offsets(
                    source, "flow-jobs-idleness", marks, epoch_ms(start.timestamp)
                )
            except Exception as e:  # in doubt, as above
                log.warning(
                    "source %s: could not find its offsets at %s (%s); not idle",
                    source.name,
                    start.timestamp.isoformat(),
                    e,
                )
                return True
    if begin is None:  # "earliest"
        return any(high > low for low, high in marks.values())
    return any(high > begin.get(p, low) for p, (low, high) in marks.items())
