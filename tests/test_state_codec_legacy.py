"""State pickled before ``flow_jobs.state_codec`` ("version 0") still reads.

The blobs under ``tests/fixtures/state_blobs`` were written by the last release that
pickled state (``make_blobs.py`` says how), and are never written again. Each reads as
today's class with the values that release saved, and is then written in the new
format and read back the same (a resumed checkpoint rewrites each group it touches).
"""

from __future__ import annotations

import datetime as dt
import pickle
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from flow_jobs import state_codec
from flow_jobs.dedup.processor import DedupState
from flow_jobs.kernels.frame import ColumnKind, EventFrame
from flow_jobs.state_codec import StateFormatError
from flow_jobs.temporal_join.processor import TemporalState
from flow_jobs.top_n.ranking import StandingRow
from flow_jobs.windows.count import CountState
from flow_jobs.windows.fixed import ReopenState
from flow_jobs.windows.processor import WindowGroup, load_group
from flow_jobs.windows.session import SessionState
from flow_jobs.windows.sliding import SlidingState
from tests.test_state_codec import same, same_state

BLOBS = Path(__file__).parent / "fixtures" / "state_blobs"
I64 = np.iinfo(np.int64)

#: The plan's columns for the fixtures' frames (make_blobs.frame): the object columns
#: with the Arrow types of their Spark columns.
COLUMNS = (
    ColumnKind("n", "int"),
    ColumnKind("x", "float"),
    ColumnKind("page", "object", pa.string()),
    ColumnKind("price", "object", pa.decimal128(10, 2)),
    ColumnKind("day", "object", pa.date32()),
    ColumnKind("attrs", "object", pa.map_(pa.string(), pa.int64())),
)


def blob(name: str) -> bytes:
    return (BLOBS / f"{name}.pickle").read_bytes()


def check_frame(frame: EventFrame) -> None:
    """make_blobs.frame(), as it was pickled."""
    assert frame.t.tolist() == [I64.min + 1, -5, 0, I64.max]
    assert frame.lane.tolist() == [0, 1, 2**31, 3] and frame.pos.tolist() == [7, 0, I64.max, 1]
    c = frame.columns
    assert list(c) == ["n", "x", "page", "price", "day", "attrs"]
    assert c["n"].data.tolist() == [1, 0, I64.max, I64.min]
    assert c["n"].valid.tolist() == [True, False, True, True]
    assert same(c["x"].data.tolist(), [float("nan"), 0.0, float("inf"), -0.0])
    assert list(c["page"].data) == ["a", None, "é", ""]
    assert same(list(c["price"].data), [Decimal("1.50"), None, Decimal("-0.01"), Decimal("0.00")])
    assert list(c["day"].data) == [
        dt.date(1970, 1, 1),
        dt.date(9999, 12, 31),
        None,
        dt.date(1, 1, 1),
    ]
    assert list(c["attrs"].data) == [{"k": 1}, None, {}, {"x": None}]


def rewritten(group: WindowGroup) -> WindowGroup:
    data = state_codec.dump(group)
    assert state_codec.version_of(data) == 1
    return load_group(data)


@pytest.mark.parametrize(
    ("name", "cls", "timer"),
    [
        ("sliding", SlidingState, 12_000),
        ("session", SessionState, 12_000),
        ("count", CountState, None),
        ("fixed", ReopenState, 12_000),
    ],
)
def test_a_pickled_window_group_reads_and_writes_again(name: str, cls: type, timer: Any) -> None:
    data = blob(name)
    assert state_codec.version_of(data) == 0
    group = load_group(data, COLUMNS)
    assert type(group.state) is cls
    assert (group.timer, group.timer_rule) == (timer, 2 if timer else None)
    check_frame(group.state.frame)
    if cls is SlidingState:
        assert group.state.pending.tolist() == [-5, 0]
    if cls is CountState:
        assert (group.state.first_index, group.state.numbered) == (10, 12)
    if cls is ReopenState:
        assert group.state.starts.tolist() == [0, 5_000]
        assert group.state.revisions.tolist() == [0, 3]
    again = rewritten(group)
    assert same_state(again, group)
    check_frame(again.state.frame)  # the maps stay maps: typed by the plan's columns


def test_a_group_pickled_before_the_windows_package_reads() -> None:
    """Old module paths (``flow_jobs.operators.sliding``), a frame's arrival rank
    ``seq`` before the total order, and no timer."""
    group = load_group(blob("sliding_before_windows"), (ColumnKind("n", "int"),))
    assert type(group.state) is SlidingState
    frame = group.state.frame
    assert frame.t.tolist() == [3, 4]
    assert frame.lane.tolist() == [0, 0] and frame.pos.tolist() == [0, 1]
    assert frame.columns["n"].data.tolist() == [1, 2]
    assert group.state.pending.tolist() == [3, 4]
    assert group.timer is None and group.timer_rule is None
    assert same_state(rewritten(group), group)


def test_a_count_group_pickled_before_pending_events_reads() -> None:
    group = load_group(blob("count_before_numbered"), COLUMNS)
    assert (group.state.first_index, group.state.numbered) == (2, 6)
    assert group.timer is None


def test_pickled_dedup_and_temporal_buckets_read() -> None:
    dedup = state_codec.load(blob("dedup"), DedupState)
    assert dedup == DedupState(
        held=[(5, 0, 1, '{"k0":"a"}', '{"a":1}'), (I64.max, 2**31, 0, '{"k0":null}', "{}")],
        passed={'{"k0":"b"}': (-1, 0, 9)},
    )
    temporal = state_codec.load(blob("temporal"), TemporalState)
    assert temporal == TemporalState(
        held=[(5, 0, 1, '{"k0":"EUR"}', '{"order_id":1}')],
        versions={
            '{"k0":"EUR"}': [(1, 0, 0, False, '{"rate":1.1}'), (4, 0, 1, True, None)],
            '{"k0":"USD"}': [(2, 1, 3, False, '{"rate":null}')],
        },
    )
    for state in (dedup, temporal):
        assert state_codec.load(state_codec.dump(state), type(state)) == state


def test_a_pickled_top_n_standing_row_reads() -> None:
    row = state_codec.load(blob("top_n_row"), StandingRow)
    assert same(
        row.record,
        {
            "window_start": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            "window_end": dt.datetime(2024, 1, 1, 0, 0, 5, tzinfo=dt.UTC),
            "user_id": None,
            "total": 2.5,
            "n": 3,
            "price": Decimal("9.99"),
        },
    )


def test_a_pickle_naming_a_class_no_release_wrote_is_refused() -> None:
    data = pickle.dumps({"state": ColumnKind("n", "int")}, protocol=5)
    named = re.escape(f"names {ColumnKind.__module__}.ColumnKind")
    with pytest.raises(StateFormatError, match=named):
        load_group(data)
