"""Count-based windows (seed 002, Quix Streams semantics).

A group's events are numbered 0, 1, 2, ... in arrival order (Kafka topic, partition,
offset within a micro-batch; micro-batches in order). Window ``k`` holds the events
``[k * stride, k * stride + count - 1]``: tumbling has ``stride = count``, sliding
``stride = 1``, hopping ``stride = step``. A window is emitted when its last event
arrives; a partial window never is. Its bounds are the earliest and latest event time
among its events (the first and last ones, for in-order input), and ``window_index``
is ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flow_jobs.operators.aggregators import Ranges
from flow_jobs.operators.frame import EventFrame


@dataclass
class CountState:
    frame: EventFrame  # arrival-ordered events of windows not complete yet
    first_index: int  # the event number of frame row 0
    seen: int  # events seen so far (first_index + len(frame))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def add(
    state: CountState, new: EventFrame, count: int, stride: int
) -> tuple[CountState, EventFrame, Ranges, np.ndarray]:
    """Append new events; returns the new state, the frame the complete windows index
    into, their ranges and their indices k."""
    frame = state.frame.concat(new)
    before, after = state.seen, state.seen + len(new)
    k_first = max(0, _ceil_div(before - count + 1, stride))
    k_last = (after - count) // stride
    ks = (
        np.arange(k_first, k_last + 1, dtype=np.int64)
        if k_last >= k_first
        else np.empty(0, np.int64)
    )
    lo = ks * stride - state.first_index
    window_frame = frame
    k_open = max(0, _ceil_div(after - count + 1, stride))
    keep_from = k_open * stride  # the first event any open or future window needs
    kept = CountState(
        frame.take(np.arange(keep_from - state.first_index, len(frame))), keep_from, after
    )
    return kept, window_frame, Ranges(lo, lo + count - 1), ks
