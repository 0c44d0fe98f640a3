"""Per-source stream operators: what a kind of ``[[transform.operators]]`` provides,
and the registry the core compiles them through.

An operator runs on one source's view, after the source (its late rows out, its
watermark taken) and before ``[transform].sql``, the window or the join. The core
(``flow_jobs.plan.windowed``, ``flow_jobs.joins.compile``) asks ``OPERATORS`` for the kind
a spec names, hands its compile step an ``OperatorInput`` and puts what it returns in
the plan; it never names a kind. The built-in ``dedup`` registers itself here like any
plug-in (``flow_jobs.dedup``; ``[[transform.dedup]]`` is its own table).

What an operator provides, in one ``register_operator`` call:

* ``kind``: the name a spec's ``kind = "..."`` gives;
* ``spec_model``: a subclass of ``flow_jobs.spec.operators.OperatorSpec`` with its own
  keys and rules (``[[transform.operators]]`` tables of its kind are read with it); its
  class variables say what the core checks for it (``EVENT_TIME``, ``ONCE_PER_SOURCE``,
  ``SAFE_KEYS``), its ``columns()`` the source columns it reads, its ``fingerprint()``
  what a checkpoint depends on;
* ``compile``: ``(spec, OperatorInput) -> Compiled``, the view with the operator
  applied (``.frame``) and its ``validate --plan`` lines (``.describe()``). It runs on
  the driver, once per query: whatever it hands Spark (a UDF, a
  ``StatefulProcessor``) must be importable on the executors (``flow-jobs pack
  --include``).

Examples
--------
A stateless operator that keeps the rows where a column is at least a threshold::

    from dataclasses import dataclass
    from typing import Literal

    from pyspark.sql import DataFrame, functions as F

    from flow_jobs.operators.registry import OperatorInput, register_operator
    from flow_jobs.plan_lines import PlanLine
    from flow_jobs.spec.operators import OperatorSpec

    class AtLeast(OperatorSpec):
        kind: Literal["at_least"]
        column: str
        threshold: float

    @dataclass(frozen=True)
    class CompiledAtLeast:
        frame: DataFrame
        line: PlanLine

        def describe(self) -> list[PlanLine]:
            return [self.line]

    def compile_at_least(spec: AtLeast, given: OperatorInput) -> CompiledAtLeast:
        frame = given.view.where(F.col(spec.column) >= spec.threshold)
        return CompiledAtLeast(frame, PlanLine(f"at_least {given.source}", "a filter"))

    register_operator("at_least", AtLeast, compile_at_least)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from flow_jobs.plugins import Registry
from flow_jobs.spec.operators import OPERATOR_SPECS, OperatorSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from flow_jobs.dead_letters import DeadLetterTap
    from flow_jobs.plan_lines import PlanLine

__all__ = ["OPERATORS", "Compiled", "Operator", "OperatorInput", "register_operator"]


class Compiled(Protocol):
    """What an operator's compile step returns."""

    @property
    def frame(self) -> DataFrame:
        """The source's view with the operator applied: its columns (the view's
        columns, hidden ones included, unless the operator means to change them) go
        on to the SQL, the window or the join."""
        ...

    def describe(self) -> Sequence[PlanLine]:
        """Its ``validate --plan`` lines (``flow_jobs.plan_lines``), from what it built."""
        ...


@dataclass(frozen=True)
class OperatorInput:
    """What the core hands an operator's compile step.

    Attributes
    ----------
    view : DataFrame
        The source's view as the operators before it left it (late rows out).
    source : str
        The source's name.
    key : str
        The operator's spec key (``transform.operators[1]``), for ``PlanError``.
    time_column : str
        The event-time column the pipeline names (the window's or the join side's).
    time : Column or None
        The source's event time, as a TIMESTAMP; None where the source's view has no
        watermark of its own (``[transform].sql`` computes the event time: an operator
        that orders by event time refuses the plan).
    watermarked : str or None
        The view's own watermarked TIMESTAMP column (a join side's), which must stay
        Spark's event time after the operator; None: the view's watermark is the
        source's (on its own event-time column), and an operator with an event-time
        output of its own adds it.
    watermark_delay_ms : int
        How far the source's watermark runs behind its highest event time.
    topics : tuple of str
        Every source's topic, in the spec's order (a record's Kafka position is its
        topic's index, partition and offset: ``flow_jobs.plan.ordering``).
    tap : callable
        ``tap(part)``: a dead-letter tap of the source's records under ``part`` (e.g.
        ``"duplicates"``), for the records the operator takes out with their bytes
        (``flow_jobs.dead_letters.divert``).
    """

    view: DataFrame
    source: str
    key: str
    time_column: str
    time: Column | None
    watermarked: str | None
    watermark_delay_ms: int
    topics: tuple[str, ...]
    tap: Callable[[str], DeadLetterTap]


@dataclass(frozen=True)
class Operator:
    """One operator kind: its spec model and its compile step."""

    kind: str
    spec_model: type[OperatorSpec]
    compile: Callable[[Any, OperatorInput], Compiled]


#: Every operator kind, by ``kind``.
OPERATORS: Registry[Operator] = Registry("operator kind")


def register_operator(
    kind: str, spec_model: type[OperatorSpec], compile: Callable[[Any, OperatorInput], Compiled]
) -> Operator:
    """Register an operator kind: ``[[transform.operators]]`` tables with ``kind`` are
    read with ``spec_model``, and each compiles with ``compile(spec, OperatorInput)``.
    Run when the operator's module is imported (a spec's ``plugins``, or an entry
    point: ``flow_jobs.plugins``)."""
    OPERATOR_SPECS.register(kind, spec_model)  # first: a kind taken twice names both modules
    return OPERATORS.register(kind, Operator(kind, spec_model, compile))


def compile_operator(spec: OperatorSpec, given: OperatorInput) -> Compiled:
    """``spec``'s operator on ``given.view``."""
    return OPERATORS.get(spec.kind).compile(spec, given)
