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
#: Kafka position of each row (topic, partition, offset): the arrival order a shuffle
#: loses, restored per group and micro-batch. Without it (sliding windows over SQL that
#: dropped ``_kafka``), TIE orders rows of equal time by a hash of their content.
ORDER_COLUMNS = ("flowop_topic", "flowop_partition", "flowop_offset")
TIE = "flowop_tie"


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
    """Events of one group: time, arrival sequence, and the columns aggregations read."""

    t: np.ndarray  # int64 epoch ms
    seq: np.ndarray  # int64 arrival rank within the group (ties in time)
    columns: dict[str, Values] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t)

    @staticmethod
    def empty(kinds: list[ColumnKind]) -> EventFrame:
        return EventFrame(
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            {k.name: Values(_empty(k.kind), np.empty(0, bool)) for k in kinds},
        )

    def take(self, index: np.ndarray) -> EventFrame:
        return EventFrame(
            self.t[index], self.seq[index], {n: v.take(index) for n, v in self.columns.items()}
        )

    def concat(self, other: EventFrame) -> EventFrame:
        if not len(self):
            return other
        if not len(other):
            return self
        return EventFrame(
            np.concatenate([self.t, other.t]),
            np.concatenate([self.seq, other.seq]),
            {
                n: Values(
                    np.concatenate([v.data, other.columns[n].data]),
                    np.concatenate([v.valid, other.columns[n].valid]),
                )
                for n, v in self.columns.items()
            },
        )

    def time_ordered(self) -> EventFrame:
        """Sorted by (event time, arrival): the order first/last/collect/reduce follow."""
        return self.take(np.lexsort((self.seq, self.t)))


def _empty(kind: str) -> np.ndarray:
    return np.empty(0, {"int": np.int64, "ts": np.int64, "float": np.float64}.get(kind, object))


def frame_from_pandas(pdf: pd.DataFrame, kinds: list[ColumnKind], seq_start: int) -> EventFrame:
    """Rows as Spark sent them (already in arrival order) to an EventFrame."""
    n = len(pdf)
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
    return EventFrame(
        pdf[TIME].to_numpy(dtype=np.int64),
        np.arange(seq_start, seq_start + n, dtype=np.int64),
        columns,
    )


def arrival_order(pdf: pd.DataFrame) -> pd.DataFrame:
    """A micro-batch's rows of one group, in arrival order (the shuffle lost it)."""
    by = [c for c in ORDER_COLUMNS if c in pdf.columns] or [TIME, TIE]
    return pdf.sort_values(by, kind="stable", ignore_index=True)


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
