"""Aggregators: each one a small named unit with the Spark expression it compiles to.

All run as Spark built-in aggregate functions inside the native streaming aggregation
(partial aggregation before the shuffle, state in the state store). NULL handling is
SQL's: ``count`` (no column) counts rows, everything else skips NULL values, and an
aggregate over no non-NULL value is NULL (``count(col)`` is 0).

``first`` / ``last`` are by event time, not arrival order: the value of the row with the
smallest / largest event time among rows whose value is not NULL. Spark's own
``first()`` / ``last()`` depend on the order rows reach a task, which a shuffle does not
keep, so they compile to ``min`` / ``max`` over ``struct(event_time, value)``. Ties on
the event time go to the smallest (first) or largest (last) value, so a replay always
gives the same answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType

from flow_jobs.plan.errors import PlanError
from flow_jobs.spec.models import Aggregation

Build = Callable[[Column | None, Column], Column]


@dataclass(frozen=True)
class Aggregator:
    name: str
    compiles_to: str
    build: Build
    numeric_only: bool = False


def _by_event_time(pick: Callable[[Column], Column]) -> Build:
    def build(value: Column | None, event_time: Column) -> Column:
        assert value is not None
        ordered = F.when(value.isNotNull(), F.struct(event_time.alias("t"), value.alias("v")))
        return pick(ordered).getField("v")

    return build


AGGREGATORS: dict[str, Aggregator] = {
    a.name: a
    for a in (
        Aggregator(
            "count",
            "count(1), or count(col) with a column",
            lambda c, _t: F.count(F.lit(1)) if c is None else F.count(c),
        ),
        Aggregator("sum", "sum(col)", lambda c, _t: F.sum(c), numeric_only=True),
        Aggregator("min", "min(col)", lambda c, _t: F.min(c)),
        Aggregator("max", "max(col)", lambda c, _t: F.max(c)),
        Aggregator("avg", "avg(col)", lambda c, _t: F.avg(c), numeric_only=True),
        Aggregator("first", "min(struct(event_time, col)).col", _by_event_time(F.min)),
        Aggregator("last", "max(struct(event_time, col)).col", _by_event_time(F.max)),
    )
}


def compile_aggregation(
    agg: Aggregation, index: int, frame: DataFrame, event_time: Column
) -> Column:
    key = f"transform.window.aggregations[{index}]"
    aggregator = AGGREGATORS.get(agg.agg)
    if aggregator is None:
        raise PlanError(f"{key}.agg", f"{agg.agg!r} has no compiler")
    value = None
    if agg.column is not None:
        if agg.column not in frame.columns:
            raise PlanError(
                f"{key}.column",
                f"{agg.column!r} is not a column of the window's input "
                f"(columns: {', '.join(c for c in frame.columns if not c.startswith('__'))})",
            )
        data_type = frame.schema[agg.column].dataType
        if aggregator.numeric_only and not isinstance(data_type, NumericType):
            raise PlanError(
                f"{key}.column",
                f"{agg.agg} needs a numeric column; {agg.column!r} is {data_type.simpleString()}",
            )
        value = F.col(agg.column)
    return aggregator.build(value, event_time).alias(agg.as_)
