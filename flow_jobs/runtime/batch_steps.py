"""Steps each micro-batch's rows go through on the driver, after the query computed them
and before the target writes them (``flow_jobs.runtime.sink.BatchSink``), and their
registry: the core asks ``BATCH_STEPS`` which steps a spec has and names none.

A batch step provides, in one ``register_batch_step`` call, ``plan(spec)``: None when
the spec does not use it, else a ``BatchStep``, whose ``describe()`` are its ``validate
--plan`` lines, ``deletes_within`` tells the target which rows a batch may take back
(``flow_jobs.sinks.base.Sink.ranked``), and ``start(store, state_version)`` gives the
function the sink calls on each batch. ``[transform.window.top_n]`` is one
(``flow_jobs.top_n``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from flow_jobs.plugins import Registry

if TYPE_CHECKING:
    import pyarrow as pa

    from flow_jobs.ledger.store import LedgerStore
    from flow_jobs.plan_lines import PlanLine
    from flow_jobs.spec.models import PipelineSpec

__all__ = ["BATCH_STEPS", "BatchStep", "StepRun", "batch_steps", "register_batch_step"]

#: ``run(rows, closed_before)``: the batch's rows after the step; ``closed_before`` is
#: the previous batch's watermark (None before the first).
StepRun = Callable[["pa.Table", "datetime | None"], "pa.Table"]


class BatchStep(Protocol):
    """One step a spec's micro-batches go through."""

    @property
    def deletes_within(self) -> tuple[str, ...] | None:
        """Columns whose every value a batch touches the batch holds whole: the target
        deletes the rows of those it no longer holds (None: it deletes none)."""
        ...

    def describe(self) -> Sequence[PlanLine]:
        """Its ``validate --plan`` lines."""
        ...

    def start(self, store: LedgerStore, state_version: int) -> StepRun:
        """The step as one run of the pipeline applies it (``store``: the ledger, for
        what it keeps between batches, per checkpoint generation ``state_version``)."""
        ...


#: Each batch step's ``plan(spec)``, by name.
BATCH_STEPS: Registry[Callable[[PipelineSpec], BatchStep | None]] = Registry("batch step")


def register_batch_step(
    name: str, plan: Callable[[PipelineSpec], BatchStep | None]
) -> Callable[[PipelineSpec], BatchStep | None]:
    """Register a batch step: ``plan(spec)`` is None where ``spec`` does not use it."""
    return BATCH_STEPS.register(name, plan)


def batch_steps(spec: PipelineSpec) -> list[BatchStep]:
    """The steps ``spec``'s micro-batches go through, in registration order."""
    return [step for _, plan in BATCH_STEPS.items() if (step := plan(spec)) is not None]
