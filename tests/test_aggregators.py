"""Every aggregator is one unit with every part (``flow_jobs.aggregations``).

A part left out used to fail silently: an aggregator missing from ``inspect``'s table of
Spark's buffers showed "n/a", one missing from the pre-aggregation table simply never
pre-aggregated. Walking the registry here makes a missing part a failing test.
"""

from __future__ import annotations

import inspect

import numpy as np

from flow_jobs.aggregations import AGGREGATORS, NOT_DECODED, Aggregator
from flow_jobs.aggregations.base import AggregationInput
from flow_jobs.io.combine import PARTS
from flow_jobs.operators.frame import EventFrame, Values
from flow_jobs.operators.ranges import Context, Ranges, WindowAggregator
from flow_jobs.spec.models import Aggregation

#: Aggregators whose native buffer holds the window's items, not its value: ``inspect``
#: says "n/a" for them by design (the spec reference, ``flow-jobs inspect``).
ITEMS_ONLY = {"collect", "reduce"}


def test_every_aggregator_kind_has_one_unit_with_every_part() -> None:
    for name, unit in AGGREGATORS.items():
        assert isinstance(unit, Aggregator) and unit.name == name
        assert not inspect.isabstract(type(unit)), name
        assert unit.native_form and unit.state_form, name
        assert unit.buffer_fields, f"{name}: no buffer_fields (inspect could not read it)"
        assert unit.partial_parts is None or set(unit.partial_parts) <= set(PARTS), name


def test_every_aggregator_reads_its_open_value_unless_its_buffer_holds_items() -> None:
    decodes = {
        name
        for name, unit in AGGREGATORS.items()
        if type(unit).partial_value is not Aggregator.partial_value
    }
    assert decodes == set(AGGREGATORS) - ITEMS_ONLY
    for name in ITEMS_ONLY:
        assert AGGREGATORS[name].partial_value([None]) == NOT_DECODED


def test_buffers_decode_as_inspect_shows_them() -> None:
    """Spark's buffer values as ``inspect`` reads them from the state (the layouts are
    pinned against Spark by tests/test_inspect.py)."""
    value = {name: unit.partial_value for name, unit in AGGREGATORS.items()}
    assert value["count"]([7]) == 7
    assert value["sum"]([2.5]) == 2.5
    assert value["sum"]([None, True]) is None  # a DECIMAL sum with no value yet
    assert value["avg"]([6.0, 4]) == 1.5
    assert value["avg"]([None, 0]) is None
    assert value["min"](["a"]) == "a" and value["max"]([3]) == 3
    assert value["first"]([{"t": 1, "lane": 0, "pos": 0, "v": "x"}]) == "x"
    assert value["last"]([None]) is None
    assert value["count_distinct"]([None]) == 0
    assert value["count_distinct"]([b"not a sketch"]) == NOT_DECODED


def test_every_aggregator_computes_on_the_state_api() -> None:
    """Each unit's state-API implementation runs over a frame and writes one column per
    output: the operator and ``inspect`` both call it."""
    times = np.array([1, 2, 2, 5], np.int64)
    x = Values(np.array([3.0, np.nan, -1.0, 2.0]), np.array([True, True, False, True]))
    frame = EventFrame(times, np.zeros(4, np.int64), np.arange(4, dtype=np.int64), {"x": x})
    ranges = Ranges(np.array([0, 1], np.int64), np.array([3, 2], np.int64))
    ctx = Context.of(frame, {"x": "float"}, lambda i: f"window {i}")
    keys = {
        "reduce": {
            "initializer": "tests.reduce_fns:start_trail",
            "reducer": "tests.reduce_fns:extend_trail",
            "result_type": "STRING",
        },
        "count_distinct": {"mode": "exact", "max_distinct_values_per_group": 10},
    }
    for name, unit in AGGREGATORS.items():
        spec = Aggregation(agg=name, column="x", as_="a", **keys.get(name, {}))
        operator = unit.state(AggregationInput(spec, 0, None, None, ()), "x", "p")
        assert isinstance(operator, WindowAggregator), name
        columns = operator.compute(ctx, ranges)
        assert len(columns) == len(spec.output_names()), name
        assert all(len(c) == len(ranges) for c in columns), name
