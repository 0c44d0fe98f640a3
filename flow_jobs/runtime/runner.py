"""Run one pipeline as a managed streaming query: start, watch, stop gracefully."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.io.batch import Supersede
from flow_jobs.io.checkpoint_files import checkpoint_files
from flow_jobs.io.checkpoint_gateway import publish_driver_gateway, withdraw_driver_gateway
from flow_jobs.ledger.batch_ledger import BatchLedger
from flow_jobs.ledger.location import state_store_schema
from flow_jobs.ledger.run_lock import RunLock
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.locations import local_path
from flow_jobs.plan.compile import CompiledPipeline, compile_pipeline
from flow_jobs.plan_lines import PlanLine
from flow_jobs.runtime.batch_steps import batch_steps
from flow_jobs.runtime.caps import GroupCap, WindowStateCapHit
from flow_jobs.runtime.checkpoint import (
    checkpoint_location,
    describe_batch_in_flight,
    has_committed_batch,
)
from flow_jobs.runtime.display import Display, SourceExtent, run_extents
from flow_jobs.runtime.idleness import IdleSources, replay_targets
from flow_jobs.runtime.metrics import serve
from flow_jobs.runtime.outages import BrokerWatch
from flow_jobs.runtime.preflight import check_sources
from flow_jobs.runtime.progress import IdleHeartbeat, ProgressTracker, RunSummary
from flow_jobs.runtime.session import pipeline_session, refuse_unshared_paths, session_for
from flow_jobs.runtime.sink import (
    StopRequested,
    WindowBatchSink,
    inserts_only,
    last_progress,
    target_columns,
)
from flow_jobs.runtime.stopping import await_trigger_end, quiet_expected_stop, stop_if_active
from flow_jobs.secrets import redact
from flow_jobs.settings import Settings
from flow_jobs.sinks import sink_for
from flow_jobs.sinks.base import Sink, SinkOutput
from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger(__name__)
#: The run's summary line; the CLI prints it on stdout instead, so it quiets this logger.
SUMMARY_LOG = logging.getLogger("flow_jobs.summary")

#: A Python error's last traceback line: ``module.SomeError: message``, or one of the
#: ledger's own (``flow_jobs.ledger.run_lock``, ``flow_jobs.io.waits``), which end in
#: neither word.
_PYTHON_ERROR = re.compile(
    r"^(flow_jobs\.[\w.]*\.[A-Z]\w*"
    r"|[A-Za-z_][\w.]*(Error|Exception|RunLockLost|StoreUnreachable|PipelineBusy)): "
)
#: The class of an error raised by flow-jobs itself: its message is written for the
#: user, and the class name adds nothing (a user's own code's errors keep theirs).
_OUR_ERROR_CLASS = re.compile(r"^flow_jobs\.[\w.]*\.[A-Z]\w*: ")
_STREAM_FAILED = re.compile(r"^\[STREAM_FAILED\] Query \[[^]]*\] terminated with exception: ")


class PipelineFailed(RuntimeError):
    """The streaming query terminated with an error."""


class PipelineRunner:
    """One spec, one streaming query, one checkpoint."""

    def __init__(
        self,
        spec: PipelineSpec,
        spark: SparkSession | None = None,
        stop_event: threading.Event | None = None,
        sources_checked: bool = False,
        spec_path: str | None = None,
    ) -> None:
        self.spec = spec
        #: whether ``check_sources`` passed already (the CLI checks before the JVM starts)
        self.sources_checked = sources_checked
        #: the spec file as the user gave it (None: built in Python), for the reset an
        #: incompatible spec's refusal names
        self.spec_path = spec_path
        self.checkpoint = checkpoint_location(spec.checkpoint_location())
        self.spark = pipeline_session(
            spark or session_for(spec.spark),
            spec.spark,
            local_checkpoint=local_path(self.checkpoint) is not None,
        )
        refuse_unshared_paths(spec, self.spark.sparkContext.master)
        self.stop_event = stop_event or threading.Event()
        self.dead_letters = DeadLetterTable.of(spec, state_store_schema(spec))
        self.compiled: CompiledPipeline = compile_pipeline(
            self.spark, spec, self.dead_letters, self.checkpoint
        )
        self.output_schema, self.deletes_flagged = target_columns(self.compiled.frame)
        self.ledger: LedgerStore | None = None  # opened by run(): validate needs none
        self.sink: WindowBatchSink | None = None
        self.run_lock: RunLock | None = None  # held while run() runs
        self.progress: ProgressTracker | None = None  # live while run() runs
        self.display: Display | None = None
        self._extents: dict[str, SourceExtent] = {}
        self._started, self._shown = time.monotonic(), 0

    def describe(self) -> list[PlanLine]:
        """``validate --plan``: what compiled, then what each micro-batch runs (the sink,
        the dead letters, the target), each part in its own words."""
        every = f"every {self.spec.runtime.trigger_interval_ms} ms"
        trigger = f"{every} (run --available-now: until the input is drained)"
        return [
            *self.compiled.describe(),
            *WindowBatchSink.describe(self.spec, trigger),
            *self.dead_letters.describe(),
            *self._target(None).describe(),
        ]

    def _target(self, ledger: LedgerStore | None) -> Sink:
        """The target's sink, its kind's (``ledger`` None: built only to be described)."""
        compiled = self.compiled
        output = SinkOutput(
            self.output_schema,
            tuple(compiled.natural_key),
            tuple(compiled.nullable_key),
            self.spec.name,
        )
        target = sink_for(self.spec.target)(self.spec.target, output, ledger)
        if self.spec.supersedes_overlapping:
            w = self.spec.window
            target.supersede = Supersede(
                tuple(w.group_by), w.window_start_column, w.window_end_column
            )
        target.deletes_flagged = self.deletes_flagged
        for step in batch_steps(self.spec):  # top_n emitted "current" deletes
            if step.deletes_within is not None:
                target.ranked = step.deletes_within
        return target

    def run(self, available_now: bool = False, display: Display | None = None) -> RunSummary:
        """Process until the input is drained (``available_now``) or a stop is requested.
        One run per pipeline: refused (``PipelineBusy``) while another run or a reset
        holds the pipeline's lock; this run holds it until it returns. ``display`` is
        shown how far along the run is after each micro-batch (``runtime.display``)."""
        if not self.sources_checked:  # a wrong address or topic: one line, at once
            check_sources(self.spec)
            self.sources_checked = True
        ledger = self.ledger = LedgerStore.for_spec(self.spec)
        self.display = display
        with ledger.run_lock(self.spec.name, "run") as lock:
            self.run_lock = lock
            return self._run(ledger, available_now)

    def _show_progress(self, tracker: ProgressTracker, final: bool = False) -> None:
        """The display's figures after a new micro-batch (and once at the end)."""
        display = self.display
        if display is None:
            return
        seen = tracker.batches_seen()
        if not final and seen == self._shown:
            return
        self._shown = seen
        snapshot = tracker.snapshot(self._extents, time.monotonic() - self._started)
        display.close(snapshot) if final else display.update(snapshot)

    def _run(self, ledger: LedgerStore, available_now: bool) -> RunSummary:
        # Refuses a checkpoint whose spec changed incompatibly (IncompatibleSpec): asked
        # before Spark started (state_store.refuse_incompatible), judged again here.
        state = ledger.open_pipeline(self.spec, self.spec_path)
        if state.replay_from is not None and not has_committed_batch(self.checkpoint):
            self._start_sources_at(state.replay_from)
        ledger.record_natural_key(self.spec.name, self.compiled.natural_key)
        if self.spec.dead_letter.kind == "state_store":
            self.dead_letters.store = ledger
        target = self._target(ledger)
        target.ensure()
        self.dead_letters.ensure()
        batches = BatchLedger(ledger)
        sink = self.sink = WindowBatchSink(
            self.spec,
            target,
            self.dead_letters,
            batches,
            self.checkpoint,
            state.state_version,
            state.replay_from,
            self.run_lock,
            inserts_only(self.spec, self.compiled),
            self.spark.sparkContext.master,
        )
        for warning in self.spec.warnings():
            log.warning("%s: %s", self.spec.name, warning)
        caps = GroupCap(self.spark, self.spec, self.checkpoint)
        for line in self.compiled.describe():
            log.debug("%s: %s -> %s", self.spec.name, line.part, line.how)
        writer = (
            self.compiled.frame.writeStream.queryName(self.spec.name)
            .outputMode(self.compiled.output_mode)
            .option("checkpointLocation", self.checkpoint)
            .foreachBatch(sink)
        )
        if available_now:
            # Our source pins its end offsets (SupportsTriggerAvailableNow), and Spark
            # then runs the no-data batch that emits the windows the last watermark
            # closed before it terminates.
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(
                processingTime=f"{self.spec.runtime.trigger_interval_ms} milliseconds"
            )

        idle = self._idle_sources(available_now)
        self._extents = (
            run_extents(self.spec, self.checkpoint, available_now) if self.display else {}
        )
        tracker = self.progress = ProgressTracker(
            self.spec, sink.outcomes, batches, state.state_version, idle
        )
        port = self.spec.runtime.metrics_port or Settings.from_env().metrics_port
        if port:
            try:
                serve(port)
            except OSError as e:  # metrics are an aid: never the reason a run fails
                log.warning("%s: metrics not served on port %s: %s", self.spec.name, port, e)
        for prepare in self.compiled.before_start:
            prepare(checkpoint_files(self.checkpoint, self.spark))
        # A remote checkpoint's offset log reaches the Kafka reader's planning process
        # through this driver's JVM (flow_jobs.io.checkpoint_gateway).
        publish_driver_gateway(self.spark, self.checkpoint)
        withdraw = (
            "withdraw the driver's gateway",
            lambda: withdraw_driver_gateway(self.checkpoint),
        )
        # Logs broker outages as they start and end, and counts them (runtime.outages).
        watch = BrokerWatch(self.spec.name, self.spec.sources, tracker.outage_started).start()
        unwatch = ("stop watching the brokers", watch.stop)
        try:
            query = writer.start()
        except BaseException as e:
            self._shut_down(e, [("close the target", target.close), withdraw, unwatch])
            raise
        tracker.query_id = str(query.id)
        self._started, self._shown = time.monotonic(), 0
        ui = self.spark.sparkContext.uiWebUrl
        log.info(
            "%s: started query %s (run %s), checkpoint %s, %s%s",
            self.spec.name,
            query.id,
            query.runId,
            self.checkpoint,
            "available-now" if available_now else "continuous",
            f"; Spark UI {ui}" if ui else "",
        )
        failure: BaseException | None = None
        try:
            sink.bind(query, caps.check)
            ended_by = self._await(query, tracker, sink, available_now, idle)
            caps.check(last_progress(query))  # the last batch has no next one to check it
        except WindowStateCapHit as e:
            failure = PipelineFailed(f"pipeline {self.spec.name} failed: {e}")
            raise failure from e
        except BaseException as e:
            failure = e
            raise
        finally:
            self._shut_down(
                failure,
                [
                    ("stop the query", lambda: stop_if_active(query)),
                    withdraw,
                    unwatch,
                    ("read the last progress", lambda: tracker.poll(query)),
                    ("close the target", target.close),
                ],
            )
        self._show_progress(tracker, final=True)
        summary = tracker.summary(query.id, target.version(), ended_by)
        SUMMARY_LOG.info("%s", summary.describe())
        return summary

    def _start_sources_at(self, instant: datetime) -> None:
        """A generation started by ``flow-jobs reset --from``, on a fresh checkpoint:
        every source starts at ``instant`` instead of its ``starting_offsets`` (which the
        fingerprint leaves out: only a fresh checkpoint reads it), so compile again."""
        log.info(
            "%s: a replay from %s: the fresh checkpoint starts every source there",
            self.spec.name,
            instant.isoformat(),
        )
        self.spec = self.spec.starting_at(instant)
        self.compiled = compile_pipeline(self.spark, self.spec, self.dead_letters, self.checkpoint)

    def _shut_down(
        self, failure: BaseException | None, steps: list[tuple[str, Callable[[], object]]]
    ) -> None:
        """Run every clean-up step. With a failure in flight, a step's own error is
        logged and never replaces the original; otherwise the first one is raised."""
        first: Exception | None = None
        for what, step in steps:
            try:
                step()
            except Exception as e:
                if failure is None and first is None:
                    first = e
                else:
                    log.warning("%s: could not %s: %s", self.spec.name, what, e)
        if first is not None:
            raise first

    def _idle_sources(self, available_now: bool) -> IdleSources | None:
        """Runs over several sources track idleness (runtime.idleness): by the clock in
        continuous runs, by what each source has to read in a replay."""
        path = self.compiled.idle_file
        if path is None:
            return None
        # set by a first stage that follows idle sources: it has ``source_idleness_ms``
        timing: Any = self.spec.transform.stages()[0]
        names = [s.name for s in self.spec.sources]
        idle = IdleSources(path, names, timing.watermark_delay_ms, timing.source_idleness_ms)
        if not available_now:
            return idle
        idle.publish_replay(replay_targets(self.spec, self.checkpoint))
        return None  # nothing more to publish while it runs

    def _await(
        self,
        query: StreamingQuery,
        tracker: ProgressTracker,
        sink: WindowBatchSink,
        available_now: bool,
        idle: IdleSources | None = None,
    ) -> str:
        every_s = self.spec.runtime.idle_note_ms / 1000
        heartbeat = None if available_now else IdleHeartbeat(tracker, every_s)
        try:
            while not query.awaitTermination(0.5):
                tracker.poll(query)
                self._show_progress(tracker)
                if heartbeat is not None:
                    heartbeat.tick(lambda: last_progress(query), lambda: _busy(query))
                if idle is not None:  # after the poll: it fed idle the new reports
                    idle.publish()
                # Between micro-batches on the driver: Spark plans a batch (cached lookups
                # included) before its foreachBatch runs, so refreshes run on their own clock.
                for lookup in self.compiled.lookups:
                    lookup.refresh_if_due(self.spark)
                if self.stop_event.is_set():
                    log.info("%s: stop requested; finishing the batch in flight", self.spec.name)
                    with quiet_expected_stop(self.spark):
                        sink.request_stop()
                        await_trigger_end(query)
                        query.stop()
                    return "stopped on request"
        except StreamingQueryException as e:
            if self.stop_event.is_set() and StopRequested.__name__ in str(e):
                return "stopped on request"
            where = describe_batch_in_flight(self.checkpoint, self.spec)
            at = f" in {where}" if where else ""
            raise PipelineFailed(f"pipeline {self.spec.name} failed{at}: {_one_line(e)}") from e
        return "input drained" if available_now else "query ended"


def _busy(query: StreamingQuery) -> bool:
    """Whether the query runs a batch, or its sources have records for the next."""
    status = query.status
    return bool(status.get("isTriggerActive") or status.get("isDataAvailable"))


def _root_message(error: StreamingQueryException) -> str:
    """The line a user needs: our own raised message, or the innermost Python error,
    without Spark's wrapping (query ids, "An exception was raised by the Python Proxy")."""
    text = error.getMessage() if hasattr(error, "getMessage") else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if "[USER_RAISED_EXCEPTION]" in line or "cap hit:" in line:
            return _unwrap(line)
    python_errors = [line for line in lines if _PYTHON_ERROR.match(line)]
    if python_errors:
        return _OUR_ERROR_CLASS.sub("", python_errors[-1])
    return _unwrap(lines[0]) if lines else repr(error)


def _one_line(error: StreamingQueryException) -> str:
    return redact(_root_message(error))


def _unwrap(line: str) -> str:
    return _STREAM_FAILED.sub("", line)
