"""An aggregator from outside the engine: ``agg = "variance"``, the sample variance of a
numeric column (NULL below two values), with a partial part of its own (``sumsq``, the
sum of squares) so that the Kafka reader pre-aggregates it. A pipeline uses it with::

    plugins = ["tests.plugins.variance"]

    [[transform.window.aggregations]]
    agg = "variance"
    column = "amount"
    as = "amount_var"

In a native window it is ``(Σx² - (Σx)²/n) / (n - 1)`` over Spark's ``count`` and
``try_sum``s (over rows, or over the reader's partials: ``nn``, ``dsum`` and its own
``sumsq``), and ``inspect`` reads an open window's value from those buffers; on the state
API it is ``statistics.variance`` of each window's rows. Nothing under ``flow_jobs/``
names it: ``tests/test_partial_parts.py``, ``tests/test_plugin_aggregator.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DoubleType

from flow_jobs.aggregations import register_aggregator
from flow_jobs.aggregations.base import (
    PARTIAL_NUMBERS,
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    StateBuffer,
    simple,
)
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator
from flow_jobs.partial_parts import (
    DOUBLE_SUM,
    NON_NULL,
    FoldedRows,
    Groups,
    Order,
    PartialPart,
    register_part,
)


class SumOfSquaresPart(PartialPart):
    """``sumsq``: the field's sum of squares, as DOUBLE."""

    name = "sumsq"

    def arrow_type(self, value: pa.DataType) -> pa.DataType:
        return pa.float64()

    def inputs(self, value: pa.Array, rows: FoldedRows) -> dict[str, pa.Array]:
        x = value.cast(pa.float64())
        return {"sq": pc.multiply(x, x)}

    def hash_aggregates(self, value: pa.DataType) -> tuple[tuple[str, str], ...]:
        return (("sq", "sum"),)

    def from_groups(self, groups: Groups, value: pa.Array, rows: FoldedRows) -> pa.Array:
        return groups.column("sq", "sum")

    def of_row(self, value: Column, order: Order) -> Column:
        return value.cast("double") * value.cast("double")

    def merge(self, values: Column) -> Column:
        return F.try_sum(values)


SUM_OF_SQUARES = register_part(SumOfSquaresPart())


def sample_variance(n: Column, total: Column, squares: Column) -> Column:
    """(Σx² - (Σx)²/n) / (n - 1); NULL below two values."""
    return F.when(n > 1, (squares - total * total / n) / (n - 1))


@dataclass(eq=False)
class Variance(WindowAggregator):
    """The state-API side: each window's sample variance, in Python."""

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v = self.values(ctx)
        out = []
        for i in range(len(w)):
            xs = [float(x) for x in v.data[ctx.members(w, i, v.valid)]]
            out.append(statistics.variance(xs) if len(xs) > 1 else None)
        return [out]


class VarianceAggregator(Aggregator):
    """``variance``: the sample variance, from a count, a sum and a sum of squares, which
    the Kafka reader folds into partials and Spark merges."""

    name = "variance"
    native_form = "(try_sum(x²) - try_sum(x)² / count(x)) / (count(x) - 1)"
    state_form = "statistics.variance per window"
    numeric_only = True
    partial_parts = (NON_NULL, DOUBLE_SUM, SUM_OF_SQUARES)

    def folds(self, value: DataType | None) -> bool:
        return isinstance(value, PARTIAL_NUMBERS)

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        # n, then Σx² and Σx as ``sample_variance`` reads them (pre-order)
        return ("sum" if merging else "count", "try_sum", "try_sum")

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        n = buffers[0].fields["sum" if merging else "count"] or 0
        squares, total = buffers[1].fields["sum"], buffers[2].fields["sum"]
        return None if n < 2 else (squares - total * total / n) / (n - 1)

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [DoubleType()]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        x, column = a.column_value, a.spec.column
        assert column is not None
        if w.merge is None:
            n, total = F.count(x), F.try_sum(x.cast("double"))
            squares = F.try_sum(x.cast("double") * x.cast("double"))
        else:
            n = w.merge.merged(NON_NULL, column, x, w.order)
            total = w.merge.merged(DOUBLE_SUM, column, x, w.order)
            squares = w.merge.merged(SUM_OF_SQUARES, column, x, w.order)
        return simple(sample_variance(n, total, squares), a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return Variance(column, a.spec.output_names())


VARIANCE = register_aggregator(VarianceAggregator())
