"""Prometheus metrics, scraped over HTTP while a continuous run is processing."""

from __future__ import annotations

import contextlib
import random
import threading
import time
import urllib.request
from pathlib import Path

from pyspark.sql import SparkSession

from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from flow_jobs_dev.service import free_port
from tests.support import make_spec, random_clicks, send, to_records


def _scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("flow_") and 'pipeline="metered"' in line:
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_metrics_are_served_during_a_run(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(1), 300, step_ms=200)
    late = {**events[-1], "ts": events[-1]["ts"] - 600_000}
    send(broker.bootstrap_servers, topic, to_records(events))
    window = {
        "kind": "tumbling",
        "duration_ms": 10_000,
        "event_time_column": "ts",
        "lateness_ms": 2_000,
        "group_by": ["user_id"],
        "aggregations": [{"agg": "count", "as": "n"}],
    }
    spec = make_spec(workdir, broker.bootstrap_servers, topic, window, name="metered")
    port = free_port()
    doc = spec.to_document()
    doc["runtime"] = {"trigger_interval_ms": 200, "metrics_port": port}
    runner = PipelineRunner(PipelineSpec.model_validate(doc), spark)
    thread = threading.Thread(target=runner.run, daemon=True)
    watermark_ms = max(e["ts"] for e in events) - 2_000
    global_mark = 'flow_watermark_seconds{pipeline="metered",source="_global"}'
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while True:  # until the closing batch has emitted windows and reported progress
            assert thread.is_alive(), "the run ended"
            samples = {}
            with contextlib.suppress(OSError):  # not serving yet
                samples = _scrape(port)
            emitted = samples.get('flow_windows_emitted_total{pipeline="metered"}', 0)
            if emitted > 0 and samples.get(global_mark, 0) * 1000 == watermark_ms:
                break
            assert time.monotonic() < deadline, f"no windows emitted: {samples}"
            time.sleep(0.2)
        # A row behind the watermark, in a later batch: dropped and counted.
        send(broker.bootstrap_servers, topic, [Record(to_records([late])[0].value, 0, b"x", 1)])
        late_rows = 'flow_late_rows_total{pipeline="metered",source="clicks"}'
        while samples.get(late_rows, 0) < 1:
            assert time.monotonic() < deadline, f"no late row counted: {samples}"
            time.sleep(0.2)
            samples = _scrape(port)
    finally:
        runner.stop_event.set()
        thread.join(60)

    assert samples['flow_watermark_seconds{pipeline="metered",source="clicks"}'] * 1000 == (
        watermark_ms
    )
    assert samples[late_rows] == 1
    assert samples['flow_windows_active{pipeline="metered"}'] >= 1  # the last windows are open
    assert samples['flow_state_groups{pipeline="metered"}'] >= 1
    assert not any(name.startswith("flow_state_groups_total") for name in samples)  # removed


def test_a_source_watermark_is_its_highest_event_time_less_lateness_and_never_moves_back() -> None:
    """The one rule the ledger's source_watermarks and flow_watermark_seconds share."""
    from flow_jobs.ledger.batch_ledger import source_watermark_ms

    assert source_watermark_ms(None, None, 5_000) is None
    assert source_watermark_ms(None, 20_000, 5_000) == 15_000
    assert source_watermark_ms(15_000, 18_000, 5_000) == 15_000  # older events: stays
    assert source_watermark_ms(15_000, None, 5_000) == 15_000  # no event time: stays
    assert source_watermark_ms(15_000, 30_000, 0) == 30_000
