"""``collect``: a window's non-NULL values in the events' total order, natively
``array_sort(collect_list(struct(event_time, lane, position, value)))``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType

from flow_jobs.aggregations.base import (
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    NotDecoded,
    StateBuffer,
    ordered_items,
)
from flow_jobs.kernels.frame import to_python
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator


class Collect(WindowAggregator):
    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        return [
            [
                [to_python(v, kind, int(j)) for j in ctx.members(w, i, v.valid)]
                for i in range(len(w))
            ]
        ]


class CollectAggregator(Aggregator):
    name = "collect"
    native_form = "array_sort(collect_list(struct(event_time, lane, pos, col))).col"
    state_form = "values in the events' total order"
    state_grows_with_rows = True

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        return ("collect_list",)  # it never pre-aggregates: no partial parts

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        raise NotDecoded(
            "Spark keeps collect_list's items serialized in its own binary row format, "
            "which inspect does not decode"
        )

    def result_types(self, a: AggregationInput) -> list[DataType]:
        assert a.data_type is not None
        return [ArrayType(a.data_type, containsNull=False)]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        return NativeAggregate(
            (ordered_items(a, w.order).alias(a.hidden),),
            (F.transform(F.col(a.hidden), lambda x: x.getField("v")).alias(a.spec.as_),),
        )

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return Collect(column, a.spec.output_names())
