"""Aggregators: each one a small named unit (``AGGREGATORS``) holding its native compile,
its state-API implementation (built from ``flow_jobs.operators.aggregators``) and its
result types, so both engines write the same columns.

Native windows (tumbling, hopping, session) aggregate with Spark's built-in functions
inside the streaming aggregation: partial aggregation before the shuffle, state in the
state store. State-API windows (sliding, count-based) compute the same aggregates in
Python (``flow_jobs.operators.aggregators``), with the result types fixed here so both
engines write the same columns.

NULL handling is SQL's: ``count`` (no column) counts rows, everything else skips NULL
values, an aggregate over no non-NULL value is NULL (``count(col)`` is 0).

``first`` / ``last`` / ``collect`` / ``reduce`` follow the events' total order (event
time, then Kafka position: ``flow_jobs.plan.ordering``), not arrival: Spark's
``first()`` / ``last()`` depend on the order rows reach a task, which a shuffle does
not keep, so they compile to ``min`` / ``max`` / ``array_sort`` over
``struct(event_time, lane, position, value)``; the state API sorts by the same keys.

``count_distinct`` approximate is Spark's ``hll_sketch_agg``: an Apache DataSketches
HLL sketch (loadable with the ``datasketches`` package, ``hll_sketch.deserialize``)
whose estimate is the value; ``keep_sketch`` also writes the sketch bytes. Integral
columns are hashed as 64-bit integers, strings as UTF-8, everything else as its STRING
cast, in both engines, so sketches of either engine merge. Exact distinct counts keep
the set in state and fail the query, naming the window, past their cap.

``reduce`` folds a window's values in event-time order: the initializer gets
the first value, the reducer (aggregate, value) for each later one. Native windows keep
the values in state and fold when the window is emitted; state-API windows fold in the
operator. The value is the named column's, or the row as a dict without a column.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FractionalType,
    IntegerType,
    IntegralType,
    LongType,
    NumericType,
    ShortType,
    StringType,
)

from flow_jobs.operators import aggregators as ops
from flow_jobs.operators.aggregators import WindowAggregator
from flow_jobs.plan.errors import PlanError
from flow_jobs.plan.partials import Merge
from flow_jobs.spec.models import Aggregation, resolve_import_path


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


@dataclass(frozen=True)
class NativeWindow:
    """What a native aggregation may use besides its input: the events' total order
    (event time, lane, position: ``flow_jobs.plan.ordering``), the window's bounds, the
    group keys and the pipeline (for error messages)."""

    order: tuple[Column, Column, Column]
    bounds: tuple[Column, Column]
    group_by: tuple[str, ...]
    pipeline: str
    #: set: the input holds partial aggregates from the reader (``flow_jobs.plan.combine``)
    merge: Merge | None = None


StateInputs = dict[str, tuple[Column, DataType]]

#: What ``inspect`` shows for an aggregate whose open value the state does not hold.
NOT_DECODED = "n/a"
#: Numbers the Kafka reader sums and compares in its partials (``flow_jobs.io.combine``).
_PARTIAL_NUMBERS = (LongType, IntegerType, ShortType, ByteType, DoubleType)


class Aggregator(ABC):
    """One aggregator: its native compile, its state-API implementation, its result
    types, the partial parts it merges when the reader pre-aggregates, and how ``inspect``
    reads an open native window's value from Spark's aggregation buffer. Adding one is a
    subclass here (with its numpy implementation in ``flow_jobs.operators.aggregators``)
    and its name in ``spec.models.AggKind``; ``tests/test_aggregators.py`` checks that it
    has every part."""

    name: ClassVar[str]
    native_form: ClassVar[str]  # what it compiles to in a native window (``--plan``)
    state_form: ClassVar[str]  # what computes it in a state-API window
    numeric_only: ClassVar[bool] = False
    #: The parts of the reader's partial it merges (``flow_jobs.io.combine``: ``nn``,
    #: ``sum``, ``dsum``, ``min``, ``max``, ``first``, ``last``); None: a window holding
    #: it does not pre-aggregate.
    partial_parts: ClassVar[tuple[str, ...] | None] = None
    #: The fields of Spark's aggregation buffer for its native aggregate, in order.
    buffer_fields: ClassVar[tuple[str, ...]]

    def folds(self, value: DataType | None) -> bool:
        """Whether the reader can pre-aggregate it over a column of type ``value``
        (None: no column), given ``partial_parts``."""
        return self.partial_parts is not None and value is not None

    def partial_value(self, buffer: list[Any]) -> Any:
        """An open native window's value from its ``buffer_fields`` (``inspect``), or
        ``NOT_DECODED`` where the buffer does not hold it as such."""
        return NOT_DECODED

    @abstractmethod
    def result_types(self, a: AggregationInput) -> list[DataType]:
        """The output column types, identical in both engines."""

    @abstractmethod
    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        """The columns of Spark's streaming aggregation, then the outputs from them."""

    @abstractmethod
    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        """The state-API implementation, reading ``column`` of the operator's input."""

    def state_inputs(self, a: AggregationInput, frame: DataFrame) -> StateInputs:
        """The operator input columns it reads (by default its own column)."""
        column = a.spec.column
        if column is None:
            return {}
        return {column: (F.col(column), frame.schema[column].dataType)}

    def state_column(self, a: AggregationInput) -> str | None:
        return a.spec.column


def _simple(expr: Column, hidden: str, alias: str) -> NativeAggregate:
    return NativeAggregate((expr.alias(hidden),), (F.col(hidden).alias(alias),))


def _value(a: AggregationInput) -> Column:
    assert a.value is not None
    return a.value


def _own_type(a: AggregationInput) -> list[DataType]:
    assert a.data_type is not None
    return [a.data_type]


class _OneFunctionAgg(Aggregator):
    """One Spark aggregate function in a native window; on the state API, a class that
    takes only its column and output names."""

    state_class: type[WindowAggregator]

    @abstractmethod
    def function(self, a: AggregationInput) -> Column:
        """The Spark aggregate of the input."""

    def merged(self, a: AggregationInput, merge: Merge) -> Column:
        """The Spark aggregate of rows and partials alike (``flow_jobs.plan.combine``)."""
        raise NotImplementedError(f"{self.name} has no partials")

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        function = self.function(a) if w.merge is None else self.merged(a, w.merge)
        return _simple(function, a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return self.state_class(column, a.spec.output_names())


class CountAgg(_OneFunctionAgg):
    name = "count"
    native_form = "count(1), or count(col)"
    state_form = "prefix sums of row / non-NULL counts"
    state_class = ops.Count
    partial_parts = ("nn",)  # count(*) merges the partial's row count, ``n``
    buffer_fields = ("count",)

    def folds(self, value: DataType | None) -> bool:
        return True

    def partial_value(self, buffer: list[Any]) -> Any:
        return buffer[0]

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [LongType()]

    def function(self, a: AggregationInput) -> Column:
        return F.count(F.lit(1)) if a.value is None else F.count(a.value)

    def merged(self, a: AggregationInput, merge: Merge) -> Column:
        return merge.count(a.value, a.spec.column)


class TryAgg(_OneFunctionAgg):
    """sum / avg as Spark's ``try_`` aggregates: one that overflows its type (BIGINT,
    DECIMAL) is NULL, not a query that fails on every replay (Spark 4's ANSI mode
    raises ARITHMETIC_OVERFLOW)."""

    numeric_only = True

    def __init__(
        self,
        name: str,
        state_form: str,
        result_type: Callable[[DataType | None], DataType],
        state_class: type[WindowAggregator],
        partial_parts: tuple[str, ...],
        buffer_fields: tuple[str, ...],
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.native_form = f"try_{name}(col)"  # type: ignore[misc]
        self.state_form = state_form  # type: ignore[misc]
        self.result_type, self.state_class = result_type, state_class
        self.partial_parts = partial_parts  # type: ignore[misc]
        self.buffer_fields = buffer_fields  # type: ignore[misc]

    def folds(self, value: DataType | None) -> bool:
        return isinstance(value, _PARTIAL_NUMBERS)

    def partial_value(self, buffer: list[Any]) -> Any:
        if self.name == "sum":  # a DECIMAL sum's buffer adds isEmpty
            return None if len(buffer) > 1 and buffer[1] else buffer[0]
        total, n = buffer
        return None if not n or total is None else total / n

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [self.result_type(a.data_type)]

    def function(self, a: AggregationInput) -> Column:
        return getattr(F, f"try_{self.name}")(_value(a))

    def merged(self, a: AggregationInput, merge: Merge) -> Column:
        assert a.spec.column is not None
        if self.name == "sum":
            return merge.sum(_value(a), a.spec.column)
        return merge.avg(_value(a), a.spec.column)


def _sum_type(t: DataType | None) -> DataType:
    if isinstance(t, DecimalType):
        return DecimalType(min(38, t.precision + 10), t.scale)
    return DoubleType() if isinstance(t, FractionalType) else LongType()


def _avg_type(t: DataType | None) -> DataType:
    if isinstance(t, DecimalType):
        return DecimalType(min(38, t.precision + 4), min(38, t.scale + 4))
    return DoubleType()


class _PairedAgg(Aggregator):
    """One of two aggregators that share a class (min / max, first / last), whose
    result has its input's type."""

    def __init__(
        self,
        name: str,
        native_form: str,
        state_form: str,
        partial_parts: tuple[str, ...],
        buffer_fields: tuple[str, ...],
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.native_form = native_form  # type: ignore[misc]
        self.state_form = state_form  # type: ignore[misc]
        self.partial_parts = partial_parts  # type: ignore[misc]
        self.buffer_fields = buffer_fields  # type: ignore[misc]

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return _own_type(a)


class ExtremeAgg(_PairedAgg):
    """min / max."""

    def __init__(self, name: str) -> None:
        forms = f"{name}(col)", f"range {name}imum (sparse table)"
        super().__init__(name, *forms, ("nn", name), (name,))

    def folds(self, value: DataType | None) -> bool:
        return isinstance(value, (*_PARTIAL_NUMBERS, StringType))

    def partial_value(self, buffer: list[Any]) -> Any:
        return buffer[0]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        if w.merge is not None and a.spec.column is not None:
            merged = w.merge.extreme(self.name, _value(a), a.spec.column)
            return _simple(merged, a.hidden, a.spec.as_)
        return _simple(getattr(F, self.name)(_value(a)), a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return ops.Extreme(column, a.spec.output_names(), largest=self.name == "max")


def _ordered(order: tuple[Column, Column, Column], value: Column) -> Column:
    """struct(t, lane, pos, v): compares by the events' total order before the value."""
    t, lane, pos = order
    return F.struct(t.alias("t"), lane.alias("lane"), pos.alias("pos"), value.alias("v"))


def _ordered_items(a: AggregationInput, order: tuple[Column, Column, Column]) -> Column:
    """array_sort(collect_list(struct(t, lane, pos, v))) over non-NULL values (the whole
    row when no column is named)."""
    if a.value is None:
        item = _ordered(order, F.struct(*(F.col(c) for c in a.row_columns)))
    else:
        item = F.when(a.value.isNotNull(), _ordered(order, a.value))
    return F.array_sort(F.collect_list(item))


class PositionalAgg(_PairedAgg):
    """first / last: the value of the first / last row in the events' total order."""

    def __init__(self, name: str) -> None:
        pick = "min" if name == "first" else "max"
        native_form = f"{pick}(struct(event_time, lane, pos, col)).col"
        state_form = f"range {pick}imum of order rank"
        super().__init__(name, native_form, state_form, (name,), (pick,))

    def partial_value(self, buffer: list[Any]) -> Any:
        return None if buffer[0] is None else buffer[0]["v"]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        value = _value(a)
        ordered = F.when(value.isNotNull(), _ordered(w.order, value))
        if w.merge is not None and a.spec.column is not None:
            lane = w.order[1]
            merged = w.merge.positional(self.name, ordered, lane, a.spec.column)
            return _simple(merged, a.hidden, a.spec.as_)
        pick = F.min if self.name == "first" else F.max
        return _simple(pick(ordered).getField("v"), a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return ops.Positional(column, a.spec.output_names(), last=self.name == "last")


class CountDistinctAgg(Aggregator):
    name = "count_distinct"
    native_form = "hll_sketch_agg + hll_sketch_estimate (exact: runs on the state API)"
    state_form = "datasketches hll_sketch HLL_8 (exact: a set, capped while open)"
    buffer_fields = ("buf",)

    def partial_value(self, buffer: list[Any]) -> Any:
        """``hll_sketch_estimate`` of the partial sketch (a DataSketches HLL image)."""
        if buffer[0] is None:
            return 0
        try:
            from datasketches import hll_sketch

            return round(hll_sketch.deserialize(bytes(buffer[0])).get_estimate())
        except Exception:  # not a sketch image after all: say so, do not guess
            return NOT_DECODED

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [LongType(), BinaryType()][: len(a.spec.output_names())]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        agg, hidden, value = a.spec, a.hidden, _value(a)
        # exact: a window holding one runs on the state API (WindowSpec.engine), where
        # the set is capped while the window is open; Spark's aggregation cannot do that
        assert agg.mode != "exact", "an exact count_distinct has no native form"
        assert a.data_type is not None
        sketch = F.hll_sketch_agg(hll_item(value, a.data_type), agg.precision).alias(hidden)
        outputs = [F.hll_sketch_estimate(F.col(hidden)).alias(agg.as_)]
        if agg.sketch_column:
            outputs.append(F.col(hidden).alias(agg.sketch_column))
        return NativeAggregate((sketch,), tuple(outputs))

    def state_column(self, a: AggregationInput) -> str | None:
        # approximate: the operator reads the hashed item, the same in both engines
        return a.spec.column if a.spec.mode == "exact" else f"__flow_hll_{a.index}"

    def state_inputs(self, a: AggregationInput, frame: DataFrame) -> StateInputs:
        if a.spec.mode == "exact":
            return super().state_inputs(a, frame)
        assert a.data_type is not None
        item = hll_item(_value(a), a.data_type)
        name = self.state_column(a) or ""
        return {name: (item, frame.select(item.alias("x")).schema["x"].dataType)}

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        outputs = a.spec.output_names()
        if a.spec.mode == "exact":
            cap = a.spec.max_distinct_values_per_group or 0
            return ops.CountDistinctExact(column, outputs, cap, pipeline)
        return ops.CountDistinctSketch(column, outputs, a.spec.precision)


class CollectAgg(Aggregator):
    name = "collect"
    native_form = "array_sort(collect_list(struct(event_time, lane, pos, col))).col"
    state_form = "values in the events' total order"
    buffer_fields = ("buf",)  # the sorted items: not decoded

    def result_types(self, a: AggregationInput) -> list[DataType]:
        assert a.data_type is not None
        return [ArrayType(a.data_type, containsNull=False)]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        return NativeAggregate(
            (_ordered_items(a, w.order).alias(a.hidden),),
            (F.transform(F.col(a.hidden), lambda x: x.getField("v")).alias(a.spec.as_),),
        )

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return ops.Collect(column, a.spec.output_names())


class ReduceAgg(Aggregator):
    """Reduce: ``initializer(first)``, then ``reducer(aggregate, value)``."""

    name = "reduce"
    native_form = (
        "array_sort(collect_list(struct(event_time, lane, pos, value))) folded by a Python UDF"
    )
    state_form = "fold in the events' total order"
    buffer_fields = ("buf",)  # the sorted items, folded when the window is emitted

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [_parse_type(a.spec.result_type or "", f"{a.key}.result_type")]

    def _functions(self, a: AggregationInput) -> tuple[Callable[..., Any], Callable[..., Any]]:
        return (
            resolve_function(a.spec.initializer or "", f"{a.key}.initializer"),
            resolve_function(a.spec.reducer or "", f"{a.key}.reducer"),
        )

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        initializer, reducer = self._functions(a)
        (rtype,) = self.result_types(a)
        as_dict = a.value is None

        def fold_window(rows: list[Any]) -> Any:
            values = [r["v"].asDict(recursive=True) if as_dict else r["v"] for r in rows]
            return ops.fold(values, initializer, reducer)

        folded = F.udf(fold_window, rtype, useArrow=False)(F.col(a.hidden))
        items = _ordered_items(a, w.order).alias(a.hidden)
        return NativeAggregate((items,), (folded.alias(a.spec.as_),))

    def state_inputs(self, a: AggregationInput, frame: DataFrame) -> StateInputs:
        if a.spec.column is not None:
            return super().state_inputs(a, frame)
        return {c: (F.col(c), frame.schema[c].dataType) for c in a.row_columns}

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        initializer, reducer = self._functions(a)
        rows = list(a.row_columns) if column is None else []
        return ops.Reduce(column, a.spec.output_names(), initializer, reducer, rows)


AGGREGATORS: dict[str, Aggregator] = {
    a.name: a
    for a in (
        CountAgg(),
        TryAgg(
            "sum", "prefix sums (double-double for floats)", _sum_type, ops.Sum, ("sum",), ("sum",)
        ),
        ExtremeAgg("min"),
        ExtremeAgg("max"),
        TryAgg("avg", "prefix sums / counts", _avg_type, ops.Avg, ("nn", "dsum"), ("sum", "count")),
        PositionalAgg("first"),
        PositionalAgg("last"),
        CountDistinctAgg(),
        CollectAgg(),
        ReduceAgg(),
    )
}


def result_types(a: AggregationInput) -> list[DataType]:
    return AGGREGATORS[a.spec.agg].result_types(a)


def native_aggregate(a: AggregationInput, w: NativeWindow) -> NativeAggregate:
    return AGGREGATORS[a.spec.agg].native(a, w)
