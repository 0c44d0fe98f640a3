"""Aggregators, one module each: ``count``, ``sum``, ``avg``, ``extremes`` (min, max),
``positional`` (first, last), ``count_distinct``, ``collect``, ``reduce``.

Each aggregator is one class (``flow_jobs.aggregations.base.Aggregator``) owning every
part of it: its result types (the same in both engines), its native compile (Spark's
built-in functions inside the streaming aggregation, which aggregates partially before
the shuffle and keeps its buffers in the state store), its vectorised state-API compute
(a ``flow_jobs.operators.ranges.WindowAggregator`` over many windows at once), the parts
of the Kafka reader's partial aggregates it merges when a window pre-aggregates
(``flow_jobs.plan.combine``), and how ``inspect`` reads an open native window's value
from Spark's buffers, plain or merging partials (``state_functions``, ``open_value``).
``inspect`` computes state-API windows with the same ``WindowAggregator`` the operator
runs.

NULL handling is SQL's: ``count`` (no column) counts rows, everything else skips NULL
values, an aggregate over no non-NULL value is NULL (``count(col)`` is 0).

A new aggregator is one module and its entry in ``AGGREGATORS``; its name is then valid
for ``agg`` in the spec, and ``tests/test_aggregators.py`` fails while it lacks a part.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, NumericType

from flow_jobs.aggregations.avg import AvgAggregator
from flow_jobs.aggregations.base import (
    NOT_DECODED,
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    NotDecoded,
    StateBuffer,
)
from flow_jobs.aggregations.collect import CollectAggregator
from flow_jobs.aggregations.count import CountAggregator
from flow_jobs.aggregations.count_distinct import CountDistinctAggregator
from flow_jobs.aggregations.extremes import ExtremeAggregator
from flow_jobs.aggregations.positional import PositionalAggregator
from flow_jobs.aggregations.reduce import ReduceAggregator
from flow_jobs.aggregations.sum import SumAggregator
from flow_jobs.errors import PlanError
from flow_jobs.spec.models import Aggregation

AGGREGATORS: dict[str, Aggregator] = {
    a.name: a
    for a in (
        CountAggregator(),
        SumAggregator(),
        ExtremeAggregator(largest=False),
        ExtremeAggregator(largest=True),
        AvgAggregator(),
        PositionalAggregator(last=False),
        PositionalAggregator(last=True),
        CountDistinctAggregator(),
        CollectAggregator(),
        ReduceAggregator(),
    )
}


def aggregation_input(agg: Aggregation, index: int, frame: DataFrame) -> AggregationInput:
    key = f"transform.window.aggregations[{index}]"
    visible = tuple(c for c in frame.columns if not c.startswith("__flow"))
    if agg.column is None:
        return AggregationInput(agg, index, None, None, visible)
    if agg.column not in frame.columns:
        raise PlanError(
            f"{key}.column",
            f"{agg.column!r} is not a column of the window's input (columns: {', '.join(visible)})",
        )
    data_type = frame.schema[agg.column].dataType
    if AGGREGATORS[agg.agg].numeric_only and not isinstance(data_type, NumericType):
        raise PlanError(
            f"{key}.column",
            f"{agg.agg} needs a numeric column; {agg.column!r} is {data_type.simpleString()}",
        )
    return AggregationInput(agg, index, F.col(agg.column), data_type, visible)


def result_types(a: AggregationInput) -> list[DataType]:
    return AGGREGATORS[a.spec.agg].result_types(a)


def native_aggregate(a: AggregationInput, w: NativeWindow) -> NativeAggregate:
    return AGGREGATORS[a.spec.agg].native(a, w)


__all__ = [
    "AGGREGATORS",
    "NOT_DECODED",
    "AggregationInput",
    "Aggregator",
    "NativeAggregate",
    "NativeWindow",
    "NotDecoded",
    "StateBuffer",
    "aggregation_input",
    "native_aggregate",
    "result_types",
]
