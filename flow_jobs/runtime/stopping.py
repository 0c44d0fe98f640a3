"""A graceful stop of a pipeline's streaming query, and the noise it must not make.

A stop requested while the query runs (Ctrl-C, ``PipelineRunner.stop_event``) lets the
batch in flight finish and its commit be written before ``query.stop()``; a batch that
starts meanwhile is refused by the sink (``StopRequested``), an expected end that Spark
and py4j would otherwise log as a failure with a traceback. These helpers are apart from
``flow_jobs.runtime.runner`` because they speak to Spark's and py4j's internals (the
trigger's status, log4j levels in the JVM, logging filters), not to the run's course.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flow_jobs.java import java_class
from flow_jobs.runtime.sink import StopRequested


def await_trigger_end(query: StreamingQuery, timeout_s: float = 60.0) -> None:
    """Let Spark finish the trigger in flight before ``query.stop()``: the sink has
    written the batch, but Spark still writes its commit log after that, and a stop
    then interrupts the stream thread mid-write (the batch replays on the next run, and
    Hadoop's interrupted file write prints its stack trace on a clean stop). A trigger
    that starts meanwhile is refused by the sink and ends the query by itself."""
    deadline = time.monotonic() + timeout_s
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        if query.awaitTermination(0.05):
            return


@contextmanager
def quiet_expected_stop(spark: SparkSession) -> Iterator[None]:
    """A batch that starts between the stop request and ``query.stop()`` is refused by
    the sink (``StopRequested``, so its offsets are not committed); Spark would log that
    expected end as "terminated with error" with a Python traceback. The run still sees
    the exception (``PipelineRunner._await`` tells it from a real failure); only that
    log line goes, while the query stops."""
    for logger in ("py4j.clientserver", "py4j.java_gateway"):
        # py4j logs the refusal too, with its traceback, from its callback thread, at any
        # time around query.stop(): a filter that drops only that exception, for good.
        target = logging.getLogger(logger)
        if not any(isinstance(f, DropStopRequested) for f in target.filters):
            target.addFilter(DropStopRequested())
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    name = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"
    configurator = java_class(jvm, "org.apache.logging.log4j.core.config.Configurator")
    before = java_class(jvm, "org.apache.logging.log4j.LogManager").getLogger(name).getLevel()
    configurator.setLevel(name, java_class(jvm, "org.apache.logging.log4j.Level").OFF)
    try:
        yield
    finally:
        configurator.setLevel(name, before)


class DropStopRequested(logging.Filter):
    """Drops a log record about a ``StopRequested`` (the sink refusing a batch after a
    graceful stop was requested: expected, and the run tells it from a failure)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, StopRequested):
            return False
        return StopRequested.__name__ not in record.getMessage()


def stop_if_active(query: StreamingQuery) -> None:
    if query.isActive:
        query.stop()
