"""The ``foreachBatch`` sink: run the micro-batch, commit its dead letters, write its rows
and its ledger row (exactly once per batch: see ``flow_jobs.ledger.batch_ledger``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from flow_jobs.dead_letters import OBSERVATION_PREFIX, DeadLetterTable
from flow_jobs.io.batch import DELETE, BatchEntry, ClosedWindows, StagedFiles, WriteResult
from flow_jobs.io.waits import wait_out
from flow_jobs.ledger.batch_ledger import BatchLedger
from flow_jobs.ledger.run_lock import RunLock
from flow_jobs.plan.pipelines import CompiledPipeline
from flow_jobs.plan_lines import PlanLine
from flow_jobs.runtime.batch_steps import batch_steps
from flow_jobs.runtime.checkpoint import read_offset_log
from flow_jobs.runtime.metrics import metrics
from flow_jobs.runtime.observations import Observations
from flow_jobs.runtime.reports import as_dict
from flow_jobs.runtime.session import plain_paths_shared
from flow_jobs.sinks.base import ExecutorInserts, Sink
from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger(__name__)


class StopRequested(RuntimeError):
    """Raised into Spark when a batch starts after a graceful stop was requested.

    The batch's offsets are in the offset log but not in the commit log, so the next
    run replays it; nothing of it has been written.
    """


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: int
    output_rows: int
    merge: WriteResult | None  # None: nothing to write
    dead_lettered: int
    seconds: float  # the whole call: running the micro-batch, then writing it
    write_seconds: float  # of which writing: the target, the ledger and the dead letters
    #: the target commit its ledger row records (``flow_jobs.sinks.describe_commit``),
    #: also where it wrote no row; None for a replayed batch
    commit: str | None = None


class WindowBatchSink:
    """Called by Spark for every micro-batch, on the driver."""

    def __init__(
        self,
        spec: PipelineSpec,
        target: Sink,
        dead_letters: DeadLetterTable,
        ledger: BatchLedger,
        checkpoint: str,
        state_version: int,
        replay_from: datetime | None = None,
        run_lock: RunLock | None = None,
        inserts_only: bool = False,
        master: str = "local",
    ) -> None:
        self.spec = spec
        #: each batch's rows are new ones (``inserts_only``): the target's executors may
        #: write them (``Sink.inserts``), asked once the query id is known
        self.inserts_only = inserts_only
        self.plain_paths_shared = plain_paths_shared(master)  # the session's master
        self._inserts: ExecutorInserts | None = None
        #: held before each write; taken again after a state-store restart
        self.run_lock = run_lock
        self.pipeline = spec.name
        self.target = target
        self.dead_letters = dead_letters
        self.ledger = ledger
        self.checkpoint = checkpoint
        self.state_version = state_version
        #: the generation replays from this time (``flow-jobs reset --from``)
        self.replay_from = replay_from
        self.outcomes: dict[int, BatchOutcome] = {}
        #: what each batch's rows go through before the write (top_n's ranking)
        self.steps = [s.start(ledger.store, state_version) for s in batch_steps(spec)]
        self._taps = Observations(OBSERVATION_PREFIX)  # the dead-letter taps' rows
        self._query_id: str | None = None
        self._query: Any = None
        self._before_batch: Callable[[dict[str, Any] | None], None] | None = None
        self._bound = threading.Event()
        self._writing = threading.Lock()
        self._stopping = False

    def bind(
        self, query: Any, before_batch: Callable[[dict[str, Any] | None], None] | None = None
    ) -> None:
        """Attach the running query: its persistent id (new for each fresh checkpoint)
        names the writer and keys the ledger; ``before_batch`` runs on the driver before
        each batch, with the previous batch's progress (the state cap check), and fails
        the batch by raising."""
        try:
            self._bind(query, before_batch)
        finally:
            self._bound.set()  # a batch waiting for it must not wait forever

    def _bind(
        self, query: Any, before_batch: Callable[[dict[str, Any] | None], None] | None
    ) -> None:
        self._query = query
        self._before_batch = before_batch
        if self.spec.has_window:
            # A fresh checkpoint lineage (after a reset, or a lost checkpoint) may start
            # where an earlier one's input is gone (retention, starting_offsets): the
            # windows that lineage completed are never overwritten with partial ones.
            # A replay from T re-reads every record from T on, so it rewrites the windows
            # starting at or after T as well.
            until = self.ledger.store.earlier_lineages_watermark(self.pipeline, str(query.id))
            if until is not None:
                w = self.spec.window
                closed = ClosedWindows(
                    w.window_end_column, until, w.window_start_column, self.replay_from
                )
                self.target.protect_closed_windows(closed)
                replayed = (
                    f", except those starting at or after {self.replay_from.isoformat()} "
                    "(replayed from there)"
                    if self.replay_from is not None
                    else ""
                )
                log.info(
                    "%s: a new checkpoint lineage; windows ending at or before %s (an "
                    "earlier lineage's watermark) are inserted if absent, never updated%s",
                    self.pipeline,
                    until.isoformat(),
                    replayed,
                )
        if self.inserts_only:
            self._inserts = self.target.inserts(str(query.id), self.plain_paths_shared)
            if self._inserts is not None:
                log.info("%s: each batch's data files are written by the executors", self.pipeline)
        self._query_id = str(query.id)  # last: a batch runs only once all is set

    @property
    def query_id(self) -> str | None:
        return self._query_id

    @staticmethod
    def describe(spec: PipelineSpec, trigger: str) -> list[PlanLine]:
        """What each micro-batch runs on the driver (``trigger``: when one starts), and
        the steps its rows go through (``flow_jobs.runtime.batch_steps``: the top N it
        ranks); said before a sink exists (``validate --plan``)."""
        lines = [
            PlanLine(
                "micro-batch",
                f"foreachBatch on the driver, {trigger}: one action runs the batch (the "
                "sources, the taps, the operators, the state store's commit): toArrow, or "
                "where the target's executors write a batch that only inserts, theirs; "
                "then its dead letters, then the target write and its ledger row, each "
                f"tried again while a store is away (retry_for_ms = {spec.runtime.retry_for_ms})",
            )
        ]
        return lines + [line for step in batch_steps(spec) for line in step.describe()]

    def request_stop(self) -> None:
        """Refuse new batches and wait until the one being written, if any, is done."""
        self._stopping = True
        with self._writing:
            pass

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        if self._stopping:
            raise StopRequested(f"batch {batch_id} not started: stop requested")
        self._bound.wait()
        if self._query_id is None:
            raise RuntimeError(f"batch {batch_id} not started: the run failed to start")
        with self._writing:
            if self._stopping:
                raise StopRequested(f"batch {batch_id} not started: stop requested")
            if self._before_batch is not None:
                self._before_batch(last_progress(self._query))
            entry = BatchEntry(
                pipeline=self.pipeline,
                query_id=self._query_id,
                batch_id=batch_id,
                state_version=self.state_version,
                started_at=datetime.now(UTC),
                target_kind=self.target.kind,
                target=self.target.description,
            )
            started = time.monotonic()
            # One action runs the whole micro-batch: the state store commits its new
            # version and the dead-letter taps collect the bad rows. It must run even
            # when the batch was already written, or the next batch finds no state
            # version.
            rows: pa.Table | StagedFiles = (
                frame.toArrow() if self._inserts is None else self._inserts.stage(frame, batch_id)
            )
            tapped = self._taps.take(self._query)
            computed = time.monotonic()
            end = read_offset_log(self.checkpoint, batch_id, self.spec)
            start = read_offset_log(self.checkpoint, batch_id - 1, self.spec)
            if end is not None:
                entry.end_offsets, entry.global_watermark = end.offsets, end.watermark
                for source, offsets in end.offsets.items():
                    if isinstance(offsets, dict) and offsets.get("_data_loss"):
                        # Kept in the ledger row's end_offsets, with where reading resumed.
                        log.warning(
                            "%s: batch %s of source %s skipped lost offsets: %s",
                            self.pipeline,
                            batch_id,
                            source,
                            offsets["_data_loss"],
                        )
            if start is not None:
                entry.start_offsets = start.offsets
            what = f"writing batch {batch_id}"
            if self.run_lock is not None:  # this run still holds the pipeline: no write else
                self.run_lock.ensure(what)
            for step in self.steps:  # none where the executors wrote the rows
                assert isinstance(rows, pa.Table)
                rows = step(rows, start.watermark if start else None)
            # Dead letters first: their count goes into the ledger row.
            # (in the state store with [dead_letter] kind = "state_store": ON CONFLICT on
            # each record's position makes a try again a no-op for what went in)
            limit = self.spec.runtime.retry_for_ms
            dead = wait_out(what, lambda: self.dead_letters.commit(batch_id, tapped), limit)
            entry.output_rows, entry.dead_lettered_rows = rows.num_rows, dead
            entry.compute_ms = (computed - started) * 1000
            # Tried again while the state store or the target's object store is away
            # (flow_jobs.io.waits): a batch's write skips what a first try wrote
            # (BatchLedger.write: the ledger row, the Delta commit's transaction id).
            written = wait_out(what, lambda: self.ledger.write(self.target, rows, entry), limit)
            if not written.skipped:
                try:
                    metrics().windows_emitted.labels(self.pipeline).inc(rows.num_rows)
                except Exception:  # a metrics bug never fails a batch already written
                    log.exception("metrics: cannot count the windows emitted")
            done = time.monotonic()
            self.outcomes[batch_id] = BatchOutcome(
                batch_id,
                rows.num_rows,
                written if rows.num_rows else None,
                dead,
                done - started,
                done - computed,
                written.version,
            )


def target_columns(frame: DataFrame) -> tuple[pa.Schema, bool]:
    """The target's columns (the plan's own, a delete's flag or a change's order, never
    reach it), and whether the batches flag deletes (``DELETE``)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from flow_jobs.plan.frame_columns import INTERNAL_PREFIX

    fields = [f for f in frame.schema if not f.name.startswith(INTERNAL_PREFIX)]
    return to_arrow_schema(StructType(fields), timezone="UTC"), DELETE in frame.columns


def inserts_only(spec: PipelineSpec, compiled: CompiledPipeline) -> bool:
    """Whether each batch's rows are new ones, never written before in this checkpoint's
    lineage: the compiled pipeline says so of its rows (``writes_new_rows``: a window
    emitted "final", a join's rows, an append's records), and no batch step reshapes them
    (a top N) or takes one back."""
    return compiled.writes_new_rows and not batch_steps(spec)


def last_progress(query: Any) -> dict[str, Any] | None:
    report = query.lastProgress
    if report is None:
        return None
    return as_dict(report)
