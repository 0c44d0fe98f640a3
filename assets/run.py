"""Running a pipeline inside a Dagster step: the query on a worker thread, the step's
thread waiting where Dagster can deliver a termination, progress into the run's logs.

* ``available_now`` processes what is in Kafka, emits what the watermark closes and
  finishes (for schedules and sensors); ``continuous`` runs until the run is terminated
  from the UI, which stops the query after the batch in flight.
* One run per pipeline: the runner holds the pipeline's lock in the state store, so a
  second run fails at once (``PipelineBusy``, a ``Failure`` naming the holder).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from dagster import AssetExecutionContext, Config, DagsterExecutionInterruptedError, Failure

from flow_jobs.io.checkpoint_claim import IncompatibleSpec
from flow_jobs.ledger.run_lock import PipelineBusy
from flow_jobs.ledger.store import refuse_incompatible
from flow_jobs.runtime.display import Lines
from flow_jobs.secrets import RedactingFilter
from flow_jobs.spec.models import PipelineSpec

#: How often a run's logs get a progress line (records done of the total, rate, ETA).
PROGRESS_INTERVAL_S = 10.0


class PipelineRunConfig(Config):
    mode: Literal["available_now", "continuous"] = "available_now"


def run_config(name: str, mode: str = "available_now") -> dict[str, Any]:
    """The run config that starts the pipeline asset ``name`` in ``mode``."""
    return {"ops": {name: {"config": {"mode": mode}}}}


@contextmanager
def logs_to(dagster_log: Any) -> Iterator[None]:
    """flow-jobs's progress lines (one per micro-batch) into the run's Dagster logs."""

    class Forward(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            level = "warning" if record.levelno >= logging.WARNING else "info"
            getattr(dagster_log, level)(record.getMessage())

    handler = Forward(logging.INFO)
    handler.addFilter(RedactingFilter())  # Dagster's event log keeps what it is given
    root = logging.getLogger("flow_jobs")
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def refuse_incompatible_spec(spec: PipelineSpec, spec_path: Path | None = None) -> None:
    """A spec its checkpoint cannot resume under fails the step before Spark starts,
    with the reset that works for it (``--spec`` the file Dagster loaded)."""
    try:
        refuse_incompatible(spec, str(spec_path) if spec_path else None)
    except IncompatibleSpec as e:  # nothing ran: a retry would be refused the same way
        raise Failure(description=str(e), allow_retries=False) from None


def run_pipeline(
    context: AssetExecutionContext,
    spec: PipelineSpec,
    mode: str,
    spark: Any,
    spec_path: Path | None = None,
) -> tuple[Any, Any]:
    """Run the pipeline to its end (or the run's termination): (runner, run summary)."""
    from flow_jobs.runtime.runner import PipelineRunner

    stop = threading.Event()
    path = str(spec_path) if spec_path else None
    runner = PipelineRunner(spec, spark, stop_event=stop, spec_path=path)
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["summary"] = runner.run(
                available_now=mode == "available_now",
                # the figures `flow-jobs run` shows, as lines in the run's logs
                display=Lines(context.log.info, interval_s=PROGRESS_INTERVAL_S),
            )
        except BaseException as e:  # re-raised in the step's thread below
            outcome["error"] = e

    with logs_to(context.log):
        worker = threading.Thread(target=work, name=f"flow-jobs-{spec.name}", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.5)  # Dagster delivers a termination here, between joins
        except (DagsterExecutionInterruptedError, KeyboardInterrupt):
            context.log.info("run terminated: stopping the query after the batch in flight")
            stop.set()
            worker.join()
            raise
    if isinstance(outcome.get("error"), PipelineBusy | IncompatibleSpec):
        # A clear step failure, not a stack trace: nothing ran, nothing to retry now.
        raise Failure(description=str(outcome["error"]), allow_retries=False) from None
    if "error" in outcome:
        raise outcome["error"]
    return runner, outcome["summary"]
