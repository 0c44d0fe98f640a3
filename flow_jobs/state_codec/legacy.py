"""State blobs pickled before ``flow_jobs.state_codec`` ("version 0").

This module exists only to resume checkpoints (and ``window_standings`` rows) written
before operator state had a format of its own; nothing writes pickles any more.

Those releases pickled dataclasses, so a blob names each class by the module it lived
in then. The list of those names is frozen (``PICKLED_STATES``): each is read into a
plain record of its attributes, then built into today's class by explicit code that
today's class's module registers (``reads``), whatever the class is called or wherever
it lives now; this module imports none of them. Any other ``flow_jobs`` name is refused
(no release wrote it); numpy, decimal, datetime and the builtins load as pickle loads
them.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

from flow_jobs.state_codec import S, StateFormatError

B = TypeVar("B", bound=Callable[[Any], Any])


class _Record:
    """An object of a legacy pickle: its attributes as that release named them (pickle
    fills ``__dict__``), and the (module, class) it was pickled as."""

    pickled_as: tuple[str, str]


@cache
def _record_class(module: str, name: str) -> type[_Record]:
    return type(name, (_Record,), {"pickled_as": (module, name)})


#: Every (module, class) a pickling release wrote at the top of a state. Frozen: nothing
#: pickles state any more.
PICKLED_STATES = frozenset(
    {
        ("flow_jobs.windows.sliding", "SlidingState"),
        ("flow_jobs.operators.sliding", "SlidingState"),
        ("flow_jobs.windows.session", "SessionState"),
        ("flow_jobs.operators.session", "SessionState"),
        ("flow_jobs.windows.count", "CountState"),
        ("flow_jobs.operators.count_based", "CountState"),
        ("flow_jobs.windows.fixed", "ReopenState"),
        ("flow_jobs.operators.reopen", "ReopenState"),
        ("flow_jobs.operators.dedup", "DedupState"),
        ("flow_jobs.operators.temporal", "TemporalState"),
    }
)
#: What those states held inside, read by their state's builder
#: (``flow_jobs.kernels.frame.legacy_frame``).
_PARTS = frozenset(
    {("flow_jobs.operators.frame", "EventFrame"), ("flow_jobs.operators.frame", "Values")}
)

#: How each of ``PICKLED_STATES`` becomes today's state: registered by the module of
#: today's state class (``reads``), wherever it lives now.
_STATES: dict[tuple[str, str], Callable[[Any], Any]] = {}


def reads(*pickled_as: tuple[str, str]) -> Callable[[B], B]:
    """Register the decorated function as the builder of today's state from a legacy
    record (its attributes: ``vars(record)``) pickled as any of ``pickled_as``."""

    def register(build: B) -> B:
        for name in pickled_as:
            if name not in PICKLED_STATES:
                raise ValueError(f"no flow-jobs release pickled state as {name}")
            _STATES[name] = build
        return build

    return register


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in PICKLED_STATES or (module, name) in _PARTS:
            return _record_class(module, name)
        if module.split(".")[0] == "flow_jobs":
            raise StateFormatError(
                f"legacy state blob names {module}.{name}, which no flow-jobs release "
                "pickled into state: the blob is not flow-jobs state"
            )
        return super().find_class(module, name)


def _state(record: Any) -> Any:
    if not isinstance(record, _Record) or record.pickled_as not in PICKLED_STATES:
        raise StateFormatError(f"legacy state blob holds {type(record).__name__}, not a state")
    if record.pickled_as not in _STATES:
        module, name = record.pickled_as
        raise StateFormatError(
            f"legacy state blob holds {module}.{name}, whose reader is not loaded: "
            "import the feature whose state it is"
        )
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
