"""``bench.latency``'s analysis: which Delta version each record (``emit = "current"``)
or each window (``emit = "final"``) landed in, read from real Delta tables written
version by version. Pure logic: no Spark, no broker."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from bench.latency import LATENESS_MS, WINDOW_MS, closing_latencies, landing_times, versions

START = 1_700_000_000_000  # a window start: a multiple of WINDOW_MS
assert START % WINDOW_MS == 0


def _write(target: Path, rows: list[tuple[int, str, int]], at: float) -> None:
    """One version holding ``rows`` (window start ms, user, count), made visible at
    ``at`` (the commit file's modification time, which the analysis reads)."""
    table = pa.table(
        {
            "window_start": pa.array(
                [datetime.fromtimestamp(s / 1000, UTC) for s, _, _ in rows],
                pa.timestamp("us", tz="UTC"),
            ),
            "user_id": pa.array([u for _, u, _ in rows], pa.string()),
            "n": pa.array([n for _, _, n in rows], pa.int64()),
        }
    )
    write_deltalake(str(target), table, mode="overwrite")
    commits = sorted((target / "_delta_log").glob("*.json"))
    os.utime(commits[-1], (at, at))


def _run(target: Path, records: list[tuple[int, int, float]]) -> SimpleNamespace:
    """A finished run: records are (user, event time ms, produce stamp), in produce order."""
    producer = SimpleNamespace(
        users=[u for u, _, _ in records],
        ts=[t for _, t, _ in records],
        stamps=[s for _, _, s in records],
    )
    return SimpleNamespace(job="test", target=target, producer=producer)


def test_each_record_lands_with_the_first_version_that_counts_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    # u1 and u2 share a window, u1 has a record in the next one; equal event times too
    records = [
        (1, START + 5, 1.0),
        (2, START + 5, 1.1),
        (1, START + 9, 1.2),
        (1, START + 9, 1.3),
        (1, START + WINDOW_MS, 1.4),
    ]
    _write(target, [(START, "u1", 1)], at=10.0)
    _write(target, [(START, "u1", 1), (START, "u2", 1)], at=20.0)  # u1 unchanged
    _write(target, [(START, "u1", 3), (START, "u2", 1), (START + WINDOW_MS, "u1", 1)], at=30.0)
    landed = landing_times(_run(target, records), versions(target))
    assert list(landed) == [10.0, 20.0, 30.0, 30.0, 30.0]


def test_a_count_that_shrinks_or_a_record_that_never_lands_fails(tmp_path: Path) -> None:
    records = [(1, START, 1.0), (1, START + 1, 1.1)]
    shrinks = tmp_path / "shrinks"
    _write(shrinks, [(START, "u1", 2)], at=10.0)
    _write(shrinks, [(START, "u1", 1)], at=20.0)
    with pytest.raises(RuntimeError, match="counts 1 records"):
        landing_times(_run(shrinks, records), versions(shrinks))
    short = tmp_path / "short"
    _write(short, [(START, "u1", 1)], at=10.0)
    with pytest.raises(RuntimeError, match="1 records never landed"):
        landing_times(_run(short, records), versions(short))
    too_many = tmp_path / "too_many"
    _write(too_many, [(START, "u1", 3)], at=10.0)
    with pytest.raises(RuntimeError, match="produced 2"):
        landing_times(_run(too_many, records), versions(too_many))


def test_a_final_window_is_timed_from_the_record_that_passes_the_watermark(
    tmp_path: Path,
) -> None:
    target = tmp_path / "target"
    closes = START + WINDOW_MS + LATENESS_MS  # the event time that closes the first window
    records = [
        (1, START + 1, 1.0),
        (2, START + 2, 2.0),
        (1, closes - 1, 3.0),  # next window; the first is still open
        (2, closes, 4.0),  # the watermark reaches the first window's end
        (1, closes + 1, 5.0),
    ]
    _write(target, [(START, "u1", 1), (START, "u2", 1)], at=7.5)
    _write(target, [(START, "u1", 1), (START, "u2", 1)], at=9.0)  # later versions keep it
    closing, landing = closing_latencies(_run(target, records), versions(target))
    assert list(closing) == [4.0] and list(landing) == [7.5]


def test_a_final_window_split_over_versions_or_incomplete_fails(tmp_path: Path) -> None:
    records = [(1, START + 1, 1.0), (2, START + 2, 2.0), (1, START + 2, 2.5)]
    split = tmp_path / "split"
    _write(split, [(START, "u1", 2)], at=7.0)
    _write(split, [(START, "u1", 2), (START, "u2", 1)], at=8.0)
    with pytest.raises(RuntimeError, match=r"first rows landed at 7\.0"):
        closing_latencies(_run(split, records), versions(split))
    partial = tmp_path / "partial"
    _write(partial, [(START, "u1", 1), (START, "u2", 1)], at=7.0)
    with pytest.raises(RuntimeError, match=r"has 1 records for .*'u1'\) \(produced 2\)"):
        closing_latencies(_run(partial, records), versions(partial))
