"""``min`` and ``max``: Spark's ``min`` / ``max`` natively; on the state API a range
minimum / maximum (a sparse table). NaN is above every other value, as in Spark."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StringType

from flow_jobs.aggregations.base import (
    PARTIAL_NUMBERS,
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    StateBuffer,
    simple,
)
from flow_jobs.kernels.frame import Values
from flow_jobs.kernels.ranges import (
    Context,
    Ranges,
    WindowAggregator,
    as_output,
    nullable,
    range_reduce,
    range_sum,
)
from flow_jobs.partial_parts import MAX, MIN, NON_NULL


@dataclass(eq=False)
class Extreme(WindowAggregator):
    """min or max of a column."""

    largest: bool

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        n = range_sum(v.valid.astype(np.int64), w)
        if kind == "float":
            return [self._floats(v, w, n)]
        if kind in ("int", "ts"):
            info = np.iinfo(np.int64)
            fill = info.min if self.largest else info.max
            data = np.where(v.valid, v.data, fill).astype(np.int64)
            best = range_reduce(data, w, np.maximum if self.largest else np.minimum)
            if kind == "ts":
                holder = Values(best, n > 0)
                return [as_output(holder, "ts", np.arange(len(w)), n > 0)]
            return [nullable(best, n > 0)]
        pick = max if self.largest else min
        out: list[Any] = []
        for i in range(len(w)):
            members = ctx.members(w, i, v.valid)
            out.append(pick(v.data[members].tolist()) if len(members) else None)
        return [out]

    def _floats(self, v: Values, w: Ranges, n: np.ndarray) -> Any:
        """Spark's order: NaN above +inf. max: a NaN wins (np.maximum propagates it);
        min: NaN only when the window holds nothing else."""
        if self.largest:
            data = np.where(v.valid, v.data, -np.inf)
            return nullable(range_reduce(data, w, np.maximum), n > 0)
        number = v.valid & ~np.isnan(v.data)
        best = range_reduce(np.where(number, v.data, np.inf), w, np.minimum)
        best[range_sum(number.astype(np.int64), w) == 0] = np.nan
        return nullable(best, n > 0)


class ExtremeAggregator(Aggregator):
    """min (``largest`` False) or max: the result has the input's type."""

    def __init__(self, largest: bool) -> None:
        name = "max" if largest else "min"
        self.largest = largest
        self.name = name  # type: ignore[misc]
        self.native_form = f"{name}(col)"  # type: ignore[misc]
        self.state_form = f"range {name}imum (sparse table)"  # type: ignore[misc]
        self.extreme_part = MAX if largest else MIN
        self.partial_parts = (NON_NULL, self.extreme_part)  # type: ignore[misc]

    def folds(self, value: DataType | None) -> bool:
        return isinstance(value, (*PARTIAL_NUMBERS, StringType))

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        return (self.name,)  # merging: the extreme of partial extremes and rows alike

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        (buffer,) = buffers
        return buffer.fields[self.name]

    def result_types(self, a: AggregationInput) -> list[DataType]:
        assert a.data_type is not None
        return [a.data_type]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        if w.merge is not None and a.spec.column is not None:
            # the extreme of partial extremes and rows alike
            extreme = w.merge.merged(self.extreme_part, a.spec.column, a.column_value, w.order)
        else:
            extreme = (F.max if self.largest else F.min)(a.column_value)
        return simple(extreme, a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return Extreme(column, a.spec.output_names(), largest=self.largest)
