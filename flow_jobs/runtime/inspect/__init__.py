"""``flow-jobs inspect``: what a pipeline's state holds, and why its windows are open.

Read from the checkpoint with Spark's state data source (``format("statestore")``,
``format("state-metadata")``), at the latest committed micro-batch, whether or not the
query runs: the open windows with their partial aggregates, a join's buffered rows,
the watermark that batch ran under (Spark's offset log) and each source's watermark
(the ledger), so each window says what closes it and which source it waits for.

Where the partial aggregates come from:

* windows on Spark's aggregation: the state value is Spark's aggregation buffers (the
  window's bounds in the key, or in the value where the family keeps each group's
  own: ``WindowSpec.NATIVE_STATE_BOUNDS``). Which buffers, in which order, is what
  the pipeline's compiled plan says (``flow_jobs.runtime.inspect.buffers``): inspect
  compiles it on its checkpoint as a run would, so a window that merges the Kafka
  reader's partials (``flow_jobs.combine.decide``) is read in that layout, a plain one in
  its own. Each aggregator reads its value from its buffers (``Aggregator.open_value``:
  ``avg`` sum / count, ``first`` / ``last`` the least / greatest ``struct(event time,
  lane, position, value)``, an approximate ``count_distinct`` its DataSketches HLL
  sketch's estimate). ``collect`` and ``reduce`` show "n/a" (Spark's own serialization
  of the items; the user's functions), and the report's note names each aggregate that
  does and why;
* windows on the state API: the value is flow-jobs' own
  (``flow_jobs.windows.processor``): the group's buffered events, from which each open
  window's aggregates are computed here by the family (``WindowSpec.state_family``)
  and the aggregators (``reduce``: "n/a", it would run the user's function on the
  driver).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from flow_jobs.aggregations import NOT_DECODED
from flow_jobs.io.checkpoint_files import CheckpointFiles, checkpoint_files, logged_batches
from flow_jobs.locations import local_path
from flow_jobs.runtime.checkpoint import checkpoint_location, read_offset_log
from flow_jobs.runtime.inspect.buffers import NativeState, native_state
from flow_jobs.runtime.inspect.report import (
    NO_STATE,
    BufferedJoinRow,
    OpenWindow,
    Reading,
    StateReport,
    parse_iso,
)
from flow_jobs.runtime.inspect.windows import native_windows, state_windows
from flow_jobs.runtime.readings import READINGS, StateInput, register_reading
from flow_jobs.runtime.reports import JOIN_OPERATOR
from flow_jobs.spec.models import PipelineSpec

if TYPE_CHECKING:
    from flow_jobs.ledger.store import LedgerStore


def inspect_state(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    store: LedgerStore | None = None,
    groups: Mapping[str, str] | None = None,
    limit: int = 20,
) -> StateReport:
    """The pipeline's state at its latest committed micro-batch. ``store``: the ledger,
    for each source's watermark (without it, only the global one is known);
    ``groups``: keep windows (or join rows) whose group (join key) columns equal these
    values, compared as strings; ``limit``: at most this many windows and join rows,
    those that close first."""
    checkpoint = checkpoint_location(spec.checkpoint_location())
    report = StateReport(spec.name, checkpoint)
    files = checkpoint_files(checkpoint, spark)
    batch = _latest_commit(files)
    if batch is None:
        report.note = NO_STATE
        return report
    report.batch_id = batch
    entry = read_offset_log(checkpoint, batch, spec)
    report.watermark = entry.watermark if entry else None
    if store is not None:
        ledger_mark, report.source_watermarks = _ledger_watermarks(store, spec, files)
        report.watermark = report.watermark or ledger_mark
    report.held_back_by = _held_back_by(report.source_watermarks)
    context = Reading(spec, report, dict(groups or {}), limit)
    # Reading RocksDB state asks the driver's StateStoreCoordinator, which Spark creates
    # with the session's streaming query manager: in a process that never started a
    # query (the CLI), touching the manager creates it (else: "Cannot find endpoint:
    # StateStoreCoordinator", measured on Spark 4.2).
    spark.streams.active  # noqa: B018
    operators = spark.read.format("state-metadata").load(checkpoint).collect()
    given = StateInput(spark, checkpoint, batch, operators, context)
    for stage in spec.transform.stages():
        READINGS.get(stage.STAGE)(given)
    return report


def _read_windows(given: StateInput) -> None:
    """The window's open windows: the last stateful operator but a join (a dedup comes
    before it)."""
    windows = [r for r in given.operators if r["operatorName"] != JOIN_OPERATOR]
    if not windows:
        return
    reader = given.reader(max(r["operatorId"] for r in windows))
    c = given.reading
    report = c.report
    if c.spec.window.engine == "native":
        plan = _compiled_state(given.spark, c.spec, given.checkpoint)
        report.windows, report.open_windows = native_windows(reader, c, plan)
    else:
        report.windows, report.open_windows = state_windows(reader, c)


register_reading("window", _read_windows)


def _compiled_state(spark: SparkSession, spec: PipelineSpec, checkpoint: str) -> NativeState | str:
    """What the window's state holds, as the pipeline compiles on its checkpoint; or why
    that is not known (the windows are still listed, their aggregates "n/a")."""
    try:
        return native_state(spark, spec, checkpoint)
    # Compiling may meet whatever a run would (a registry or lookup out of reach, a spec
    # Spark refuses): inspect still lists what it reads without it, and says why.
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0]
        return (
            "the pipeline does not compile here, so the buffers its state keeps are "
            f"unknown ({type(e).__name__}: {first}); `flow-jobs validate --plan` shows why"
        )


# -- where the state is --------------------------------------------------------------


def state_absent(location: str) -> bool:
    """True when a local checkpoint has no committed micro-batch (or does not exist):
    known without Spark. A checkpoint behind a URI: False (read through Spark next)."""
    checkpoint = checkpoint_location(location)
    return (
        local_path(checkpoint) is not None and _latest_commit(checkpoint_files(checkpoint)) is None
    )


def _latest_commit(files: CheckpointFiles) -> int | None:
    """The latest committed micro-batch (``commits/<id>``), None before the first."""
    try:
        done = logged_batches(files, "commits")
    except FileNotFoundError:
        return None
    return max(done) if done else None


def _ledger_watermarks(
    store: LedgerStore, spec: PipelineSpec, checkpoint: CheckpointFiles
) -> tuple[datetime | None, dict[str, datetime | None]]:
    """The newest ledger row of this checkpoint's query: its global watermark and each
    source's (its highest event time so far minus its lateness)."""
    query_id = _query_id(checkpoint)
    rows = [
        r
        for r in store.recent_batches(spec.name, 50)
        if query_id is None or r["query_id"] == query_id
    ]
    marked = [r for r in rows if r.get("source_watermarks")]
    if not marked:
        return (rows[-1]["global_watermark"] if rows else None), {}
    last = marked[-1]
    marks = {s.name: parse_iso((last["source_watermarks"] or {}).get(s.name)) for s in spec.sources}
    return last["global_watermark"], marks


def _query_id(checkpoint: CheckpointFiles) -> str | None:
    try:
        return str(json.loads(checkpoint.read_text("metadata"))["id"])
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _held_back_by(marks: Mapping[str, datetime | None]) -> tuple[str, ...]:
    """The sources at the minimum (a source without an event time yet holds it too)."""
    if not marks:
        return ()
    silent = tuple(s for s, m in marks.items() if m is None)
    if silent:
        return silent
    low = min(m for m in marks.values() if m is not None)
    return tuple(s for s, m in marks.items() if m == low)


__all__ = [
    "NOT_DECODED",
    "NO_STATE",
    "READINGS",
    "BufferedJoinRow",
    "OpenWindow",
    "StateInput",
    "StateReport",
    "inspect_state",
    "register_reading",
    "state_absent",
]
