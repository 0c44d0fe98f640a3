"""``first`` and ``last``: the value of the first / last row in the events' total order
(event time, then Kafka position: ``flow_jobs.plan.ordering``), not arrival: Spark's
``first()`` / ``last()`` depend on the order rows reach a task, which a shuffle does not
keep, so natively they are ``min`` / ``max`` over ``struct(event_time, lane, position,
value)``; on the state API a range minimum / maximum of the order rank."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from flow_jobs.aggregations.base import (
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    StateBuffer,
    simple,
)
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator, as_output, range_reduce
from flow_jobs.partial_parts import FIRST, LAST, ordered
from flow_jobs.spec.models import Aggregation


@dataclass(eq=False)
class Positional(WindowAggregator):
    """first / last: the value of the earliest / latest row (event time, then arrival)."""

    last: bool

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v = self.values(ctx)
        big = np.iinfo(np.int64).max
        ranks = np.where(v.valid, ctx.rank, -1 if self.last else big)
        best = range_reduce(ranks, w, np.maximum if self.last else np.minimum)
        present = (best >= 0) & (best != big)
        rows = ctx.order[np.where(present, best, 0)]
        return [as_output(v, ctx.kinds[self.column or ""], rows, present)]


class PositionalAggregator(Aggregator):
    """first (``last`` False) or last: the result has the input's type."""

    def __init__(self, last: bool) -> None:
        name, pick = ("last", "max") if last else ("first", "min")
        self.last = last
        self.name = name  # type: ignore[misc]
        self.native_form = f"{pick}(struct(event_time, lane, pos, col)).col"  # type: ignore[misc]
        self.state_form = f"range {pick}imum of order rank"  # type: ignore[misc]
        self.position_part = LAST if last else FIRST
        self.partial_parts = (self.position_part,)  # type: ignore[misc]
        self.pick = pick

    def state_bytes(self, spec: Aggregation) -> int:
        return 32  # struct(t, lane, pos, v)

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        # merging: a partial's first / last takes part in the same min / max
        return (self.pick,)

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        (buffer,) = buffers
        item = buffer.fields[self.pick]  # struct(t, lane, pos, v)
        return None if item is None else item["v"]

    def result_types(self, a: AggregationInput) -> list[DataType]:
        assert a.data_type is not None
        return [a.data_type]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        value = a.column_value
        if w.merge is not None and a.spec.column is not None:
            # a partial's first / last keeps its time and position; its lane is the row's
            best = w.merge.merged(self.position_part, a.spec.column, value, w.order)
        else:
            pick = F.max if self.last else F.min
            best = pick(F.when(value.isNotNull(), ordered(w.order, value)))
        return simple(best.getField("v"), a.hidden, a.spec.as_)

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        return Positional(column, a.spec.output_names(), last=self.last)
