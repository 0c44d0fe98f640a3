"""The window join (``[transform.window_join]``), on Spark's state API.

The rule (docs/spec-reference.md, "[transform.window_join]"), as Flink SQL's window
join: the rows of the left and the right source that fall in the same window (tumbling,
hopping or cumulate, both sides' windows alike) with equal keys are joined, once, when
the watermark closes the window:

* ``inner``: each pair of a left and a right row with equal keys;
* ``left`` / ``right`` / ``full``: the pairs, and each row of the kept side(s) with no
  pair, the other side's columns NULL;
* ``semi``: each left row that has a pair, once; ``anti``: each left row that has none.

A NULL key equals nothing (SQL's ``=``): such a row has no pair.

Spark's stream-stream join emits a pair as soon as both rows are there and cannot
anti-join; this operator holds each row in its window(s) until the watermark (the lower
of both sources', ``plan.sources.SourceWatermark``) reaches the window's end. Every row
still to come is then after the watermark, so after the window: a row of it that comes
later is late, taken out at its source, and the window's result is final, whatever the
micro-batches.

State: keys are hashed into ``BUCKETS`` groups (``flow_jobs.operators.buckets``); each
group keeps one saved ``WindowJoinState``: its held rows, each with its window. A
window's rows leave the state when it is joined.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from flow_jobs.kernels.timers import Firing
from flow_jobs.operators.buckets import BucketProcessor, rows_field, rows_of
from flow_jobs.state_codec import Fields

if TYPE_CHECKING:
    import pandas as pd

#: The input columns (no leading underscore: the pandas form of the state API renames
#: such columns): the bucket, the side (0 left, 1 right), the row's window (epoch µs),
#: its event time and tie-break of equal times (``flow_jobs.plan.ordering``), its keys
#: and the row (JSON strings).
BUCKET = "flowwj_bucket"
SIDE = "flowwj_side"
START = "flowwj_start"
END = "flowwj_end"
TIME = "flowwj_t"
LANE = "flowwj_lane"
POSITION = "flowwj_position"
KEY = "flowwj_key"
ROW = "flowwj_row"
#: Output: the window (epoch µs), the left and the right row as JSON strings (NULL: no
#: row on that side), and the window's end as the event time the output carries.
OUT_START = "__flow_wj_start"
OUT_END = "__flow_wj_end"
LEFT_ROW = "__flow_wj_left"
RIGHT_ROW = "__flow_wj_right"
RELEASED_TIME = "__flow_wj_time"

#: The state variable each bucket keeps (``flow-jobs inspect`` reads it).
STATE_VARIABLE = "window_join"

#: A held row: (window end, window start, side, event time, lane, position, key, row),
#: all times epoch µs; key and row JSON strings (key None: a NULL key).
Held = tuple[int, int, int, int, int, int, Hashable, Any]
_HELD = {"end": pa.int64(), "start": pa.int64(), "side": pa.int8(), "t": pa.int64()}
_HELD |= {"lane": pa.int64(), "position": pa.int64(), "key": pa.string(), "row": pa.string()}


@dataclass
class WindowJoinState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "window_join.bucket"

    #: rows of windows the watermark has not closed yet
    held: list[Held] = field(default_factory=list)

    def to_fields(self) -> dict[str, pa.Array]:
        return {"held": rows_field(self.held, _HELD)}

    @classmethod
    def from_fields(cls, fields: Fields) -> WindowJoinState:
        return cls(rows_of(fields, "held", _HELD))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Joined:
    start: int
    end: int
    left: Any | None  # a row (None: no left row)
    right: Any | None


def join_window(
    start: int, end: int, rows: list[Held], how: str
) -> list[Joined]:  # fmt: skip
    """One window's rows (of one bucket) joined as ``how`` says, in the order of events
    of the left rows, then the unpaired right ones."""
    left = sorted((r for r in rows if r[2] == 0), key=lambda r: r[3:6])
    right = sorted((r for r in rows if r[2] == 1), key=lambda r: r[3:6])
    by_key: dict[Hashable, list[Held]] = defaultdict(list)
    for r in right:
        if r[6] is not None:  # a NULL key has no pair
            by_key[r[6]].append(r)
    paired: set[int] = set()
    out: list[Joined] = []
    for lrow in left:
        pairs = by_key.get(lrow[6], []) if lrow[6] is not None else []
        if how == "semi":
            if pairs:
                out.append(Joined(start, end, lrow[7], None))
            continue
        if how == "anti":
            if not pairs:
                out.append(Joined(start, end, lrow[7], None))
            continue
        for rrow in pairs:
            out.append(Joined(start, end, lrow[7], rrow[7]))
            paired.add(id(rrow))
        if not pairs and how in ("left", "full"):
            out.append(Joined(start, end, lrow[7], None))
    if how in ("right", "full"):
        out += [Joined(start, end, None, r[7]) for r in right if id(r) not in paired]
    return out


def release(state: WindowJoinState, watermark: int, how: str) -> list[Joined]:
    """The windows whose end the watermark reached (µs), joined, in the order of their
    ends and starts; their rows leave the state."""
    ready: dict[tuple[int, int], list[Held]] = defaultdict(list)
    kept: list[Held] = []
    for row in state.held:
        if row[0] <= watermark:
            ready[(row[0], row[1])].append(row)
        else:
            kept.append(row)
    state.held = kept
    out: list[Joined] = []
    for end, start in sorted(ready):
        out += join_window(start, end, ready[(end, start)], how)
    return out


def due(state: WindowJoinState) -> int | None:
    """The lowest watermark (µs) at which a window of the state closes."""
    return min((r[0] for r in state.held), default=None)


class WindowJoinProcessor(BucketProcessor):
    """One bucket of keys (``transformWithStateInPandas``): rows held in their windows
    until the watermark reaches a window's end, then the window joined.

    Rows come in as (side, window start and end µs, event time µs, tie-break, key, row),
    the keys and the row one JSON string each (``flow_jobs.window_join.compile``), as in
    the temporal join: pandas sees only integers and strings."""

    def __init__(self, how: str) -> None:
        self.how = how

    state_variable = STATE_VARIABLE
    STATE = WindowJoinState

    def empty(self) -> WindowJoinState:
        return WindowJoinState()

    def due(self, state: WindowJoinState) -> int | None:
        return due(state)

    def holds(self, state: WindowJoinState) -> bool:
        return bool(state.held)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        state, timer = self._load()
        columns = (END, START, SIDE, TIME, LANE, POSITION, KEY, ROW)
        for frame in rows:
            state.held += zip(*(frame[c].tolist() for c in columns), strict=True)
        self._save(state, timer, None)
        return iter(())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        import pandas as pd  # not at import: Spark's state workers start often

        watermark = timerValues.getCurrentWatermarkInMs()
        state, timer = self._load()
        joined = release(state, watermark * 1000, self.how)
        self._save(state, timer, Firing(expiredTimerInfo.getExpiryTimeInMs(), watermark))
        if joined:
            ends = pd.to_datetime([j.end for j in joined], unit="us", utc=True)
            yield pd.DataFrame(
                {
                    OUT_START: pd.to_datetime([j.start for j in joined], unit="us", utc=True),
                    OUT_END: ends,
                    LEFT_ROW: [j.left for j in joined],
                    RIGHT_ROW: [j.right for j in joined],
                    RELEASED_TIME: ends,
                }
            )
