"""The ``foreachBatch`` sink: run the micro-batch, MERGE its windows, commit dead letters."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from flow_jobs.io.dead_letters import DeadLetterTable
from flow_jobs.io.delta import DeltaMergeTable, MergeResult


class StopRequested(RuntimeError):
    """Raised into Spark when a batch starts after a graceful stop was requested.

    The batch's offsets are in the offset log but not in the commit log, so the next
    run replays it; nothing of it has been written.
    """


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: int
    output_rows: int
    merge: MergeResult | None  # None: nothing to write
    dead_lettered: int
    seconds: float  # the whole call: running the micro-batch, then writing it
    write_seconds: float  # of which writing: the target MERGE and the dead letters


class WindowBatchSink:
    """Called by Spark for every micro-batch, on the driver."""

    def __init__(
        self, pipeline: str, target: DeltaMergeTable, dead_letters: DeadLetterTable
    ) -> None:
        self.pipeline = pipeline
        self.target = target
        self.dead_letters = dead_letters
        self.outcomes: dict[int, BatchOutcome] = {}
        self._app_id: str | None = None
        self._query: Any = None
        self._before_batch: Callable[[dict[str, Any] | None], None] | None = None
        self._bound = threading.Event()
        self._writing = threading.Lock()
        self._stopping = False

    def bind(
        self, query: Any, before_batch: Callable[[dict[str, Any] | None], None] | None = None
    ) -> None:
        """Attach the running query: its persistent id (new for each fresh checkpoint)
        names the writer; ``before_batch`` runs on the driver before each batch, with
        the previous batch's progress (the state cap check, lookup refreshes), and fails
        the batch by raising."""
        self._query = query
        self._before_batch = before_batch
        self._app_id = f"flow-jobs/{self.pipeline}/{query.id}"
        self._bound.set()

    @property
    def app_id(self) -> str | None:
        return self._app_id

    def request_stop(self) -> None:
        """Refuse new batches and wait until the one being written, if any, is done."""
        self._stopping = True
        with self._writing:
            pass

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        if self._stopping:
            raise StopRequested(f"batch {batch_id} not started: stop requested")
        self._bound.wait()
        assert self._app_id is not None
        with self._writing:
            if self._stopping:
                raise StopRequested(f"batch {batch_id} not started: stop requested")
            if self._before_batch is not None:
                self._before_batch(last_progress(self._query))
            started = time.monotonic()
            # One action runs the whole micro-batch: the state store commits its new
            # version and the dead-letter tap stages bad rows. It must run even when
            # the batch was already written, or the next batch finds no state version.
            rows = frame.toArrow()
            computed = time.monotonic()
            merge = self.target.merge(rows, txn=(self._app_id, batch_id)) if rows.num_rows else None
            dead = self.dead_letters.commit(batch_id)
            done = time.monotonic()
            self.outcomes[batch_id] = BatchOutcome(
                batch_id, rows.num_rows, merge, dead, done - started, done - computed
            )


def last_progress(query: Any) -> dict[str, Any] | None:
    report = query.lastProgress
    if report is None:
        return None
    return json.loads(report.json) if hasattr(report, "json") else dict(report)
