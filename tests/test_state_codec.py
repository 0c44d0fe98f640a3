"""Operator state in its own format (``flow_jobs.state_codec``): every state type comes
back from a blob as it went in, a blob is no pickle and says its version, blobs pickled
by earlier releases (``tests/fixtures/state_blobs``) still read, and a version from the
future is refused by name.

Object columns are made as Spark hands them to the operator: Arrow values through
PySpark's own pandas conversion (numpy arrays for arrays, dicts for maps and structs).
"""

from __future__ import annotations

import datetime as dt
import math
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.conversion import ArrowArrayToPandasConversion
from pyspark.sql.pandas.types import from_arrow_type

from flow_jobs import state_codec
from flow_jobs.dedup.processor import DedupState
from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.state_codec import StateFormatError
from flow_jobs.temporal_join.processor import TemporalState
from flow_jobs.top_n.ranking import StandingRow
from flow_jobs.windows.count import CountState
from flow_jobs.windows.fixed import ReopenState
from flow_jobs.windows.processor import WindowGroup, load_group
from flow_jobs.windows.session import SessionState
from flow_jobs.windows.sliding import SlidingState

BLOBS = Path(__file__).parent / "fixtures" / "state_blobs"
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.none() | st.text(max_size=8)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, arrays by dtype and elements, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and all(map(same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def same_state(a: Any, b: Any) -> bool:
    """Two states (dataclasses, frames, values) field by field."""
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(
            same_state(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__
        )
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_state(a[k], b[k]) for k in a)
    return same(a, b)


# -- what Spark hands the operator ---------------------------------------------------

#: Arrow types of object columns, and Python values for them (None: NULL).
OBJECT_TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "string": (pa.string(), st.text()),
    "binary": (pa.binary(), st.binary(max_size=6)),
    "boolean": (pa.bool_(), st.booleans()),
    "decimal": (
        pa.decimal128(10, 2),
        st.decimals(-(10**7), 10**7, places=2, allow_nan=False, allow_infinity=False),
    ),
    "date": (pa.date32(), st.dates()),
    "array": (pa.list_(pa.int64()), st.lists(st.none() | I64, max_size=3)),
    "map": (
        pa.map_(pa.string(), pa.int32()),
        st.dictionaries(st.text(max_size=3), st.none() | st.integers(-(2**31), 2**31 - 1)),
    ),
    "struct": (
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        st.fixed_dictionaries({"a": st.none() | st.integers(0, 9), "b": TEXT}),
    ),
    "timestamps": (
        pa.list_(pa.timestamp("us", tz="UTC")),
        st.lists(st.datetimes(timezones=st.just(dt.UTC)), max_size=2),
    ),
}


def spark_objects(values: list[Any], arrow_type: pa.DataType) -> np.ndarray:
    """``values`` as the operator gets them: PySpark's conversion of their Arrow array."""
    array = pa.array(values, arrow_type)
    series = ArrowArrayToPandasConversion.convert(
        array, from_arrow_type(arrow_type), timezone="UTC", struct_in_pandas="dict"
    )
    out = np.empty(len(values), object)
    out[:] = series.to_numpy(dtype=object)
    return out


@st.composite
def frames(draw: st.DrawFn, max_rows: int = 6) -> EventFrame:
    n = draw(st.integers(0, max_rows))
    ints = st.lists(I64, min_size=n, max_size=n).map(lambda v: np.array(v, np.int64))
    valid = st.lists(st.booleans(), min_size=n, max_size=n).map(lambda v: np.array(v, bool))
    floats = st.lists(st.floats(), min_size=n, max_size=n).map(lambda v: np.array(v, np.float64))
    columns = {"n": Values(draw(ints), draw(valid)), "x": Values(draw(floats), draw(valid))}
    for name in draw(st.lists(st.sampled_from(sorted(OBJECT_TYPES)), unique=True, max_size=3)):
        arrow_type, values = OBJECT_TYPES[name]
        drawn = draw(st.lists(st.none() | values, min_size=n, max_size=n))
        objects = spark_objects(drawn, arrow_type)
        columns[name] = Values(objects, np.array([v is not None for v in drawn]), arrow_type)
    return EventFrame(draw(ints), draw(ints), draw(ints), columns)


def _int64s(n: int | None = None) -> st.SearchStrategy[np.ndarray]:
    size = {"max_size": 5} if n is None else {"min_size": n, "max_size": n}
    return st.lists(I64, **size).map(lambda v: np.array(v, np.int64))


@st.composite
def family_states(draw: st.DrawFn) -> Any:
    frame = draw(frames())
    kind = draw(st.sampled_from(["sliding", "session", "count", "fixed"]))
    if kind == "sliding":
        return SlidingState(frame, draw(_int64s()))
    if kind == "session":
        return SessionState(frame)
    if kind == "count":
        return CountState(frame, draw(I64), draw(I64))
    keys = draw(_int64s())
    return ReopenState(frame, keys, draw(_int64s(len(keys))))


held = st.tuples(I64, I64, I64, st.text(max_size=6), st.text(max_size=6))
versions = st.lists(
    st.tuples(I64, I64, I64, st.booleans(), TEXT).map(lambda v: v if not v[3] else (*v[:4], None)),
    min_size=1,
    max_size=3,
)


# -- round trips ---------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(family_states(), st.none() | I64, st.none() | st.integers(0, 9))
def test_a_window_group_comes_back_as_it_was_saved(state: Any, timer: Any, rule: Any) -> None:
    group = WindowGroup(state, timer, rule)
    back = load_group(state_codec.dump(group))
    assert same_state(back, group)
    # a state changes in place (a reopened window's revision): arrays come back writable
    assert back.state.frame.t.flags.writeable


@settings(max_examples=150, deadline=None)
@given(st.lists(held, max_size=4), st.dictionaries(st.text(max_size=4), st.tuples(I64, I64, I64)))
def test_a_dedup_bucket_comes_back_as_it_was_saved(records: list, passed: dict) -> None:
    state = DedupState(records, passed)
    assert same_state(state_codec.load(state_codec.dump(state), DedupState), state)


@settings(max_examples=150, deadline=None)
@given(st.lists(held, max_size=4), st.dictionaries(st.text(max_size=4), versions, max_size=3))
def test_a_temporal_join_bucket_comes_back_as_it_was_saved(records: list, kept: dict) -> None:
    state = TemporalState(records, kept)
    assert same_state(state_codec.load(state_codec.dump(state), TemporalState), state)


ROW = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("user_id", pa.string()),
        ("n", pa.int64()),
        ("total", pa.float64()),
        ("price", pa.decimal128(12, 3)),
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "window_start": st.none() | st.datetimes(timezones=st.just(dt.UTC)),
            "user_id": TEXT,
            "n": st.none() | I64,
            "total": st.none() | st.floats(),
            "price": st.none()
            | st.decimals(-(10**8), 10**8, places=3, allow_nan=False, allow_infinity=False),
        }
    )
)
def test_a_top_n_standing_row_comes_back_as_it_was_saved(drawn: dict[str, Any]) -> None:
    record = {f.name: drawn[f.name] for f in ROW}  # the output's order, as rows hold it
    back = state_codec.load(state_codec.dump(StandingRow(record, ROW)), StandingRow)
    assert same(back.record, record)


def test_empty_states_come_back_empty() -> None:
    frame = EventFrame.empty([])
    for state in (
        WindowGroup(SlidingState(frame, np.empty(0, np.int64))),
        WindowGroup(ReopenState(frame, np.empty(0, np.int64), np.empty(0, np.int64))),
    ):
        assert same_state(load_group(state_codec.dump(state)), state)
    for bucket in (DedupState(), TemporalState()):
        assert state_codec.load(state_codec.dump(bucket), type(bucket)) == bucket


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["string", "binary", "boolean", "decimal", "date"]), st.data())
def test_flat_object_values_read_back_as_spark_hands_them(name: str, data: st.DataObject) -> None:
    """The quick path for flat types gives what PySpark's own conversion gives."""
    arrow_type, values = OBJECT_TYPES[name]
    drawn = data.draw(st.lists(st.none() | values, max_size=5))
    objects = spark_objects(drawn, arrow_type)
    frame = EventFrame(*(np.zeros(len(drawn), np.int64),) * 3, {})
    frame.columns["v"] = Values(objects, np.array([v is not None for v in drawn]), arrow_type)
    back = load_group(state_codec.dump(WindowGroup(SessionState(frame))))
    assert same(back.state.frame.columns["v"].data, objects)


# -- the format ----------------------------------------------------------------------


def test_a_new_blob_is_no_pickle_and_carries_its_version_and_type() -> None:
    frame = EventFrame(np.array([1]), np.array([0]), np.array([5]), {})
    data = state_codec.dump(WindowGroup(SessionState(frame), 7, 2))
    assert data[:4] == b"FJST" and data[:1] != b"\x80"  # every pickle of state began 0x80
    version, length = struct.unpack_from(">HH", data, 4)
    assert version == 1 == state_codec.version_of(data)
    assert data[8 : 8 + length] == b"window.group"
    with pytest.raises((pickle.UnpicklingError, ValueError)):
        pickle.loads(data)
    # the body is plain Arrow IPC: any Arrow reader opens it
    body = pa.ipc.open_stream(data[8 + length :]).read_all()
    assert body.column("family").to_pylist() == ["window.session"]
    assert body.column("timer").to_pylist() == [7]


def test_a_blob_of_an_unknown_future_version_is_refused_by_name() -> None:
    data = bytearray(state_codec.dump(DedupState()))
    struct.pack_into(">H", data, 4, 2)
    with pytest.raises(StateFormatError, match=r"state blob format version 2 is not one"):
        state_codec.load(bytes(data), DedupState)


def test_a_blob_of_another_state_type_is_refused() -> None:
    data = state_codec.dump(DedupState())
    with pytest.raises(StateFormatError, match=r"holds 'dedup.bucket', expected 'temporal"):
        state_codec.load(data, TemporalState)


def test_object_values_without_their_arrow_type_are_not_guessed() -> None:
    maps = np.empty(1, object)
    maps[0] = {"k": 1}
    frame = EventFrame(np.zeros(1, np.int64), *(np.zeros(1, np.int64),) * 2, {})
    frame.columns["attrs"] = Values(maps, np.ones(1, bool))
    with pytest.raises(ValueError, match="frame column 'attrs' holds objects of no Arrow type"):
        state_codec.dump(WindowGroup(SessionState(frame)))
