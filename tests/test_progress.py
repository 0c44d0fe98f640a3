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
from flow_jobs.runtime.progress import ProgressTracker
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
