"""Window families, one module per family: ``fixed`` (tumbling and hopping), ``cumulate``,
``session``, ``sliding`` and ``count`` (count_tumbling, count_hopping, count_sliding).

Each family's module holds all of it:

* its spec model, a subclass of ``flow_jobs.spec.windows.WindowSpec`` with its size keys
  and rules; ``[transform.window]`` is read with the union of the models below,
  discriminated on ``kind``;
* where it runs (``runs_natively``; ``WindowSpec.engine`` adds the rules that move any
  kind to the state API), Spark's window column where it has one (``native_window``),
  what ``validate --plan`` and the CLI say of it, and its state-size bound;
* its state-API logic (a ``flow_jobs.windows.family.StateFamily``: ``add``, ``close``,
  ``due``, ``open_windows``, ``close_rules`` for ``inspect``...), which one generic
  ``StatefulProcessor`` drives (``flow_jobs.windows.processor``, with the one timer rule
  of ``flow_jobs.windows.timers``).

A new family is one module and one member of ``AnyWindow``; ``tests/test_window_families.py``
fails while it lacks a part.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from flow_jobs.spec.windows import KINDS, WindowSpec
from flow_jobs.windows.count import CountWindow
from flow_jobs.windows.cumulate import CumulateWindow
from flow_jobs.windows.fixed import FixedWindow
from flow_jobs.windows.session import SessionWindow
from flow_jobs.windows.sliding import SlidingWindow

#: ``[transform.window]``: the model of its ``kind``.
AnyWindow = Annotated[
    FixedWindow | CumulateWindow | SessionWindow | SlidingWindow | CountWindow,
    Field(discriminator="kind"),
]

#: Every window kind (``KINDS`` holds each one's model, in the order above).
WindowKind = Literal[tuple(KINDS)]  # type: ignore[valid-type]
TIME_KINDS = tuple(k for k, model in KINDS.items() if not model.COUNTS_EVENTS)
COUNT_KINDS = tuple(k for k, model in KINDS.items() if model.COUNTS_EVENTS)
#: Kinds whose windows can reopen (late_data = "reopen"): fixed bounds.
REOPEN_KINDS = tuple(k for k, model in KINDS.items() if model.REOPEN_REFUSED is None)


@cache
def window_adapter() -> TypeAdapter[WindowSpec]:
    return TypeAdapter(AnyWindow)


def Window(**keys: Any) -> WindowSpec:
    """``[transform.window]`` from keyword arguments: the model of ``kind`` (the Python
    facade's ``flow_jobs.Window``)."""
    return window_adapter().validate_python(keys)


__all__ = [
    "COUNT_KINDS",
    "KINDS",
    "REOPEN_KINDS",
    "TIME_KINDS",
    "AnyWindow",
    "CountWindow",
    "CumulateWindow",
    "FixedWindow",
    "SessionWindow",
    "SlidingWindow",
    "Window",
    "WindowKind",
    "window_adapter",
]
