"""Count windows do not depend on the micro-batch cut (issue 11, item 1): the operator
driven as Spark drives it, over random cuts of a multi-partition stream with equal
times and disorder, against the rule of docs/spec-reference.md ("Order of events"):
a group's events numbered in (event time, Kafka position) order, once the watermark
has reached them."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.windows import count as count_based

LATENESS = 50

Event = tuple[int, int, int, int]  # (time, lane, position, id)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Event], list[int], int, int, bool]:
    """Events in production order (time roughly increasing, disorder within the
    lateness, ties), each on one of three partitions; cut points; the window."""
    n = draw(st.integers(1, 60))
    times, lanes, base = [], [], 1_000
    for _ in range(n):
        base += draw(st.integers(0, 20))
        times.append(base - draw(st.integers(0, LATENESS - 1)))
        lanes.append(draw(st.integers(0, 2)))
    offsets = [0, 0, 0]
    events = []
    for i, (t, lane) in enumerate(zip(times, lanes, strict=True)):
        events.append((t, lane, offsets[lane], i))
        offsets[lane] += 1
    cuts = sorted(draw(st.sets(st.integers(1, max(1, n - 1)), max_size=12)))
    count = draw(st.integers(1, 5))
    stride = draw(st.integers(1, count))
    return events, cuts, count, stride, draw(st.booleans())


def _frame(events: list[Event]) -> EventFrame:
    a = np.array(events, np.int64).reshape(-1, 4)
    ids = Values(a[:, 3], np.ones(len(a), bool))
    return EventFrame(a[:, 0], a[:, 1], a[:, 2], {"id": ids})


def drive(
    batches: list[list[Event]], count: int, stride: int, current: bool
) -> tuple[dict[int, tuple[int, ...]], list[Event], int | None]:
    """Per micro-batch N: rows at or behind Spark's watermark W(N) (highest time of the
    batches before, minus the lateness) are late and never reach the operator; the
    others go through ``add``, then ``number`` at W(N); a last batch without data
    (Spark runs one when the watermark moves) numbers what the final watermark reached.
    Returns the target (window index -> member ids, the latest emit winning), the rows
    that were not late, and the final watermark."""
    state = count_based.CountState(_frame([]), 0, 0)
    target: dict[int, tuple[int, ...]] = {}
    kept: list[Event] = []
    highest: int | None = None

    def write(w: count_based.Windows | None) -> None:
        if w is None:
            return
        ids = w.frame.columns["id"].data
        for k, lo, hi in zip(w.ks, w.ranges.lo, w.ranges.hi, strict=True):
            if not current:
                assert int(k) not in target, f"window {k} emitted twice"
            target[int(k)] = tuple(int(x) for x in ids[lo : hi + 1])

    for batch in [*batches, []]:
        watermark = None if highest is None else highest - LATENESS
        rows = [e for e in batch if watermark is None or e[0] > watermark]
        kept += rows
        state, changed = count_based.add(state, _frame(rows), count, stride, current)
        write(changed)
        if watermark is not None:
            state, complete = count_based.number(state, watermark, count, stride)
            if not current:
                write(complete)
        highest = max([e[0] for e in batch] + ([highest] if highest is not None else []))
    final = None if highest is None else highest - LATENESS
    return target, kept, final


def reference(
    kept: list[Event], watermark: int | None, count: int, stride: int, current: bool
) -> dict[int, tuple[int, ...]]:
    ordered = sorted(kept, key=lambda e: (e[0], e[1], e[2]))
    if not current:
        ordered = [e for e in ordered if watermark is not None and e[0] <= watermark]
    out, k = {}, 0
    while k * stride < len(ordered) and (current or k * stride + count <= len(ordered)):
        out[k] = tuple(e[3] for e in ordered[k * stride : k * stride + count])
        k += 1
    return out


@settings(max_examples=300, deadline=None)
@given(streams())
def test_count_windows_follow_the_total_order_under_any_cut(
    case: tuple[list[Event], list[int], int, int, bool],
) -> None:
    events, cuts, count, stride, current = case
    bounds = [0, *cuts, len(events)]
    batches = [events[a:b] for a, b in pairwise(bounds)]
    target, kept, watermark = drive(batches, count, stride, current)
    assert target == reference(kept, watermark, count, stride, current)
    if len(kept) == len(events):  # nothing late: the cut changed nothing at all
        whole, _, _ = drive([events], count, stride, current)
        assert target == whole


def test_rows_arriving_in_the_opposite_order_of_their_positions() -> None:
    """Partition 1's row of time 10 arrives a micro-batch before partition 0's: the
    window still starts with partition 0's (Kafka position breaks the tie)."""
    late_lane, early_lane = (10, 1, 0, 1), (10, 0, 0, 0)
    target, _, _ = drive([[late_lane, (11, 1, 1, 2)], [early_lane, (200, 2, 0, 3)]], 2, 2, False)
    assert target == {0: (0, 1)}
