"""The progress tracker: one record per batch that ran, whatever Spark's report buffer
holds (pure logic: the reports are shaped as ``tests/test_spark_contracts.py`` pins
Spark's, idle ones included)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from flow_jobs.io.batch import WriteResult
from flow_jobs.runtime import progress as progress_module
from flow_jobs.runtime.display import per_second
from flow_jobs.runtime.progress import IdleHeartbeat, ProgressTracker
from flow_jobs.runtime.sink import BatchOutcome
from tests.support import make_spec


def _ran(batch: int, rows: int, late: int = 0) -> dict[str, Any]:
    """A batch's report (it ran: Spark timed its addBatch)."""
    return {
        "batchId": batch,
        "numInputRows": rows,
        "durationMs": {"addBatch": 5, "triggerExecution": 9},
        "eventTime": {"watermark": f"2023-11-14T22:13:{batch:02d}.000Z"},
        "observedMetrics": {"flow_source_clicks": {"rows": rows, "late_rows": late}},
        "stateOperators": [],
        "sources": [],
    }


def _idle(next_batch: int) -> dict[str, Any]:
    """What Spark adds while the query waits: the next batch's id, no addBatch."""
    return {
        "batchId": next_batch,
        "numInputRows": 0,
        "durationMs": {"latestOffset": 1, "triggerExecution": 1},
        "eventTime": {},
        "stateOperators": [],
        "sources": [],
    }


def _outcome(batch: int, inserted: int, dead: int = 0) -> BatchOutcome:
    merge = WriteResult(skipped=False, inserted=inserted, updated=1, version=str(batch))
    return BatchOutcome(batch, inserted + 1, merge, dead, 0.1, 0.05)


def _tracker(tmp_path: Path) -> ProgressTracker:
    window = {
        "kind": "tumbling",
        "duration_ms": 1000,
        "aggregations": [{"agg": "count", "as": "n"}],
    }
    spec = make_spec(tmp_path, "127.0.0.1:9", "t", window, name="tracked")
    return ProgressTracker(spec, {})


def test_an_idle_report_never_takes_the_place_of_the_batch_it_names(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracker = _tracker(tmp_path)
    tracker.outcomes[0] = _outcome(0, 3)
    caplog.set_level(logging.INFO, "flow_jobs.progress")
    for report in (_ran(0, 10), _idle(1), _idle(1)):
        tracker.record(report)
    tracker.outcomes[1] = _outcome(1, 2, dead=4)
    tracker.record(_ran(1, 7, late=2))
    tracker.record(_ran(1, 7, late=2))  # seen again in a later poll
    tracker.record(_idle(2))

    assert sorted(tracker.progress) == [0, 1]
    assert tracker.progress[1]["numInputRows"] == 7
    logged = [r.getMessage() for r in caplog.records if " batch " in r.getMessage()]
    assert [m.split(":")[0] for m in logged] == ["tracked batch 0", "tracked batch 1"]
    assert "7 rows in, 3 rows written (2 new, 1 updated)" in logged[1]
    summary = tracker.summary("q", "1", "input drained")
    assert (summary.batches, summary.input_rows, summary.late_rows) == (2, 17, 2)
    assert (summary.windows_inserted, summary.windows_updated, summary.dead_lettered) == (5, 2, 4)
    assert summary.watermark == "2023-11-14T22:13:01.000Z"
    assert tracker.outcomes == {}  # each outcome taken with its batch's report


def test_a_batch_whose_report_has_not_come_still_counts_what_it_wrote(tmp_path: Path) -> None:
    tracker = _tracker(tmp_path)
    tracker.record(_ran(0, 10))
    tracker.outcomes[1] = _outcome(1, 4, dead=1)  # written; its report not polled yet
    summary = tracker.summary("q", "1", "stopped on request")
    assert (summary.batches, summary.windows_inserted, summary.dead_lettered) == (1, 4, 1)


def test_a_long_run_keeps_its_totals_and_only_its_recent_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress_module, "RECENT_BATCHES", 5)
    tracker = _tracker(tmp_path)
    for batch in range(12):
        tracker.record(_ran(batch, 2))
    assert sorted(tracker.progress) == list(range(7, 12))
    assert tracker.batches_seen() == 12 and tracker.input_rows() == 24
    assert tracker.newest is not None and tracker.newest["batchId"] == 11


def test_a_rate_keeps_the_digits_that_matter() -> None:
    assert [per_second(r) for r in (0, 0.05, 0.3, 5.25, 12_345.6)] == [
        "0", "<0.1", "0.3", "5.2", "12,346"
    ]  # fmt: skip


def test_the_progress_line_names_the_newest_batch_id_and_no_watermark_before_the_first(
    tmp_path: Path,
) -> None:
    """A resumed run's first batch is not batch 1: the line names the id the log lines
    and the ledger give it; Spark's epoch-zero watermark before there is one is none."""
    tracker = _tracker(tmp_path)
    first = _ran(6, 30)
    first["eventTime"] = {"watermark": "1970-01-01T00:00:00.000Z"}
    tracker.record(first)
    line = tracker.snapshot({}, elapsed_s=100.0).line()
    assert line.endswith("; 30 rows in, 0.3 rows/s; watermark -; 0 window rows written, "
                         "0 dead-lettered; batch 6")  # fmt: skip


def _ends(end: dict[str, int], latest: dict[str, int]) -> dict[str, Any]:
    report = _idle(3)
    report["sources"] = [
        {"endOffset": {"t": end, "_heartbeat": {"seq": 1}}, "latestOffset": {"t": latest}}
    ]
    return report


def test_an_idle_continuous_run_says_so_now_and_then(tmp_path: Path) -> None:
    tracker = _tracker(tmp_path)
    now = [0.0]
    heartbeat = IdleHeartbeat(tracker, every_s=60, clock=lambda: now[0])
    busy = [False]
    report = _ends({"0": 10, "1": 7}, {"0": 10, "1": 9})

    def tick(at: float) -> str | None:
        now[0] = at
        return heartbeat.tick(lambda: report, lambda: busy[0])

    tracker.record(_ran(0, 10))
    assert tick(59) is None  # a batch came (seen at the first tick): counting from 59
    busy[0] = True
    assert tick(120) is None  # a batch runs: not idle
    busy[0] = False
    assert tick(150) is None
    assert tick(180) == (
        "tracked: idle for 60 s, no new records; watermark 2023-11-14T22:13:00.000Z; "
        "2 records behind the topics' ends"
    )
    assert tick(200) is None and tick(240) is not None
    tracker.record(_ran(1, 1))
    assert tick(250) is None  # a new batch starts the count again


def test_a_run_still_starting_is_not_idle(tmp_path: Path) -> None:
    """Before the query's first report (its first batch plans or runs) no heartbeat: a
    slow start on a busy machine once printed "idle for 1 s ... ? records behind"."""
    tracker = _tracker(tmp_path)
    now = [0.0]
    heartbeat = IdleHeartbeat(tracker, every_s=1, clock=lambda: now[0])
    report: list[Any] = [None]

    def tick(at: float) -> str | None:
        now[0] = at
        return heartbeat.tick(lambda: report[0], lambda: False)

    assert tick(5) is None and tick(10) is None
    report[0] = _idle(0)  # Spark's idle report: a source that says no latestOffset
    assert tick(11) == (
        "tracked: idle for 1 s, no new records; watermark -; 0 records behind the topics' ends"
    )
