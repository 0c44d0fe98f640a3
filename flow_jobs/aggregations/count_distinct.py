"""``count_distinct``: approximate (the default) or exact.

Approximate is Spark's ``hll_sketch_agg``: an Apache DataSketches HLL sketch (loadable
with the ``datasketches`` package, ``hll_sketch.deserialize``) whose estimate is the
value; ``keep_sketch`` also writes the sketch bytes. Integral columns are hashed as
64-bit integers, strings as UTF-8, everything else as its STRING cast, in both engines,
so sketches of either engine merge. Exact distinct counts keep the set in state (a
window holding one runs on the state API, ``WindowSpec.engine``) and fail the query,
naming the window, once an open window's set passes its cap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, DataType, IntegralType, LongType, StringType

from flow_jobs.aggregations.base import (
    AggregationInput,
    Aggregator,
    NativeAggregate,
    NativeWindow,
    NotDecoded,
    StateBuffer,
    StateInputs,
)
from flow_jobs.kernels.frame import EventFrame, to_python
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator
from flow_jobs.spec.base import key_error
from flow_jobs.spec.models import Aggregation


class CapExceeded(RuntimeError):
    """A window's exact distinct count went over max_distinct_values_per_group."""


@dataclass(eq=False)
class CountDistinctExact(WindowAggregator):
    cap: int
    pipeline: str  # for the error a cap hit raises

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        out = []
        for i in range(len(w)):
            members = ctx.members(w, i, v.valid)
            distinct = len({_hashable(to_python(v, kind, int(j))) for j in members})
            if distinct > self.cap:
                raise CapExceeded(
                    f"count_distinct cap hit: max_distinct_values_per_group={self.cap} exceeded "
                    f"by {self.outputs[0]} ({distinct} values) on window "
                    f"{ctx.describe_window(i)} for pipeline {self.pipeline}"
                )
            out.append(distinct)
        return [out]

    def check_open(self, frame: EventFrame, w: Ranges, context: Callable[[], Context]) -> None:
        """The set is capped while the window is open: its state must not grow until the
        window closes. Free unless the group's held values outnumber the cap (no window
        can hold more than all of them)."""
        if not len(w):
            return
        values = frame.columns[self.column or ""]
        if not _distinct_at_most(values.data[values.valid], self.cap):
            self.compute(context(), w)


def _distinct_at_most(values: np.ndarray, cap: int) -> bool:
    import pandas as pd  # not at import: Spark's state workers start often

    if len(values) <= cap:
        return True
    try:
        return len(pd.unique(values)) <= cap
    except TypeError:  # unhashable items (arrays): let the aggregator count them
        return False


def _hashable(value: Any) -> Any:
    return tuple(map(_hashable, value)) if isinstance(value, list) else value


@dataclass(eq=False)
class CountDistinctSketch(WindowAggregator):
    """HyperLogLog in Apache DataSketches format (HLL_8, as Spark's hll_sketch_agg)."""

    lg_k: int

    def compute(self, ctx: Context, w: Ranges) -> list[Any]:
        from datasketches import hll_sketch, tgt_hll_type

        v, kind = self.values(ctx), ctx.kinds[self.column or ""]
        estimates, sketches = [], []
        for i in range(len(w)):
            sketch = hll_sketch(self.lg_k, tgt_hll_type.HLL_8)
            for j in ctx.members(w, i, v.valid):
                item = v.data[j]
                sketch.update(int(item) if kind == "int" else str(item))
            estimates.append(round(sketch.get_estimate()))
            sketches.append(sketch.serialize_compact())
        return [estimates, sketches][: len(self.outputs)]


def hll_item(value: Column, data_type: DataType) -> Column:
    """What a distinct-count sketch hashes (the same rule in both engines)."""
    if isinstance(data_type, IntegralType):
        return value.cast(LongType())
    if isinstance(data_type, BinaryType):
        return F.hex(value)
    return value if isinstance(data_type, StringType) else value.cast(StringType())


class CountDistinctAggregator(Aggregator):
    name = "count_distinct"
    native_form = "hll_sketch_agg + hll_sketch_estimate (exact: runs on the state API)"
    state_form = "datasketches hll_sketch HLL_8 (exact: a set, capped while open)"
    options = ("mode", "hll_precision", "keep_sketch", "max_distinct_values_per_group")

    def check_spec(self, spec: Aggregation) -> None:
        exact = spec.mode == "exact"
        for key in ("hll_precision", "keep_sketch"):
            if getattr(spec, key) is not None and exact:
                raise key_error(key, self.misplaced(key, getattr(spec, key)))
        if exact and spec.max_distinct_values_per_group is None:
            raise key_error(
                "max_distinct_values_per_group",
                'max_distinct_values_per_group is required when agg = "count_distinct" and '
                'mode = "exact" (exact distinct counts keep every value in state)',
            )
        if spec.max_distinct_values_per_group is not None and not exact:
            raise key_error(
                "max_distinct_values_per_group",
                self.misplaced("max_distinct_values_per_group", spec.max_distinct_values_per_group),
            )

    def misplaced(self, key: str, value: Any) -> str:
        if key == "mode":
            return f'mode = "{value}" is only valid for agg = "count_distinct"'
        if key == "max_distinct_values_per_group":
            return f'{key} is only valid with agg = "count_distinct" and mode = "exact"'
        return f'{key} is only valid with agg = "count_distinct" and mode = "approximate"'

    def state_functions(self, merging: bool) -> tuple[str, ...]:
        return ("hll_sketch_agg",)  # it never pre-aggregates: no partial parts

    def state_bytes(self, spec: Aggregation) -> int:
        if spec.mode == "exact":  # the set, up to its cap
            return 32 * (spec.max_distinct_values_per_group or 0)
        return 1 << spec.precision  # the sketch's registers

    def open_value(self, a: AggregationInput, buffers: Sequence[StateBuffer], merging: bool) -> Any:
        """``hll_sketch_estimate`` of the sketch so far: Spark keeps its DataSketches HLL
        image as the buffer."""
        (buffer,) = buffers
        image = buffer.fields["buf"]
        if image is None:
            return 0
        from datasketches import hll_sketch

        try:
            return round(hll_sketch.deserialize(bytes(image)).get_estimate())
        except (ValueError, RuntimeError) as e:  # not a sketch image: say so, do not guess
            raise NotDecoded(f"its buffer is not a DataSketches HLL sketch ({e})") from e

    def result_types(self, a: AggregationInput) -> list[DataType]:
        return [LongType(), BinaryType()][: len(a.spec.output_names())]

    def native(self, a: AggregationInput, w: NativeWindow) -> NativeAggregate:
        agg, hidden, value = a.spec, a.hidden, a.column_value
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
        item = hll_item(a.column_value, a.data_type)
        name = self.state_column(a) or ""
        return {name: (item, frame.select(item.alias("x")).schema["x"].dataType)}

    def state(self, a: AggregationInput, column: str | None, pipeline: str) -> WindowAggregator:
        outputs = a.spec.output_names()
        if a.spec.mode == "exact":
            cap = a.spec.max_distinct_values_per_group or 0
            return CountDistinctExact(column, outputs, cap, pipeline)
        return CountDistinctSketch(column, outputs, a.spec.precision)
