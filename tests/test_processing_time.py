"""time_mode = "processing": windows over arrival time, closed by later arrivals."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import make_spec, send


def _await(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _counted(target: str, user: str) -> int:
    if not Path(target).exists():
        return 0
    return sum(r["n"] for r in read_delta(target).to_pylist() if r["user_id"] == user)


def test_processing_time_windows_use_arrival_time(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    window = {
        "kind": "tumbling",
        "duration_ms": 2_000,
        "time_mode": "processing",
        "group_by": ["user_id"],
        "aggregations": [{"agg": "count", "as": "n"}],
    }
    spec = make_spec(workdir, broker.bootstrap_servers, topic, window, schema="user_id STRING")
    spec = spec.model_copy(
        update={"runtime": spec.runtime.model_copy(update={"trigger_interval_ms": 100})}
    )
    stop = threading.Event()
    runner = PipelineRunner(spec, spark, stop_event=stop)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        # The payloads carry no time at all: only arrival counts.
        started = time.time()
        send(
            broker.bootstrap_servers,
            topic,
            [
                Record(json.dumps({"user_id": "a"}).encode(), i % 2, timestamp_ms=0)
                for i in range(10)
            ],
        )
        _await(
            lambda: runner.progress is not None and runner.progress.input_rows() == 10,
            60,
            "the first burst to be read",
        )
        # Every row of the burst was stamped with its arrival time by now; its partitions
        # may have been read in two micro-batches, on either side of a 2 s boundary. The
        # watermark is the latest arrival time: only an arrival after the end of the
        # window holding `read`, the latest possible stamp, closes every window of the
        # burst. Processing time is wall time, so we wait for that end.
        read = time.time()
        time.sleep((read // 2 + 1) * 2 - read + 0.2)
        send(broker.bootstrap_servers, topic, [Record(json.dumps({"user_id": "b"}).encode(), 0)])
        _await(lambda: _counted(spec.target.path, "a") == 10, 60, "the burst's windows")
        ended = time.time()
    finally:
        stop.set()
        thread.join(60)
    rows = read_delta(spec.target.path).to_pylist()
    assert sum(r["n"] for r in rows if r["user_id"] == "a") == 10
    assert all(r["user_id"] == "a" for r in rows)  # b's window is still open
    for r in rows:
        assert started - 2 <= r["window_start"].timestamp() <= ended
        assert (r["window_end"] - r["window_start"]).total_seconds() == 2
