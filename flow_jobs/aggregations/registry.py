"""The aggregators by name (``AGGREGATORS``): the names ``agg`` takes in a spec, and what
compiles each aggregation. ``register_aggregator`` adds one from outside flow_jobs."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, NumericType

from flow_jobs.aggregations.avg import AvgAggregator
from flow_jobs.aggregations.base import AggregationInput, Aggregator, NativeAggregate, NativeWindow
from flow_jobs.aggregations.collect import CollectAggregator
from flow_jobs.aggregations.count import CountAggregator
from flow_jobs.aggregations.count_distinct import CountDistinctAggregator
from flow_jobs.aggregations.extremes import ExtremeAggregator
from flow_jobs.aggregations.positional import PositionalAggregator
from flow_jobs.aggregations.reduce import ReduceAggregator
from flow_jobs.aggregations.sum import SumAggregator
from flow_jobs.errors import PlanError
from flow_jobs.partial_parts import PARTIAL_PARTS
from flow_jobs.spec.aggregation import AGGREGATOR_RULES
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
AGGREGATOR_RULES.update(AGGREGATORS)


def register_aggregator(aggregator: Aggregator) -> Aggregator:
    """Make ``aggregator`` a name ``agg`` takes, from outside flow_jobs: a window then
    compiles it (and pre-aggregates it, through its ``partial_parts``) as a built-in one.
    Register it before a spec naming it is validated; its partial parts must be
    registered (``flow_jobs.partial_parts.register_part``). Registering the
    same class's aggregator again (its module imported again) replaces it."""
    known = AGGREGATORS.get(aggregator.name)
    if known is not None and _origin(known) != _origin(aggregator):
        raise ValueError(
            f"aggregator {aggregator.name!r} is {_origin(known)} already; give "
            f"{_origin(aggregator)} another name"
        )
    for part in aggregator.partial_parts or ():
        if PARTIAL_PARTS.get(part.name) is not part:
            raise ValueError(
                f"{aggregator.name} merges partial part {part.name!r}, which is not the "
                "part registered by that name: register it first (register_part)"
            )
    AGGREGATORS[aggregator.name] = aggregator
    AGGREGATOR_RULES[aggregator.name] = aggregator  # the names a spec's agg takes
    return aggregator


def _origin(aggregator: Aggregator) -> str:
    return f"{type(aggregator).__module__}.{type(aggregator).__qualname__}"


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
