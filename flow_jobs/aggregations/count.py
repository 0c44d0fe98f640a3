"""``count``: rows (no column), or a column's non-NULL values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, LongType

from flow_jobs.aggregations.base import (
    AggregationInput,
    NativeWindow,
    OneFunctionAggregator,
    StateBuffer,
)
from flow_jobs.aggregations.partials import Merge
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator, range_sum
from flow_jobs.partial_parts import NON_NULL


class Count(WindowAggregator):
    """Prefix sums of row / non-NULL counts."""

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        if self.column is None:
            return [w.hi - w.lo + 1]
        return [range_sum(self.values(ctx).valid.astype(np.int64), w)]


class CountAggregator(OneFunctionAggregator):
    name = "count"
    native_form = "count(1), or count(col)"
    state_form = "prefix sums of row / non-NULL counts"
    state_class = Count
    column_optional = True
    partial_parts = (NON_NULL,)  # count(*) merges the partial's row count, ``n``

    def folds(self, value: DataType | None) -> bool:
        return True

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        return ("sum",) if merging else ("count",)  # merging: the sum of partial counts

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        (buffer,) = buffers
        return buffer.fields["sum" if merging else "count"] or 0

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [LongType()]

    def function(self, a: AggregationInput) -> Column:
        return F.count(F.lit(1)) if a.value is None else F.count(a.value)

    def merged(self, a: AggregationInput, w: NativeWindow, merge: Merge) -> Column:
        if a.value is None or a.spec.column is None:
            return F.sum(F.coalesce(merge.rows(), F.lit(1).cast("bigint")))
        return merge.merged(NON_NULL, a.spec.column, a.value, w.order)  # sum of counts
