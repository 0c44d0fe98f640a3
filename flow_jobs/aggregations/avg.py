"""``avg``: Spark's ``try_avg`` natively; on the state API float prefix sums / counts."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType

from flow_jobs.aggregations.base import (
    PARTIAL_NUMBERS,
    AggregationInput,
    NativeWindow,
    OneFunctionAggregator,
    StateBuffer,
)
from flow_jobs.aggregations.partials import Merge
from flow_jobs.aggregations.sum import float_sums, python_sum
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator, nullable, range_sum
from flow_jobs.partial_parts import DOUBLE_SUM, NON_NULL


class Avg(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        n = range_sum(v.valid.astype(np.int64), w)
        if kind in ("int", "float"):
            total = float_sums(np.where(v.valid, v.data, 0).astype(np.float64), w)
            return [nullable(total / np.maximum(n, 1), n > 0)]
        sums = [python_sum(v, ctx, w, i) for i in range(len(w))]
        return [[None if s is None else s / int(c) for s, c in zip(sums, n, strict=True)]]


def avg_type(t: DataType | None) -> DataType:
    if isinstance(t, DecimalType):
        return DecimalType(min(38, t.precision + 4), min(38, t.scale + 4))
    return DoubleType()


class AvgAggregator(OneFunctionAggregator):
    name = "avg"
    native_form = "try_avg(col)"
    state_form = "prefix sums / counts"
    state_class = Avg
    numeric_only = True
    partial_parts = (NON_NULL, DOUBLE_SUM)  # Spark sums an average as DOUBLE

    def folds(self, value: DataType | None) -> bool:
        return isinstance(value, PARTIAL_NUMBERS)

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        # merging: try_divide(try_sum(DOUBLE sums), sum(non-NULL counts)), ``merged``
        return ("try_sum", "sum") if merging else ("try_avg",)

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        if merging:
            total, n = buffers[0].fields["sum"], buffers[1].fields["sum"]
        else:
            total, n = buffers[0].fields["sum"], buffers[0].fields["count"]
        if not n or total is None:
            return None
        result = avg_type(a.data_type)
        if isinstance(total, Decimal) and isinstance(result, DecimalType):
            with localcontext() as exact:  # Spark casts the quotient to the result's scale
                exact.prec = 80
                step = Decimal(1).scaleb(-result.scale)
                return (total / n).quantize(step, rounding=ROUND_HALF_UP)
        return total / n

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [avg_type(a.data_type)]

    def function(self, a: AggregationInput) -> Column:
        return F.try_avg(a.column_value)

    def merged(self, a: AggregationInput, w: NativeWindow, merge: Merge) -> Column:
        value, column = a.column_value, a.spec.column
        assert column is not None
        total = merge.merged(DOUBLE_SUM, column, value, w.order)  # try_sum of DOUBLE
        count = merge.merged(NON_NULL, column, value, w.order)  # sum of non-NULL counts
        return F.try_divide(total, count)
