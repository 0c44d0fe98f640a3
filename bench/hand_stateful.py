"""The hand-written PySpark jobs for the windows Spark has no operator for, as a Spark user
writes them: a sliding window (one window per row: [t - 60 s, t] for each distinct event
time t of a user, emitted once the watermark reaches t) and a count window (each user's
records in event-time order, 100 to a window, emitted once the watermark has passed all
of them). Each is a ``transformWithStateInPandas`` processor (on the RocksDB state store
provider, which it requires) keeping the user's records in a list state, with event-time
timers; the bench's aggregates (count, sum, min, max, avg, first and last page); each
micro-batch appended to Delta, as ``bench.compare.hand_written_window``.

What a careful user writes, not what flow-jobs runs (``flow_jobs.windows``): ties of
equal event time are left in the order the state returns them, and a timer's handler
reads the whole list.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

_EVENTS = "ts LONG, amount DOUBLE, page STRING"
_OUT = (
    "user_id STRING, window_start TIMESTAMP, window_end TIMESTAMP, clicks LONG, "
    "amount_sum DOUBLE, amount_min DOUBLE, amount_max DOUBLE, amount_avg DOUBLE, "
    "first_page STRING, last_page STRING"
)


def _aggregate(user: str, start_ms: int, end_ms: int, events: pd.DataFrame) -> dict[str, Any]:
    amount, pages = events["amount"], events["page"].dropna()
    return {
        "user_id": user,
        "window_start": pd.Timestamp(start_ms, unit="ms"),
        "window_end": pd.Timestamp(end_ms, unit="ms"),
        "clicks": len(events),
        "amount_sum": amount.sum(min_count=1),
        "amount_min": amount.min(),
        "amount_max": amount.max(),
        "amount_avg": amount.mean(),
        "first_page": pages.iloc[0] if len(pages) else None,
        "last_page": pages.iloc[-1] if len(pages) else None,
    }


class _Buffered(StatefulProcessor):
    """A user's records in a list state; each window kind sets its timers as records
    arrive (``arrived``)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.events = handle.getListState("events", _EVENTS)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        new = [frame[["ts", "amount", "page"]] for frame in rows]
        for frame in new:
            self.events.appendList(list(frame.itertuples(index=False)))
        if new:
            self.arrived(pd.concat(new)["ts"])
        return iter(())

    def arrived(self, ts: pd.Series) -> None:
        raise NotImplementedError

    def buffered(self) -> pd.DataFrame:
        frame = pd.DataFrame(list(self.events.get()), columns=["ts", "amount", "page"])
        return frame.sort_values("ts", kind="stable").reset_index(drop=True)

    def keep(self, events: pd.DataFrame) -> None:
        """The list state holds ``events`` from now on."""
        self.events.clear()
        if len(events):
            self.events.appendList(list(events.itertuples(index=False)))

    def close(self) -> None:
        return None


class SlidingWindows(_Buffered):
    """[t - duration, t] per distinct event time t, once the watermark reaches t: a timer
    at the lowest new time; each firing emits every time the watermark has reached since
    the last one emitted, and sets a timer at the next time still ahead of it."""

    def __init__(self, duration_ms: int) -> None:
        self.duration_ms = duration_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.emitted = handle.getValueState("emitted", "t LONG")

    def arrived(self, ts: pd.Series) -> None:
        self.handle.registerTimer(int(ts.min()))

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        events = self.buffered()
        done = self.emitted.get()[0] if self.emitted.exists() else None
        ts = events["ts"]
        ready = sorted({int(t) for t in ts if t <= watermark and (done is None or t > done)})
        windows = []
        for t in ready:
            start = max(0, t - self.duration_ms)
            windows.append(_aggregate(key[0], start, t, events[(ts >= start) & (ts <= t)]))
        if ready:
            self.emitted.update((ready[-1],))
        # no later window reaches below the watermark - duration
        kept = events[ts > watermark - self.duration_ms]
        self.keep(kept)
        ahead = kept["ts"][kept["ts"] > watermark]
        if len(ahead):
            self.handle.registerTimer(int(ahead.min()))
        if windows:
            yield pd.DataFrame(windows)


class CountWindows(_Buffered):
    """Each ``count`` records in event-time order, once the watermark passed them all."""

    def __init__(self, count: int) -> None:
        self.count = count

    def arrived(self, ts: pd.Series) -> None:
        self.register(self.buffered()["ts"])

    def register(self, ts: pd.Series) -> None:
        """A timer at the last record of each full window (in time order)."""
        for i in range(self.count - 1, len(ts), self.count):
            self.handle.registerTimer(int(ts.iloc[i]))

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        events = self.buffered()
        ready = int((events["ts"] <= timerValues.getCurrentWatermarkInMs()).sum())
        full = ready // self.count * self.count
        windows = [events.iloc[i : i + self.count] for i in range(0, full, self.count)]
        rest = events.iloc[full:]
        self.keep(rest)
        self.register(rest["ts"])
        if windows:
            yield pd.DataFrame(
                [
                    _aggregate(key[0], int(w["ts"].iloc[0]), int(w["ts"].iloc[-1]), w)
                    for w in windows
                ]
            )


def hand_written_stateful(
    spark: SparkSession, bootstrap: str, workdir: Path, shape: str, topic: str, lateness_ms: int
) -> int:
    """The sliding or count window job; returns the rows read."""
    from bench.run import SCHEMA, hand_written_events, hand_written_sink

    processor = SlidingWindows(60_000) if shape == "sliding" else CountWindows(100)
    # transformWithState runs only on the RocksDB provider (Spark says so otherwise)
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    windows = (
        hand_written_events(spark, bootstrap, topic, SCHEMA, lateness_ms)
        .select("user_id", "ts", "amount", "page", "et")
        .groupBy("user_id")
        .transformWithStateInPandas(processor, _OUT, "Append", "EventTime")
    )
    return sum(int(p.numInputRows) for p in hand_written_sink(windows, workdir))
