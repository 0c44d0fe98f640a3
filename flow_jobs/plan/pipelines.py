"""What the core compiles a spec into, and the registry of ``[transform]``'s first
stages: the core asks ``PIPELINES`` for the stage a spec starts with (its ``STAGE``:
``"window"``, ``"join"``, ``"temporal_join"``) and never names one.

A pipeline stage provides, in one ``register_pipeline`` call, ``compile(PipelineInput)
-> CompiledPipeline``: the sources read (``flow_jobs.plan.sources.compile_source``),
their operators applied (``flow_jobs.operators.registry``), the stage and what follows
it (a window after a join) built, and ``validate --plan``'s lines of each part. Its spec
model is a ``flow_jobs.spec.stages.Stage``; its inspect reading is registered with
``flow_jobs.runtime.readings.register_reading`` under the same name. A built-in
registers both with ``flow_jobs.lazy.on_call``: loading the registries imports neither.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flow_jobs.plugins import Registry

if TYPE_CHECKING:  # the registry loads with the others: nothing of Spark's plans here
    from pyspark.sql import DataFrame, SparkSession

    from flow_jobs.dead_letters import DeadLetterTable
    from flow_jobs.io.checkpoint_files import CheckpointFiles
    from flow_jobs.plan.lookups import Lookup
    from flow_jobs.plan.windows import CompiledWindow
    from flow_jobs.plan_lines import Described, PlanLine
    from flow_jobs.spec.models import PipelineSpec

__all__ = [
    "PIPELINES",
    "CompiledPipeline",
    "PipelineInput",
    "register_pipeline",
    "windowed",
]


@dataclass(frozen=True)
class CompiledPipeline:
    spec: PipelineSpec
    frame: DataFrame
    output_mode: str
    #: the compiled parts in pipeline order, each saying its lines (``describe``)
    parts: tuple[Described, ...]
    natural_key: tuple[str, ...]  # what the target writes on
    nullable_key: tuple[str, ...]  # natural-key columns that may hold NULL
    lookups: tuple[Lookup, ...] = ()
    #: where the run publishes idle sources for their readers (None: no idleness)
    idle_file: str | None = None
    #: the window merges partials from the reader (its state holds partials' buffers)
    pre_aggregates: bool = False
    #: what the run does to the checkpoint before the query starts on it (e.g. mark
    #: that its state merges partials: ``flow_jobs.combine.decide.mark_checkpoint``)
    before_start: tuple[Callable[[CheckpointFiles], None], ...] = ()
    #: each output row is written once in a checkpoint's lineage, never again (a window
    #: emitted "final", a join's rows): a batch of them only inserts
    #: (``flow_jobs.runtime.sink.inserts_only``)
    writes_new_rows: bool = False

    def describe(self) -> list[PlanLine]:
        """``validate --plan``'s lines of the compiled parts (the runner adds the dead
        letters', the sink's and the target's)."""
        return [line for part in self.parts for line in part.describe()]


@dataclass(frozen=True)
class PipelineInput:
    """What the core hands a stage's compile step.

    Attributes
    ----------
    spark : SparkSession
        This pipeline's own session (the sources' temp views are registered in it).
    spec : PipelineSpec
        The pipeline.
    dead_letters : DeadLetterTable
        Where bad and late records go (``dead_letters.tap(...)``).
    checkpoint : str or None
        The query's checkpoint, where the sources read each batch's watermark and the
        run publishes idle sources (None: a plan without a run).
    per_source_watermarks : bool
        False takes a window's watermark after the SQL, as before per-source
        watermarks (``make bench`` measures what they cost).
    """

    spark: SparkSession
    spec: PipelineSpec
    dead_letters: DeadLetterTable
    checkpoint: str | None = None
    per_source_watermarks: bool = True


#: The compile step of each first stage of ``[transform]``, by ``Stage.STAGE``.
PIPELINES: Registry[Callable[[PipelineInput], CompiledPipeline]] = Registry("pipeline stage")


def register_pipeline(
    stage: str, compile: Callable[[PipelineInput], CompiledPipeline]
) -> Callable[[PipelineInput], CompiledPipeline]:
    """Register how a pipeline whose ``[transform]`` starts with ``stage`` compiles."""
    return PIPELINES.register(stage, compile)


def windowed(
    spec: PipelineSpec,
    compiled: CompiledWindow,
    parts: Sequence[Described],
    lookups: Sequence[Lookup] = (),
    idle: str | None = None,
    pre_aggregates: bool = False,
    before_start: Sequence[Callable[[CheckpointFiles], None]] = (),
) -> CompiledPipeline:
    """A pipeline ending in a window (over sources or a join): keyed by window and
    group; ``parts``: what compiled, in order (the window last)."""
    columns = compiled.frame.columns
    assert columns == spec.output_columns(), (columns, spec.output_columns())
    return CompiledPipeline(
        spec,
        compiled.frame,
        compiled.output_mode,
        tuple(parts),
        tuple(spec.natural_key()),
        tuple(spec.window.group_by),
        tuple(lookups),
        idle,
        pre_aggregates,
        tuple(before_start),
        writes_new_rows=spec.window.emit == "final" and not spec.window.reopens,
    )
