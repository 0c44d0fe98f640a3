"""Every aggregator is one unit with every part (``flow_jobs.plan.aggregations``).

A part left out used to fail silently: an aggregator missing from ``inspect``'s table of
Spark's buffers showed "n/a", one missing from the pre-aggregation table simply never
pre-aggregated. Walking the registry here makes a missing part a failing test.
"""

from __future__ import annotations

import inspect
import typing

from flow_jobs.io.combine import PARTS
from flow_jobs.plan.aggregations import AGGREGATORS, NOT_DECODED, Aggregator
from flow_jobs.spec.models import AggKind

#: Aggregators whose native buffer holds the window's items, not its value: ``inspect``
#: says "n/a" for them by design (the spec reference, ``flow-jobs inspect``).
ITEMS_ONLY = {"collect", "reduce"}


def test_every_aggregator_kind_has_one_unit_with_every_part() -> None:
    assert set(AGGREGATORS) == set(typing.get_args(AggKind))
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
