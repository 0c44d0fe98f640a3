"""Aggregators: each one a small named unit, with what it compiles to in each engine.

Native windows (tumbling, hopping, session) aggregate with Spark's built-in functions
inside the streaming aggregation: partial aggregation before the shuffle, state in the
state store. State-API windows (sliding, count-based) compute the same aggregates in
Python (``flow_jobs.operators.aggregators``), with the result types fixed here so both
engines write the same columns.

NULL handling is SQL's: ``count`` (no column) counts rows, everything else skips NULL
values, an aggregate over no non-NULL value is NULL (``count(col)`` is 0).

``first`` / ``last`` / ``collect`` / ``reduce`` follow event time, not arrival: Spark's
``first()`` / ``last()`` depend on the order rows reach a task, which a shuffle does
not keep, so they compile to ``min`` / ``max`` / ``array_sort`` over
``struct(event_time, value)``: ties on the event time go to the smaller value (native)
or to the earlier arrival (state API, which keeps Kafka positions).

``count_distinct`` approximate is Spark's ``hll_sketch_agg``: an Apache DataSketches
HLL sketch (loadable with the ``datasketches`` package, ``hll_sketch.deserialize``)
whose estimate is the value; ``keep_sketch`` also writes the sketch bytes. Integral
columns are hashed as 64-bit integers, strings as UTF-8, everything else as its STRING
cast, in both engines, so sketches of either engine merge. Exact distinct counts keep
the set in state and fail the query, naming the window, past their cap.

``reduce`` (seed 002) folds a window's values in event-time order: the initializer gets
the first value, the reducer (aggregate, value) for each later one. Native windows keep
the values in state and fold when the window is emitted; state-API windows fold in the
operator. The value is the named column's, or the row as a dict without a column.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DecimalType,
    DoubleType,
    FractionalType,
    IntegralType,
    LongType,
    NumericType,
    StringType,
)

from flow_jobs.operators.aggregators import fold
from flow_jobs.plan.errors import PlanError
from flow_jobs.spec.models import Aggregation, resolve_import_path


@dataclass(frozen=True)
class Aggregator:
    name: str
    native: str  # what it compiles to in a native window
    state: str  # what computes it in a state-API window
    numeric_only: bool = False


AGGREGATORS: dict[str, Aggregator] = {
    a.name: a
    for a in (
        Aggregator("count", "count(1), or count(col)", "prefix sums of row / non-NULL counts"),
        Aggregator("sum", "try_sum(col)", "prefix sums", numeric_only=True),
        Aggregator("min", "min(col)", "range minimum (sparse table)"),
        Aggregator("max", "max(col)", "range maximum (sparse table)"),
        Aggregator("avg", "try_avg(col)", "prefix sums / counts", numeric_only=True),
        Aggregator("first", "min(struct(event_time, col)).col", "range minimum of time rank"),
        Aggregator("last", "max(struct(event_time, col)).col", "range maximum of time rank"),
        Aggregator(
            "count_distinct",
            "hll_sketch_agg + hll_sketch_estimate (exact: size(collect_set), capped)",
            "datasketches hll_sketch HLL_8 (exact: a set, capped)",
        ),
        Aggregator(
            "collect",
            "array_sort(collect_list(struct(event_time, col))).col",
            "values in (event time, arrival) order",
        ),
        Aggregator(
            "reduce",
            "array_sort(collect_list(struct(event_time, value))) folded by a Python UDF",
            "fold in (event time, arrival) order",
        ),
    )
}


@dataclass(frozen=True)
class NativeAggregate:
    """Columns for ``groupBy(...).agg(...)``, then the output columns built from them."""

    aggregates: tuple[Column, ...]
    outputs: tuple[Column, ...]


@dataclass(frozen=True)
class AggregationInput:
    """Where an aggregation's value comes from, checked against the window's input."""

    spec: Aggregation
    index: int
    value: Column | None
    data_type: DataType | None
    row_columns: tuple[str, ...]  # the row's columns (reduce without a column)

    @property
    def key(self) -> str:
        return f"transform.window.aggregations[{self.index}]"

    @property
    def hidden(self) -> str:
        return f"__flow_agg_{self.index}"


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


def hll_item(value: Column, data_type: DataType) -> Column:
    """What a distinct-count sketch hashes (the same rule in both engines)."""
    if isinstance(data_type, IntegralType):
        return value.cast(LongType())
    if isinstance(data_type, BinaryType):
        return F.hex(value)
    return value if isinstance(data_type, StringType) else value.cast(StringType())


def result_types(a: AggregationInput) -> list[DataType]:
    """The output column types, identical in both engines."""
    agg, t = a.spec, a.data_type
    if agg.agg == "count":
        return [LongType()]
    if agg.agg == "count_distinct":
        return [LongType(), BinaryType()][: len(agg.output_names())]
    if agg.agg == "collect":
        assert t is not None
        return [ArrayType(t, containsNull=False)]
    if agg.agg == "reduce":
        return [_parse_type(agg.result_type or "", f"{a.key}.result_type")]
    assert t is not None
    if agg.agg == "sum":
        if isinstance(t, DecimalType):
            return [DecimalType(min(38, t.precision + 10), t.scale)]
        return [DoubleType() if isinstance(t, FractionalType) else LongType()]
    if agg.agg == "avg":
        if isinstance(t, DecimalType):
            return [DecimalType(min(38, t.precision + 4), min(38, t.scale + 4))]
        return [DoubleType()]
    return [t]  # min, max, first, last


def _parse_type(ddl: str, key: str) -> DataType:
    from pyspark.sql.types import _parse_datatype_string

    try:
        return _parse_datatype_string(ddl)
    except Exception as e:
        raise PlanError(key, f"{ddl!r} is not a Spark DDL type: {e}") from None


def resolve_function(path: str, key: str) -> Callable[..., Any]:
    """A user function by import path, shipped to executors by value when it is not an
    installed package (so a module next to the spec works on a cluster too)."""
    try:
        function = resolve_import_path(path)
    except (ImportError, AttributeError, TypeError) as e:
        raise PlanError(key, f"cannot import {path}: {e}") from None
    module = sys.modules.get(function.__module__)
    file = getattr(module, "__file__", "") or ""
    if module is not None and "site-packages" not in file:
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)
    return function


def native_aggregate(
    a: AggregationInput,
    event_time: Column,
    window_bounds: tuple[Column, Column],
    group_by: list[str],
    pipeline: str,
) -> NativeAggregate:
    agg, hidden, value = a.spec, a.hidden, a.value
    if agg.agg == "count":
        expr = F.count(F.lit(1)) if value is None else F.count(value)
        return _simple(expr, hidden, agg.as_)
    if agg.agg in ("sum", "avg"):
        assert value is not None
        # try_: a sum that overflows its type (BIGINT, DECIMAL) is NULL, not a query that
        # fails on every replay (Spark 4's ANSI mode raises ARITHMETIC_OVERFLOW).
        function = F.try_sum if agg.agg == "sum" else F.try_avg
        return _simple(function(value), hidden, agg.as_)
    if agg.agg in ("min", "max"):
        assert value is not None
        return _simple(getattr(F, agg.agg)(value), hidden, agg.as_)
    if agg.agg in ("first", "last"):
        assert value is not None
        ordered = F.when(value.isNotNull(), F.struct(event_time.alias("t"), value.alias("v")))
        pick = F.min if agg.agg == "first" else F.max
        return _simple(pick(ordered).getField("v"), hidden, agg.as_)
    if agg.agg == "count_distinct" and agg.mode == "exact":
        return _exact_distinct(a, window_bounds, group_by, pipeline)
    if agg.agg == "count_distinct":
        assert value is not None and a.data_type is not None
        sketch = F.hll_sketch_agg(hll_item(value, a.data_type), agg.precision).alias(hidden)
        outputs = [F.hll_sketch_estimate(F.col(hidden)).alias(agg.as_)]
        if agg.sketch_column:
            outputs.append(F.col(hidden).alias(agg.sketch_column))
        return NativeAggregate((sketch,), tuple(outputs))
    items = _time_ordered_items(a, event_time)
    if agg.agg == "collect":
        return NativeAggregate(
            (items.alias(hidden),),
            (F.transform(F.col(hidden), lambda x: x.getField("v")).alias(agg.as_),),
        )
    if agg.agg == "reduce":
        initializer = resolve_function(agg.initializer or "", f"{a.key}.initializer")
        reducer = resolve_function(agg.reducer or "", f"{a.key}.reducer")
        (rtype,) = result_types(a)
        as_dict = value is None

        def fold_window(rows: list[Any]) -> Any:
            values = [r["v"].asDict(recursive=True) if as_dict else r["v"] for r in rows]
            return fold(values, initializer, reducer)

        folded = F.udf(fold_window, rtype, useArrow=False)(F.col(hidden))
        return NativeAggregate((items.alias(hidden),), (folded.alias(agg.as_),))
    raise PlanError(f"{a.key}.agg", f"{agg.agg!r} has no native compiler")


def _simple(expr: Column, hidden: str, alias: str) -> NativeAggregate:
    return NativeAggregate((expr.alias(hidden),), (F.col(hidden).alias(alias),))


def _time_ordered_items(a: AggregationInput, event_time: Column) -> Column:
    """array_sort(collect_list(struct(t, v))) over non-NULL values (the whole row when
    no column is named)."""
    if a.value is None:
        row = F.struct(*(F.col(c) for c in a.row_columns))
        item = F.struct(event_time.alias("t"), row.alias("v"))
    else:
        item = F.when(a.value.isNotNull(), F.struct(event_time.alias("t"), a.value.alias("v")))
    return F.array_sort(F.collect_list(item))


def _exact_distinct(
    a: AggregationInput, bounds: tuple[Column, Column], group_by: list[str], pipeline: str
) -> NativeAggregate:
    agg, hidden = a.spec, a.hidden
    assert a.value is not None
    cap = agg.max_distinct_values_per_group or 0
    size = F.size(F.col(hidden))
    group = F.to_json(F.struct(*(F.col(c) for c in group_by))) if group_by else F.lit("{}")
    message = F.format_string(
        f"count_distinct cap hit: max_distinct_values_per_group={cap} exceeded by {agg.as_} "
        "(%d values) on window [%s, %s) for group %s in pipeline " + pipeline,
        size,
        F.date_format(bounds[0], "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
        F.date_format(bounds[1], "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"),
        group,
    )
    checked = F.when(size > cap, F.raise_error(message)).otherwise(size.cast(LongType()))
    return NativeAggregate((F.collect_set(a.value).alias(hidden),), (checked.alias(agg.as_),))
