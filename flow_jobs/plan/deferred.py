"""A state operator's processor, unpickled only where it processes rows.

At every query start Spark runs each ``transformWithStateInPandas`` processor once in a
fresh Python process on the driver (``transform_with_state_driver_worker``), only to
call its ``init()``: the state variables it declares are the operator's state schema.
Unpickling our processors there imported their whole feature (numpy, the spec's models,
every window family): most of that process's CPU, paid again at each query start.

``deferred`` wraps a processor for Spark: the processor's pickle, unread, and the state
variables its ``init()`` declares, recorded here on the driver when the plan is built.
In the driver's process the wrapper declares them itself; in the executors' workers it
unpickles the processor on ``init()`` and hands every call to it, as if unwrapped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorHandleState

from flow_jobs.worker_heap import freeze_worker_heap

#: (the handle's method, its arguments): one state variable an ``init()`` declared
Declaration = tuple[str, tuple[Any, ...]]


class _Recorder:
    """A handle that only records the state variables ``init()`` declares."""

    def __init__(self) -> None:
        self.declared: list[Declaration] = []

    def getValueState(self, name: str, schema: Any, ttlDurationMs: int | None = None) -> None:
        self.declared.append(("getValueState", (name, schema, ttlDurationMs)))

    def getListState(self, name: str, schema: Any, ttlDurationMs: int | None = None) -> None:
        self.declared.append(("getListState", (name, schema, ttlDurationMs)))

    def getMapState(
        self, name: str, key_schema: Any, value_schema: Any, ttlDurationMs: int | None = None
    ) -> None:
        self.declared.append(("getMapState", (name, key_schema, value_schema, ttlDurationMs)))


def declarations(processor: StatefulProcessor) -> list[Declaration]:
    """The state variables ``processor.init()`` declares (on a copy of it)."""
    recorder = _Recorder()
    cloudpickle.loads(cloudpickle.dumps(processor)).init(recorder)
    return recorder.declared


class DeferredProcessor(StatefulProcessor):
    def __init__(self, processor: StatefulProcessor) -> None:
        self._pickled = cloudpickle.dumps(processor)
        self._declared = declarations(processor)
        self._processor: StatefulProcessor | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_processor": None}

    def init(self, handle: StatefulProcessorHandle) -> None:
        if _schema_only(handle):  # the driver's process: the state schema, nothing else
            for method, args in self._declared:
                getattr(handle, method)(*args)
            return
        if self._processor is None:
            self._processor = cloudpickle.loads(self._pickled)
        freeze_worker_heap()  # after the processor's imports: flow_jobs.worker_heap
        self._processor.init(handle)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        assert self._processor is not None, "init() comes first"
        return self._processor.handleInputRows(key, rows, timerValues)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[Any]:
        assert self._processor is not None, "init() comes first"
        return self._processor.handleExpiredTimer(key, timerValues, expiredTimerInfo)

    def close(self) -> None:
        if self._processor is not None:
            self._processor.close()


def _schema_only(handle: StatefulProcessorHandle) -> bool:
    """Whether Spark calls ``init()`` only to collect the state schema: the driver's
    call, made with the handle in ``PRE_INIT`` (pinned by tests/test_spark_contracts.py)."""
    client = getattr(handle, "_statefulProcessorApiClient", None)
    return getattr(client, "handle_state", None) == StatefulProcessorHandleState.PRE_INIT


def deferred(processor: StatefulProcessor) -> StatefulProcessor:
    """``processor`` as Spark should get it: see the module's docstring."""
    return DeferredProcessor(processor)
