"""A group's buffered events as columnar numpy arrays (the unit of window state).

Spark hands ``transformWithStateInPandas`` pandas frames, in which a nullable BIGINT
becomes float64 (losing precision past 2^53) and a NULL is indistinguishable from NaN.
The plan therefore sends every numeric or timestamp column as two columns: the value
with NULL replaced by 0 (``<name>``) and an ``<name>__null`` flag; other types arrive as
Python objects with ``None`` for NULL. ``EventFrame`` keeps that split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

# Names of the operator's input columns. None starts with "_": PySpark's pandas
# conversion for transformWithStateInPandas renames such columns to _1, _2, ...
NULL_SUFFIX = "__null"
#: Value columns travel under their own prefix (a group key may also be a value).
VALUE_PREFIX = "flowop_v_"
#: Event time in epoch milliseconds (BIGINT).
TIME = "flowop_t"
#: The tie-break of rows of equal event time, a total order no micro-batch cut changes
#: (``flow_jobs.plan.ordering``): LANE is the Kafka topic's rank among the pipeline's
#: topics * 2^31 + the partition, POSITION the offset. Without a Kafka position (SQL
#: that dropped ``_kafka``, a join's output) LANE is 0 and POSITION a hash of the row.
LANE = "flowop_lane"
POSITION = "flowop_pos"


@dataclass(frozen=True)
class ColumnKind:
    """How one input column travels: ``int``, ``float``, ``ts`` (epoch µs) or ``object``."""

    name: str
    kind: str


@dataclass
class Values:
    data: np.ndarray  # int64 / float64 (NULLs hold 0), or object (NULLs hold None)
    valid: np.ndarray  # bool

    def take(self, index: np.ndarray) -> Values:
        return Values(self.data[index], self.valid[index])


@dataclass
class EventFrame:
    """Events of one group: time, the tie-break of equal times, and the columns
    aggregations read. ``(t, lane, pos)`` orders the events totally."""

    t: np.ndarray  # int64 epoch ms
    lane: np.ndarray  # int64 Kafka topic rank * 2^31 + partition (0 without a position)
    pos: np.ndarray  # int64 Kafka offset (a hash of the row without a position)
    columns: dict[str, Values] = field(default_factory=dict)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # State written before the total order (an arrival rank ``seq``) keeps its order.
        if "seq" in state:
            seq = state.pop("seq")
            state["lane"], state["pos"] = np.zeros(len(seq), np.int64), seq
        self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self.t)

    @staticmethod
    def empty(kinds: list[ColumnKind]) -> EventFrame:
        return EventFrame(
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            {k.name: Values(_empty(k.kind), np.empty(0, bool)) for k in kinds},
        )

    def take(self, index: np.ndarray) -> EventFrame:
        return EventFrame(
            self.t[index],
            self.lane[index],
            self.pos[index],
            {n: v.take(index) for n, v in self.columns.items()},
        )

    def slice(self, start: int, stop: int | None = None) -> EventFrame:
        return self.take(np.arange(start, len(self) if stop is None else stop))

    def concat(self, other: EventFrame) -> EventFrame:
        if not len(self):
            return other
        if not len(other):
            return self
        return EventFrame(
            np.concatenate([self.t, other.t]),
            np.concatenate([self.lane, other.lane]),
            np.concatenate([self.pos, other.pos]),
            {
                n: Values(
                    np.concatenate([v.data, other.columns[n].data]),
                    np.concatenate([v.valid, other.columns[n].valid]),
                )
                for n, v in self.columns.items()
            },
        )

    def order(self) -> np.ndarray:
        """Row indices in the events' total order (event time, lane, position)."""
        return np.lexsort((self.pos, self.lane, self.t))

    def time_ordered(self) -> EventFrame:
        """Sorted in the total order: the one first/last/collect/reduce and count windows
        follow."""
        return self.take(self.order())


def _empty(kind: str) -> np.ndarray:
    return np.empty(0, {"int": np.int64, "ts": np.int64, "float": np.float64}.get(kind, object))


def frame_from_pandas(pdf: pd.DataFrame, kinds: list[ColumnKind]) -> EventFrame:
    """Rows as Spark sent them, in the total order (a shuffle keeps none)."""
    columns: dict[str, Values] = {}
    for k in kinds:
        wire = VALUE_PREFIX + k.name
        if k.kind == "object":
            data = pdf[wire].to_numpy(dtype=object)
            valid = ~pd.isna(pdf[wire]).to_numpy()
        else:
            data = pdf[wire].to_numpy(dtype=np.float64 if k.kind == "float" else np.int64)
            valid = ~pdf[wire + NULL_SUFFIX].to_numpy(dtype=bool)
        columns[k.name] = Values(data, valid)
    frame = EventFrame(
        pdf[TIME].to_numpy(dtype=np.int64),
        pdf[LANE].to_numpy(dtype=np.int64),
        pdf[POSITION].to_numpy(dtype=np.int64),
        columns,
    )
    return frame.time_ordered()


def to_python(values: Values, kind: str, index: int) -> Any:
    """One value as the Python object a user function (or a collect list) receives."""
    if not values.valid[index]:
        return None
    v = values.data[index]
    if kind == "ts":
        return pd.Timestamp(int(v), unit="us", tz="UTC").to_pydatetime()
    if kind == "object" and isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if hasattr(v, "item") else v
