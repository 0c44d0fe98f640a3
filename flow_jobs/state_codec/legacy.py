"""State blobs pickled before ``flow_jobs.state_codec`` ("version 0").

This module exists only to resume checkpoints (and ``window_standings`` rows) written
before operator state had a format of its own; nothing writes pickles any more.

Those releases pickled dataclasses, so a blob names each class by the module it lived
in then. The map below is frozen: each (module, class) such a release wrote is read
into a plain record of its attributes, then built into today's class by explicit code,
whatever that class is called or wherever it lives now. Any other ``flow_jobs`` name is
refused (no release wrote it); numpy, decimal, datetime and the builtins load as pickle
loads them.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.operators.dedup import DedupState
from flow_jobs.operators.temporal import TemporalState
from flow_jobs.state_codec import S, StateFormatError
from flow_jobs.windows.count import CountState
from flow_jobs.windows.fixed import ReopenState
from flow_jobs.windows.session import SessionState
from flow_jobs.windows.sliding import SlidingState


class _Record:
    """An object of a legacy pickle: its attributes as that release named them (pickle
    fills ``__dict__``), and the (module, class) it was pickled as."""

    pickled_as: tuple[str, str]


@cache
def _record_class(module: str, name: str) -> type[_Record]:
    return type(name, (_Record,), {"pickled_as": (module, name)})


def _frame(r: _Record) -> EventFrame:
    a = vars(r)
    if "seq" in a:  # before the total order: an arrival rank, which keeps its order
        lane, pos = np.zeros(len(a["seq"]), np.int64), a["seq"]
    else:
        lane, pos = a["lane"], a["pos"]
    columns = {n: Values(vars(v)["data"], vars(v)["valid"]) for n, v in a["columns"].items()}
    return EventFrame(a["t"], lane, pos, columns)


def _sliding(r: _Record) -> SlidingState:
    return SlidingState(_frame(vars(r)["frame"]), vars(r)["pending"])


def _session(r: _Record) -> SessionState:
    return SessionState(_frame(vars(r)["frame"]))


def _count(r: _Record) -> CountState:
    a = vars(r)
    # before pending events (numbered on arrival) every event was numbered: ``seen``
    return CountState(_frame(a["frame"]), a["first_index"], a.get("numbered", a.get("seen")))


def _reopen(r: _Record) -> ReopenState:
    a = vars(r)
    return ReopenState(_frame(a["frame"]), a["starts"], a["revisions"])


#: Every (module, class) a pickling release wrote at the top of a state, and how it
#: becomes today's state (frames and their values are read by their state).
_STATES: dict[tuple[str, str], Callable[[_Record], Any]] = {
    ("flow_jobs.windows.sliding", "SlidingState"): _sliding,
    ("flow_jobs.operators.sliding", "SlidingState"): _sliding,
    ("flow_jobs.windows.session", "SessionState"): _session,
    ("flow_jobs.operators.session", "SessionState"): _session,
    ("flow_jobs.windows.count", "CountState"): _count,
    ("flow_jobs.operators.count_based", "CountState"): _count,
    ("flow_jobs.windows.fixed", "ReopenState"): _reopen,
    ("flow_jobs.operators.reopen", "ReopenState"): _reopen,
    ("flow_jobs.operators.dedup", "DedupState"): lambda r: DedupState(**vars(r)),
    ("flow_jobs.operators.temporal", "TemporalState"): lambda r: TemporalState(**vars(r)),
}
_PARTS = {("flow_jobs.operators.frame", "EventFrame"), ("flow_jobs.operators.frame", "Values")}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _STATES or (module, name) in _PARTS:
            return _record_class(module, name)
        if module.split(".")[0] == "flow_jobs":
            raise StateFormatError(
                f"legacy state blob names {module}.{name}, which no flow-jobs release "
                "pickled into state: the blob is not flow-jobs state"
            )
        return super().find_class(module, name)


def _state(record: Any) -> Any:
    if not isinstance(record, _Record) or record.pickled_as not in _STATES:
        raise StateFormatError(f"legacy state blob holds {type(record).__name__}, not a state")
    return _STATES[record.pickled_as](record)


#: By the saved name of the class asked for: today's object from the unpickled one.
_UPGRADES: dict[str, Callable[[Any, type[Any]], Any]] = {
    # count windows' state before they had a timer has none; timer_rule came later
    "window.group": lambda d, cls: cls(_state(d["state"]), d.get("timer"), d.get("timer_rule")),
    "dedup.bucket": lambda r, cls: _state(r),
    "temporal_join.bucket": lambda r, cls: _state(r),
    "top_n.row": lambda d, cls: cls(d),  # a row's values: builtins, decimals, datetimes
}


def load(data: bytes, cls: type[S]) -> S:
    """The state of class ``cls`` from a legacy pickle."""
    name = cls.STATE_TYPE
    if name not in _UPGRADES:
        raise StateFormatError(f"{name!r} state was never pickled: the blob has no header")
    state = _UPGRADES[name](_Unpickler(io.BytesIO(data)).load(), cls)
    if not isinstance(state, cls):
        raise StateFormatError(
            f"legacy state blob holds {type(state).__name__}, expected {cls.__name__}"
        )
    return state
