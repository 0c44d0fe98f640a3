"""Operators on the state API that keep each hash bucket of keys as one pickled value.

``transformWithStateInPandas`` costs a few calls into the JVM per group and state
access; grouped by key, an operator pays them per key and batch. The dedup and the
temporal join group by a hash bucket of the keys instead (``BUCKETS`` groups) and keep
each bucket's whole state as one pickled value beside its event-time timer, so a
micro-batch costs a few state calls per bucket. This base holds that value and that
timer; an operator says what an empty state is, when its next work is due
(``due``, in microseconds) and whether a state holds anything.
"""

from __future__ import annotations

import pickle
from typing import Any

from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from flow_jobs.windows.timers import Firing, settle

#: Groups the keys are hashed into (part of the state's layout: a checkpoint keeps it).
BUCKETS = 64

_STATE = StructType(
    [StructField("blob", BinaryType()), StructField("timer", LongType())]
)  # fmt: skip


def ms_ceiling(us: int | None) -> int | None:
    """The first watermark (ms) at or past a time in microseconds."""
    return None if us is None else -(-us // 1000)


class PickledBuckets(StatefulProcessor):
    """One bucket's state, loaded and saved whole, and its one timer at ``due``."""

    #: the state variable's name (``flow-jobs inspect`` reads it by this name)
    state_variable = "state"

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
        return pickle.loads(blob), timer

    def _save(self, state: Any, held: int | None, firing: Firing | None) -> None:
        timer = settle(self.handle, held, ms_ceiling(self.due(state)), firing)
        if self.holds(state):
            self.state.update((pickle.dumps(state, protocol=5), timer))
        else:
            self.state.clear()

    def close(self) -> None:
        pass
