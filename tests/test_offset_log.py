"""Spark's offset log entries, parsed once (``checkpoint_files.read_offset_entry``) for
the Kafka reader's late-row stamp and the driver's ledger alike. The layout itself is
pinned against Spark in tests/test_spark_contracts.py."""

from __future__ import annotations

import json
from pathlib import Path

from flow_jobs.io.checkpoint_files import checkpoint_files, read_offset_entry


def _write(root: Path, batch: int, *lines: str) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch)).write_text("\n".join(lines))


def test_an_entry_gives_its_metadata_and_each_source_in_order(tmp_path: Path) -> None:
    metadata = {"batchWatermarkMs": 1_500, "batchTimestampMs": 1_700_000_000_123}
    clicks = {"clicks": {"0": 10, "1": 12}}
    _write(tmp_path, 3, "v1", json.dumps(metadata), "-", json.dumps(clicks))
    entry = read_offset_entry(checkpoint_files(str(tmp_path)), 3)
    assert entry is not None
    assert (entry.watermark_ms, entry.timestamp_ms) == (1_500, 1_700_000_000_123)
    assert entry.sources == (None, clicks)


def test_a_missing_purged_or_cut_short_entry_is_none(tmp_path: Path) -> None:
    _write(tmp_path, 0, "v1")  # cut short: no metadata line
    files = checkpoint_files(f"file://{tmp_path}")
    assert read_offset_entry(files, 0) is None
    assert read_offset_entry(files, 1) is None
    assert read_offset_entry(files, -1) is None
    _write(tmp_path, 1, "v1", "{}", json.dumps({"t": {"0": 1}}))
    entry = read_offset_entry(files, 1)
    assert entry is not None and (entry.watermark_ms, entry.timestamp_ms) == (0, None)
