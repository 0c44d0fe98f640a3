"""Operators on the state API that keep each hash bucket of keys as one saved value.

``transformWithStateInPandas`` costs a few calls into the JVM per group and state
access; grouped by key, an operator pays them per key and batch. The dedup and the
temporal join group by a hash bucket of the keys instead (``BUCKETS`` groups) and keep
each bucket's whole state as one value (``flow_jobs.state_codec``) beside its
event-time timer, so a micro-batch costs a few state calls per bucket. This base holds
that value and that timer; an operator says what its state is (``STATE``), what an empty
one is, when its next work is due (``due``, in microseconds) and whether a state holds
anything.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from flow_jobs import state_codec
from flow_jobs.kernels.timers import Firing, settle
from flow_jobs.state_codec import Fields, table

#: Groups the keys are hashed into (part of the state's layout: a checkpoint keeps it).
BUCKETS = 64

_STATE = StructType(
    [StructField("blob", BinaryType()), StructField("timer", LongType())]
)  # fmt: skip

#: A held record: (event time µs, lane, position, key, row); key and row JSON strings.
Held = tuple[int, int, int, Hashable, Any]


def ms_ceiling(us: int | None) -> int | None:
    """The first watermark (ms) at or past a time in microseconds."""
    return None if us is None else -(-us // 1000)


#: A held record's parts, as saved (a ``table``: a row per record).
HELD = {"t": pa.int64(), "lane": pa.int64(), "position": pa.int64()}
HELD |= {"key": pa.string(), "row": pa.string()}


def rows_field(records: list[tuple[Any, ...]], parts: dict[str, pa.DataType]) -> pa.Array:
    """Records (tuples of ``parts``, in order) as one saved field."""
    columns = zip(*records, strict=True) if records else ((),) * len(parts)
    return table(
        {n: pa.array(list(c), t) for (n, t), c in zip(parts.items(), columns, strict=True)}
    )


def rows_of(fields: Fields, name: str, parts: dict[str, pa.DataType]) -> list[tuple[Any, ...]]:
    """The records ``rows_field`` saved as ``fields``' field ``name``."""
    saved = fields.table(name)
    return list(zip(*(saved[n].to_pylist() for n in parts), strict=True))


class BucketProcessor(StatefulProcessor):
    """One bucket's state, loaded and saved whole, and its one timer at ``due``."""

    #: the state variable's name (``flow-jobs inspect`` reads it by this name)
    state_variable = "state"
    #: the bucket's state: a class saved by ``flow_jobs.state_codec``
    STATE: ClassVar[type[Any]]

    def empty(self) -> Any:
        raise NotImplementedError

    def due(self, state: Any) -> int | None:
        """The lowest watermark (µs) at which the operator has work, or None."""
        raise NotImplementedError

    def holds(self, state: Any) -> bool:
        raise NotImplementedError

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(self.state_variable, _STATE)

    def _load(self) -> tuple[Any, int | None]:
        if not self.state.exists():
            return self.empty(), None
        blob, timer = self.state.get()
        return state_codec.load(blob, self.STATE), timer

    def _save(self, state: Any, held: int | None, firing: Firing | None) -> None:
        timer = settle(self.handle, held, ms_ceiling(self.due(state)), firing)
        if self.holds(state):
            self.state.update((state_codec.dump(state), timer))
        else:
            self.state.clear()

    def close(self) -> None:
        pass
