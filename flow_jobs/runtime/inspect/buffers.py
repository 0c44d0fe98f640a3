"""What a native window's state holds, as its compiled plan says (``flow-jobs inspect``).

``inspect`` compiles the pipeline as its run does, on the same checkpoint, so with the
same aggregation: plain, or merging the Kafka reader's partials where the checkpoint is
marked for it (``flow_jobs.combine.decide``). In Spark's analyzed plan of the window's
aggregation, each of the spec's aggregations is one expression (its hidden column,
``AggregationInput.hidden``) over one or more Spark aggregate functions. Spark keeps one
buffer per semantically distinct function, in the order the functions first appear (its
``PhysicalAggregation``), so aggregations that compile to the same function share its
buffer: ``count(x)`` and the count in ``avg(x)`` when merging partials, or the same
aggregation twice. A window's state value holds those buffers in that order, after a
session window's keys and session. Each aggregator then reads its own
(``Aggregator.open_value``), once the plan's functions are the ones it expects there
(``Aggregator.state_functions``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from flow_jobs.aggregations import (
    AGGREGATORS,
    NOT_DECODED,
    AggregationInput,
    NotDecoded,
    StateBuffer,
)
from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.locations import local_path
from flow_jobs.plan.compile import compile_pipeline
from flow_jobs.runtime.inspect.report import plain
from flow_jobs.runtime.session import pipeline_session
from flow_jobs.spec.models import PipelineSpec

Field = tuple[str, str]  # a buffer field's name and Spark type (``simpleString``)


@dataclass(frozen=True)
class BufferFunction:
    """One Spark aggregate function whose buffer the state keeps: its SQL name and its
    buffer's fields."""

    name: str
    fields: tuple[Field, ...]


@dataclass
class NativeState:
    """The compiled plan's account of a native window's state value: the functions'
    buffers in their order, which of them each aggregation's expression holds, and
    whether the window merges the reader's partials."""

    merging: bool
    functions: tuple[BufferFunction, ...]
    inputs: tuple[AggregationInput, ...]  # the spec's aggregations, as compiled
    #: per aggregation: its functions, each once, in the order its expression names them
    uses: tuple[tuple[int, ...], ...]
    #: by the aggregation's ``as``: why it shows "n/a" (the report's note); those the
    #: plan already rules out are not read at all
    unread: dict[str, str] = field(default_factory=dict)
    _planned: set[str] = field(default_factory=set, init=False, repr=False)

    def __post_init__(self) -> None:
        for a, used in zip(self.inputs, self.uses, strict=True):
            unit = AGGREGATORS[a.spec.agg]
            held = tuple(self.functions[j].name for j in used)
            if held != unit.state_functions(self.merging):
                self._planned.add(a.spec.as_)
                self.unread[a.spec.as_] = (
                    f"the compiled plan keeps {', '.join(held) or 'no function'} where "
                    f"{a.spec.agg} reads {', '.join(unit.state_functions(self.merging))}"
                )

    @property
    def fields(self) -> list[Field]:
        return [f for function in self.functions for f in function.fields]

    def mismatch(self, value: Sequence[Field]) -> str | None:
        """Why the state's value fields do not end in the plan's buffers (None: they
        do; a session window's value starts with its keys and session)."""
        fields = self.fields
        if list(value[len(value) - len(fields) :]) == fields:
            return None
        return (
            f"the state's aggregation buffers ({_names(value)}) are not the compiled "
            f"plan's ({_names(fields)}): the window's aggregations changed since the "
            "checkpoint ran; inspect it with the spec it ran with"
        )

    def aggregates(self, value: Sequence[Any]) -> dict[str, Any]:
        """Each aggregation's open value, by its ``as``, from a state value whose fields
        ``mismatch`` found as the plan says."""
        at, buffers = len(value) - len(self.fields), []
        for function in self.functions:
            names = [name for name, _ in function.fields]
            buffers.append(StateBuffer(function.name, dict(zip(names, value[at:], strict=False))))
            at += len(names)
        out = {}
        for a, used in zip(self.inputs, self.uses, strict=True):
            name = a.spec.as_
            out[name] = NOT_DECODED
            if name in self._planned:
                continue
            try:
                unit = AGGREGATORS[a.spec.agg]
                out[name] = plain(unit.open_value(a, [buffers[j] for j in used], self.merging))
            except NotDecoded as e:
                self.unread.setdefault(name, str(e))
        return out


def native_state(spark: SparkSession, spec: PipelineSpec, checkpoint: str) -> NativeState:
    """The window's state as the pipeline compiles on ``checkpoint`` (in a session of its
    own, as a run's: its temporary views stay there)."""
    session = pipeline_session(
        spark, spec.spark, local_checkpoint=local_path(checkpoint) is not None
    )
    dead_letters = DeadLetterTable(
        spec.dead_letter_path(), spec.name, storage_options=spec.dead_letter_storage_options()
    )
    compiled = compile_pipeline(session, spec, dead_letters, checkpoint)
    aggregate = _window_aggregate(compiled.frame._jdf.queryExecution().analyzed())
    distinct: list[Any] = []  # Spark's AggregateExpressions, in the state's order
    by_column: dict[str, tuple[int, ...]] = {}
    for named in _items(aggregate.aggregateExpressions()):
        held = (_index(distinct, e) for e in _aggregate_expressions(named))
        # each buffer once: an expression may name a function twice (a count in a
        # condition and in a divisor), whose buffer the state holds once
        by_column[named.name()] = tuple(dict.fromkeys(held))
    schema = StructType.fromJson(json.loads(aggregate.child().schema().json()))
    inputs = tuple(
        AggregationInput(
            a, i, None, schema[a.column].dataType if a.column in schema.names else None, ()
        )
        for i, a in enumerate(spec.window.aggregations)
    )
    missing = [a.hidden for a in inputs if a.hidden not in by_column]
    if missing:
        raise LookupError(f"the compiled window aggregates no column {missing[0]}")
    return NativeState(
        compiled.pre_aggregates,
        tuple(_function(e) for e in distinct),
        inputs,
        tuple(by_column[a.hidden] for a in inputs),
    )


# -- Spark's analyzed plan, through py4j -----------------------------------------------


def _items(seq: Any) -> list[Any]:
    """A Scala ``Seq``'s items."""
    return [seq.apply(i) for i in range(seq.size())]


def _window_aggregate(plan: Any) -> Any:
    """The topmost ``Aggregate`` of the plan: the window's (a ``[transform].sql`` below it
    may aggregate too)."""
    level = [plan]
    while level:
        for node in level:
            if node.nodeName() == "Aggregate":
                return node
        level = [child for node in level for child in _items(node.children())]
    raise LookupError("the compiled plan has no aggregation")


def _aggregate_expressions(expression: Any) -> list[Any]:
    """The aggregate expressions inside ``expression``, in Spark's ``collect`` order
    (pre-order); none nests inside another."""
    if expression.getClass().getSimpleName() == "AggregateExpression":
        return [expression]
    return [e for child in _items(expression.children()) for e in _aggregate_expressions(child)]


def _index(distinct: list[Any], expression: Any) -> int:
    """Where Spark keeps ``expression``'s buffer: with a semantically equal one seen
    before (deterministic ones only, as ``EquivalentExpressions`` dedupes), else next."""
    if expression.deterministic():
        for i, seen in enumerate(distinct):
            if seen.semanticEquals(expression):
                return i
    distinct.append(expression)
    return len(distinct) - 1


def _function(expression: Any) -> BufferFunction:
    function = expression.aggregateFunction()
    return BufferFunction(
        function.prettyName(),
        tuple(
            (b.name(), b.dataType().simpleString()) for b in _items(function.aggBufferAttributes())
        ),
    )


def _names(fields: Sequence[Field]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in fields) or "none"
