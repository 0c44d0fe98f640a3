"""``reduce``: a user's fold of a window's values in the events' total order: the
initializer gets the first value, the reducer (aggregate, value) each later one. Native
windows keep the values in state and fold when the window is emitted; state-API windows
fold in the operator. The value is the named column's, or the row as a dict without a
column."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from flow_jobs.aggregations.base import (
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    NotDecoded,
    StateBuffer,
    StateInputs,
    ordered_items,
)
from flow_jobs.errors import PlanError
from flow_jobs.kernels.frame import to_python
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator
from flow_jobs.spec.base import IMPORT_PATH, key_error
from flow_jobs.spec.models import Aggregation, resolve_import_path


@dataclass(eq=False)
class Reduce(WindowAggregator):
    """Reduce: initializer(first value), then reducer(aggregate, value)."""

    initializer: Callable[[Any], Any]
    reducer: Callable[[Any, Any], Any]
    row_columns: list[str]  # the row's columns, when no column is named

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        out = []
        for i in range(len(w)):
            if self.column is not None:
                v, kind = self.values(ctx), ctx.kinds[self.column]
                items = [to_python(v, kind, int(j)) for j in ctx.members(w, i, v.valid)]
            else:
                items = [
                    {
                        c: to_python(ctx.frame.columns[c], ctx.kinds[c], int(j))
                        for c in self.row_columns
                    }
                    for j in ctx.members(w, i)
                ]
            out.append(fold(items, self.initializer, self.reducer))
        return [out]


def fold(
    items: list[Any], initializer: Callable[[Any], Any], reducer: Callable[[Any, Any], Any]
) -> Any:
    """The reduce both engines apply, over values already in event-time order."""
    if not items:
        return None
    aggregate = initializer(items[0])
    for item in items[1:]:
        aggregate = reducer(aggregate, item)
    return aggregate


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


#: Why ``inspect`` shows no open value for a reduce.
_NOT_RUN = "inspect does not run the user's initializer and reducer"


class ReduceAggregator(Aggregator):
    """Reduce: ``initializer(first)``, then ``reducer(aggregate, value)``."""

    name = "reduce"
    native_form = (
        "array_sort(collect_list(struct(event_time, lane, pos, value))) folded by a Python UDF"
    )
    state_form = "fold in the events' total order"
    column_optional = True
    not_inspected = _NOT_RUN
    state_grows_with_rows = True  # natively: the window's items, folded when it is emitted
    options = ("initializer", "reducer", "result_type")

    def check_spec(self, spec: Aggregation) -> None:
        for key in self.options:
            value = getattr(spec, key)
            if not value:
                raise key_error(key, f'{key} is required for agg = "reduce"')
            if key != "result_type" and not IMPORT_PATH.match(value):
                raise key_error(key, f"{key} = {value!r} is not an import path (module:function)")

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        return ("collect_list",)  # the sorted items, folded when the window is emitted

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        raise NotDecoded(_NOT_RUN)

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
            return fold(values, initializer, reducer)

        folded = F.udf(fold_window, rtype, useArrow=False)(F.col(a.hidden))
        items = ordered_items(a, w.order).alias(a.hidden)
        return NativeAggregate((items,), (folded.alias(a.spec.as_),))

    def state_inputs(self, a: AggregationInput, frame: DataFrame) -> StateInputs:
        if a.spec.column is not None:
            return super().state_inputs(a, frame)
        return {c: (F.col(c), frame.schema[c].dataType) for c in a.row_columns}

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        initializer, reducer = self._functions(a)
        rows = list(a.row_columns) if column is None else []
        return Reduce(column, a.spec.output_names(), initializer, reducer, rows)
