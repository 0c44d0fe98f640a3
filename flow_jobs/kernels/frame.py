"""A group's buffered events as columnar numpy arrays (the unit of window state).

Spark hands ``transformWithStateInPandas`` pandas frames, in which a nullable BIGINT
becomes float64 (losing precision past 2^53) and a NULL is indistinguishable from NaN.
The plan therefore sends every numeric or timestamp column as two columns: the value
with NULL replaced by 0 (``<name>``) and an ``<name>__null`` flag; other types arrive as
Python objects with ``None`` for NULL. ``EventFrame`` keeps that split.

Saved (``flow_jobs.state_codec``) as one ``table`` field, a row per event: ``t``,
``lane``, ``pos``, and per value column ``data:<name>`` (numbers) or ``objects:<name>``
(Arrow values of the Spark column's type, which the plan hands down) and
``valid:<name>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from flow_jobs.state_codec import Fields, numbers, table

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql.types import DataType

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
    #: an ``object`` column's Arrow type (the Spark column's): how its values are saved
    arrow_type: pa.DataType | None = None


@dataclass
class Values:
    data: np.ndarray  # int64 / float64 (NULLs hold 0), or object (NULLs hold None)
    valid: np.ndarray  # bool
    #: object values: their Arrow type (``ColumnKind.arrow_type``), which saves them
    arrow_type: pa.DataType | None = None

    def take(self, index: np.ndarray) -> Values:
        return Values(self.data[index], self.valid[index], self.arrow_type)


@dataclass
class EventFrame:
    """Events of one group: time, the tie-break of equal times, and the columns
    aggregations read. ``(t, lane, pos)`` orders the events totally."""

    t: np.ndarray  # int64 epoch ms
    lane: np.ndarray  # int64 Kafka topic rank * 2^31 + partition (0 without a position)
    pos: np.ndarray  # int64 Kafka offset (a hash of the row without a position)
    columns: dict[str, Values] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t)

    @staticmethod
    def empty(kinds: list[ColumnKind]) -> EventFrame:
        return EventFrame(
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            np.empty(0, np.int64),
            {k.name: Values(_empty(k.kind), np.empty(0, bool), k.arrow_type) for k in kinds},
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
                    v.arrow_type or other.columns[n].arrow_type,
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

    def typed(self, types: Mapping[str, pa.DataType | None]) -> EventFrame:
        """The frame with ``types`` for its object columns that have none (a frame read
        from a legacy pickle)."""
        columns = {
            n: Values(v.data, v.valid, v.arrow_type or types.get(n))
            for n, v in self.columns.items()
        }
        return EventFrame(self.t, self.lane, self.pos, columns)

    def to_field(self) -> pa.Array:
        """The frame as one saved field (a ``table``: a row per event)."""
        columns: dict[str, np.ndarray | pa.Array] = {"t": self.t, "lane": self.lane}
        columns["pos"] = self.pos
        for n, v in self.columns.items():
            if v.data.dtype != object:
                columns[f"data:{n}"] = v.data
            elif v.arrow_type is None:
                # Arrow would guess the type, and guess a map's dicts as structs
                raise ValueError(f"frame column {n!r} holds objects of no Arrow type")
            else:
                columns[f"objects:{n}"] = pa.array(v.data, v.arrow_type, from_pandas=False)
            columns[f"valid:{n}"] = v.valid
        return table(columns)

    @classmethod
    def from_field(cls, fields: Fields, name: str) -> EventFrame:
        """The frame ``to_field`` saved as ``fields``' field ``name``."""
        saved = fields.table(name)
        columns = {}
        for key, values in saved.items():
            part, _, n = key.partition(":")
            if part == "data":
                columns[n] = Values(numbers(values), numbers(saved[f"valid:{n}"]))
            elif part == "objects":
                valid = numbers(saved[f"valid:{n}"])
                columns[n] = Values(_python_objects(values), valid, values.type)
        t, lane, pos = (numbers(saved[k]) for k in ("t", "lane", "pos"))
        return cls(t, lane, pos, columns)


def _empty(kind: str) -> np.ndarray:
    return np.empty(0, {"int": np.int64, "ts": np.int64, "float": np.float64}.get(kind, object))


def frame_from_pandas(pdf: pd.DataFrame, kinds: list[ColumnKind]) -> EventFrame:
    """Rows as Spark sent them, in the total order (a shuffle keeps none)."""
    import pandas as pd  # not at import: Spark's state workers start often

    columns: dict[str, Values] = {}
    for k in kinds:
        wire = VALUE_PREFIX + k.name
        if k.kind == "object":
            data = pdf[wire].to_numpy(dtype=object)
            valid = ~pd.isna(pdf[wire]).to_numpy()
        else:
            data = pdf[wire].to_numpy(dtype=np.float64 if k.kind == "float" else np.int64)
            valid = ~pdf[wire + NULL_SUFFIX].to_numpy(dtype=bool)
        columns[k.name] = Values(data, valid, k.arrow_type)
    frame = EventFrame(
        pdf[TIME].to_numpy(dtype=np.int64),
        pdf[LANE].to_numpy(dtype=np.int64),
        pdf[POSITION].to_numpy(dtype=np.int64),
        columns,
    )
    return frame.time_ordered()


def to_python(values: Values, kind: str, index: int) -> Any:
    """One value as the Python object a user function (or a collect list) receives."""
    import pandas as pd  # not at import: Spark's state workers start often

    if not values.valid[index]:
        return None
    v = values.data[index]
    if kind == "ts":
        return pd.Timestamp(int(v), unit="us", tz="UTC").to_pydatetime()
    if kind == "object" and isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if hasattr(v, "item") else v


#: Arrow types whose numpy objects are what Spark's pandas conversion hands the operator
#: (``tests/test_state_codec.py`` holds the two side by side); dates as ``to_pylist``.
_PLAIN = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary)
_PLAIN += (pa.types.is_large_binary, pa.types.is_boolean, pa.types.is_decimal)
_PLAIN += (pa.types.is_null,)


def _python_objects(values: pa.Array) -> np.ndarray:
    """Saved object values as the operator first had them: Spark's pandas conversion
    (arrays as numpy arrays, maps and structs as dicts), with quicker equal paths for
    flat types."""
    if any(is_type(values.type) for is_type in _PLAIN):
        return values.to_numpy(zero_copy_only=False).astype(object)  # booleans: not numpy's
    out = np.empty(len(values), object)
    if pa.types.is_date32(values.type):
        out[:] = values.to_pylist()  # numpy would make them datetime64
        return out
    # imported here: the spec (``flow-jobs validate``) imports this module, not these
    from pyspark.sql.conversion import ArrowArrayToPandasConversion

    series = ArrowArrayToPandasConversion.convert(
        values, _spark_type(values.type), timezone="UTC", struct_in_pandas="dict"
    )
    out[:] = series.to_numpy(dtype=object)  # an object array: its elements, not unpacked
    return out


@lru_cache(maxsize=64)
def _spark_type(arrow_type: pa.DataType) -> DataType:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type)


def legacy_frame(record: Any) -> EventFrame:
    """A frame pickled before the state format (``flow_jobs.state_codec.legacy``): a
    record of its attributes as that release named them, its values records too."""
    a = vars(record)
    if "seq" in a:  # before the total order: an arrival rank, which keeps its order
        lane, pos = np.zeros(len(a["seq"]), np.int64), a["seq"]
    else:
        lane, pos = a["lane"], a["pos"]
    columns = {n: Values(vars(v)["data"], vars(v)["valid"]) for n, v in a["columns"].items()}
    return EventFrame(a["t"], lane, pos, columns)
