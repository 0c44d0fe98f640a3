"""Every aggregator is one unit with every part (``flow_jobs.aggregations``).

A part left out used to fail silently: an aggregator missing from ``inspect``'s table of
Spark's buffers showed "n/a", one missing from the pre-aggregation table simply never
pre-aggregated. Walking the registry here makes a missing part a failing test.
"""

from __future__ import annotations

import inspect
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from pyspark.sql.types import DecimalType, DoubleType

from flow_jobs.aggregations import AGGREGATORS, Aggregator, NotDecoded, StateBuffer
from flow_jobs.aggregations.base import AggregationInput
from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.kernels.ranges import Context, Ranges, WindowAggregator
from flow_jobs.partial_parts import PARTIAL_PARTS
from flow_jobs.spec.models import Aggregation

#: Aggregators whose native buffer holds the window's items, not its value: ``inspect``
#: says "n/a" for them by design (the spec reference, ``flow-jobs inspect``).
ITEMS_ONLY = {"collect", "reduce"}


def test_every_aggregator_kind_has_one_unit_with_every_part() -> None:
    for name, unit in AGGREGATORS.items():
        assert isinstance(unit, Aggregator) and unit.name == name
        assert not inspect.isabstract(type(unit)), name
        assert unit.native_form and unit.state_form, name
        assert unit.state_functions(False), f"{name}: inspect could not read its state"
        if unit.partial_parts is not None:  # it pre-aggregates: the merging layout too
            assert unit.state_functions(True), name
        for part in unit.partial_parts or ():  # the reader resolves its parts by name
            assert PARTIAL_PARTS[part.name] is part, (name, part.name)


#: What the spec needs besides agg, column and as
KEYS = {
    "reduce": {
        "initializer": "tests.reduce_fns:start_trail",
        "reducer": "tests.reduce_fns:extend_trail",
        "result_type": "STRING",
    },
}


def _input(agg: str, data_type: Any = None) -> AggregationInput:
    column = None if agg == "count" else "x"
    spec = Aggregation(agg=agg, column=column, as_="a", **KEYS.get(agg, {}))
    return AggregationInput(spec, 0, None, data_type, ())


def _read(agg: str, merging: bool, *buffers: dict[str, Any], data_type: Any = None) -> Any:
    """What ``inspect`` shows for ``agg`` from Spark's buffers, one dict per function of
    its ``state_functions`` in that layout."""
    unit = AGGREGATORS[agg]
    functions = unit.state_functions(merging)
    assert len(functions) == len(buffers), (agg, functions)
    given = [StateBuffer(f, b) for f, b in zip(functions, buffers, strict=True)]
    return unit.open_value(_input(agg, data_type), given, merging)


def test_every_aggregator_reads_its_open_value_unless_its_buffer_holds_items() -> None:
    for name in ITEMS_ONLY:
        with pytest.raises(NotDecoded, match=r"\w"):  # with the reason the note shows
            _read(name, False, {"buf": b"items"})
    assert AGGREGATORS["reduce"].not_inspected
    assert all(AGGREGATORS[n].not_inspected is None for n in set(AGGREGATORS) - {"reduce"})


def test_buffers_decode_as_inspect_shows_them() -> None:
    """Spark's buffer values as ``inspect`` reads them from the state, plain and merging
    the reader's partials (the layouts are pinned against Spark by
    tests/test_inspect_buffers.py)."""
    assert _read("count", False, {"count": 7}) == _read("count", True, {"sum": 7}) == 7
    for merging in (False, True):
        assert _read("sum", merging, {"sum": 2.5}) == 2.5
        assert _read("sum", merging, {"sum": 0, "isEmpty": True}) is None  # no value yet
        assert _read("sum", merging, {"sum": None, "isEmpty": False}) is None  # overflow
        assert _read("min", merging, {"min": "a"}) == "a"
        assert _read("max", merging, {"max": 3}) == 3
        first = {"min": {"t": 1, "lane": 0, "pos": 0, "v": "x"}}
        assert _read("first", merging, first) == "x"
        assert _read("last", merging, {"max": None}) is None
    assert _read("avg", False, {"sum": 6.0, "count": 4}, data_type=DoubleType()) == 1.5
    assert _read("avg", True, {"sum": 6.0}, {"sum": 4}, data_type=DoubleType()) == 1.5
    assert _read("avg", False, {"sum": None, "count": 0}) is None
    assert _read("avg", True, {"sum": None}, {"sum": 0}) is None
    # DECIMAL(10, 2): Spark's average has scale 6, rounded half up
    third = _read("avg", False, {"sum": Decimal("2.00"), "count": 3}, data_type=DecimalType(10, 2))
    assert third == Decimal("0.666667") and str(third) == "0.666667"
    assert _read("count_distinct", False, {"buf": None}) == 0
    with pytest.raises(NotDecoded, match="not a DataSketches HLL sketch"):
        _read("count_distinct", False, {"buf": b"not a sketch"})


def test_every_aggregator_computes_on_the_state_api() -> None:
    """Each unit's state-API implementation runs over a frame and writes one column per
    output: the operator and ``inspect`` both call it."""
    times = np.array([1, 2, 2, 5], np.int64)
    x = Values(np.array([3.0, np.nan, -1.0, 2.0]), np.array([True, True, False, True]))
    frame = EventFrame(times, np.zeros(4, np.int64), np.arange(4, dtype=np.int64), {"x": x})
    ranges = Ranges(np.array([0, 1], np.int64), np.array([3, 2], np.int64))
    ctx = Context.of(frame, {"x": "float"}, lambda i: f"window {i}")
    keys = {**KEYS, "count_distinct": {"mode": "exact", "max_distinct_values_per_group": 10}}
    for name, unit in AGGREGATORS.items():
        spec = Aggregation(agg=name, column="x", as_="a", **keys.get(name, {}))
        operator = unit.state(AggregationInput(spec, 0, None, None, ()), "x", "p")
        assert isinstance(operator, WindowAggregator), name
        columns = operator.compute(ctx, ranges)
        assert len(columns) == len(spec.output_names()), name
        assert all(len(c) == len(ranges) for c in columns), name
