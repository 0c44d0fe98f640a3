"""What flow-jobs relies on in Spark itself, pinned against the real engine (PySpark 4.2).

Each test runs a tiny query whose micro-batches the test drives one by one: JSON files
moved into a folder that ``spark.readStream.json`` reads, ``processAllAvailable`` after
each (it returns once the batch, and the no-data batch a moved watermark brings, have
run). Each docstring names the flow-jobs code that depends on the behaviour pinned, so
an upgrade of Spark that changes it fails here first, with the reason in view.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.query import StreamingQuery

pytestmark = pytest.mark.spark

_INPUT = "k STRING, ms BIGINT, register BIGINT, delete BIGINT"


class _Folder:
    """A streaming JSON source fed one file per micro-batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        self.files = 0

    def add(self, rows: Sequence[Mapping[str, Any]]) -> None:
        # Spark's file listing skips names starting with "_": write there, then rename,
        # so a micro-batch never reads half a file.
        temp = self.path / f"_{self.files}.tmp"
        temp.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows))
        temp.rename(self.path / f"{self.files:04d}.json")
        self.files += 1


# -- timers -------------------------------------------------------------------------------

_EVENTS = "event STRING, k STRING, at BIGINT, watermark BIGINT"


class _ScriptedTimers(StatefulProcessor):
    """Registers and deletes the timers its input rows name, lists a key's timers on each
    input (event "listed"), reports every firing ("fired", with the batch's watermark),
    and in the handler of a firing at ``expiry`` registers ``on_fire[expiry]``."""

    def __init__(self, on_fire: Mapping[int, Sequence[int]]) -> None:
        self.on_fire = {int(k): [int(t) for t in v] for k, v in on_fire.items()}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        for pdf in rows:
            for _, row in pdf.iterrows():
                if pd.notna(row["register"]):
                    self.handle.registerTimer(int(row["register"]))
                if pd.notna(row["delete"]):
                    self.handle.deleteTimer(int(row["delete"]))
        watermark = timerValues.getCurrentWatermarkInMs()
        listed = sorted(self.handle.listTimers())
        yield _events([("listed", key[0], t, watermark) for t in listed])

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        for t in self.on_fire.get(expiry, []):
            self.handle.registerTimer(t)
        yield _events([("fired", key[0], expiry, timerValues.getCurrentWatermarkInMs())])

    def close(self) -> None:
        return None


def _events(rows: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["event", "k", "at", "watermark"]).astype(
        {"at": "int64", "watermark": "int64"}
    )


class _TimerQuery:
    """``_ScriptedTimers`` over a folder, event time ``ms`` with no delay: after a batch
    whose highest ``ms`` is T, Spark's watermark is T (a no-data batch runs with it)."""

    def __init__(
        self, spark: SparkSession, workdir: Path, on_fire: Mapping[int, Sequence[int]]
    ) -> None:
        self.spark = spark
        self.source = _Folder(workdir / "in")
        self.name = f"timers_{uuid.uuid4().hex[:8]}"
        stream = (
            spark.readStream.schema(_INPUT)
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source.path))
            .withColumn("ts", F.timestamp_millis("ms"))
            .withWatermark("ts", "0 seconds")
            .groupBy("k")
            .transformWithStateInPandas(_ScriptedTimers(on_fire), _EVENTS, "Append", "EventTime")
        )
        self.query: StreamingQuery = (
            stream.writeStream.format("memory")
            .queryName(self.name)
            .outputMode("append")
            .option("checkpointLocation", str(workdir / "checkpoint"))
            .start()
        )

    def batch(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.source.add([{"register": None, "delete": None, **r} for r in rows])
        self.query.processAllAvailable()

    def events(self, kind: str) -> list[tuple[str, int, int]]:
        """(key, timestamp, batch watermark) of the events of one kind, in order."""
        rows = self.spark.sql(f"SELECT * FROM {self.name} WHERE event = '{kind}'").collect()
        return sorted((r["k"], r["at"], r["watermark"]) for r in rows)

    def __enter__(self) -> _TimerQuery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.query.stop()


def test_an_event_time_timer_fires_when_the_watermark_equals_it(
    spark: SparkSession, workdir: Path
) -> None:
    """A timer at T fires in the first micro-batch whose watermark is >= T: at W = T,
    not only once W > T; one at T + 1 waits for W = T + 1.

    flow_jobs.operators.timers registers each group's timer AT the lowest watermark at
    which its windows have work ("due"). Were the rule W > T, a timer at due would fire
    one batch late (at the first W above it); registering at due - 1 under the rule
    that holds here fired with nothing to do and lost the timer (issue 29)."""
    with _TimerQuery(spark, workdir, {}) as q:
        q.batch(
            [
                {"k": "equal", "ms": 1_000, "register": 5_000},
                {"k": "above", "ms": 1_000, "register": 5_001},
                {"k": "clock", "ms": 5_000},
            ]
        )
        assert q.events("fired") == [("equal", 5_000, 5_000)]
        q.batch([{"k": "clock", "ms": 5_001}])
        assert q.events("fired") == [("above", 5_001, 5_001), ("equal", 5_000, 5_000)]


def test_a_fired_timer_is_deleted_after_its_handler_even_if_registered_again(
    spark: SparkSession, workdir: Path
) -> None:
    """Inside handleExpiredTimer for T, registering T again is undone: Spark deletes T
    after the handler returns. A timer registered there at another time stays.

    flow_jobs.operators.timers: inside the handler the group's saved timer, if it is the
    fired one, counts as gone (``settle`` given the ``Firing``), and the timer registered
    next must differ from the fired one (``wanted``: above the watermark)."""
    with _TimerQuery(spark, workdir, {5_000: [5_000, 5_002]}) as q:
        q.batch([{"k": "a", "ms": 1_000, "register": 5_000}, {"k": "clock", "ms": 5_000}])
        assert q.events("fired") == [("a", 5_000, 5_000)]
        q.batch([{"k": "a", "ms": 5_001}, {"k": "clock", "ms": 6_000}])
        # listed in each data batch (the second's watermark is still 5 000)
        assert q.events("listed") == [("a", 5_000, 0), ("a", 5_002, 5_000)]
        assert q.events("fired") == [("a", 5_000, 5_000), ("a", 5_002, 6_000)]


def test_deleting_a_timer_that_is_not_registered_is_harmless(
    spark: SparkSession, workdir: Path
) -> None:
    """``deleteTimer`` of a time the key holds no timer for neither fails the query nor
    touches the key's other timers.

    flow_jobs.operators.processor: a checkpoint written before issue 29's fix can hold a
    group whose saved timer (due - 1) Spark has already fired and deleted; on the group's
    next input ``timers.settle`` deletes that saved value before registering the new
    one, and the run must go on."""
    with _TimerQuery(spark, workdir, {}) as q:
        q.batch([{"k": "a", "ms": 1_000, "register": 9_000}])
        q.batch([{"k": "a", "ms": 1_001, "delete": 4_242}])
        assert q.events("listed") == [("a", 9_000, 0), ("a", 9_000, 1_000)]
        q.batch([{"k": "clock", "ms": 9_000}])
        assert q.events("fired") == [("a", 9_000, 9_000)]


def test_a_timer_registered_at_or_below_the_watermark_on_input_fires_in_that_batch(
    spark: SparkSession, workdir: Path
) -> None:
    """A timer registered in handleInputRows at or below the batch's watermark fires in
    the same micro-batch, after the inputs (the batch's timer pass lists the timers
    then).

    flow_jobs.operators.processor registers a timer at ``due`` on input even when a
    row's windows are due at once (a row above the previous batch's watermark, in a
    window due at or below this batch's): their close runs in the batch the row arrives
    in, as tests/spark_timers.py (the models of tests/test_reopen.py and
    tests/test_timers.py) assumes."""
    with _TimerQuery(spark, workdir, {}) as q:
        q.batch([{"k": "clock", "ms": 5_000}])
        q.batch([{"k": "b", "ms": 5_001, "register": 5_000}, {"k": "c", "ms": 5_001}])
        assert q.events("fired") == [("b", 5_000, 5_000)]
