"""The Delta MERGE writer alone (delta-rs, no Spark): keys, NULLs, transactions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from flow_jobs.io.delta import DeltaMergeTable, Supersede, TargetSchemaError, read_delta

SCHEMA = pa.schema(
    [("w", pa.int64()), ("user", pa.string()), ("page", pa.string()), ("n", pa.int64())]
)


def _rows(*rows: tuple) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in rows], SCHEMA)


def test_merge_on_several_nullable_keys(tmp_path: Path) -> None:
    table = DeltaMergeTable(
        str(tmp_path / "t"), SCHEMA, ["w", "user", "page"], nullable_key=["user", "page"]
    )
    table.ensure()
    first = _rows((1, "a", "/x", 1), (1, None, "/x", 2), (1, "a", None, 3), (1, None, None, 4))
    assert table.merge(first, txn=("app", 0)).inserted == 4
    second = _rows((1, None, None, 40), (1, "a", "/x", 10), (1, "b", None, 5))
    result = table.merge(second, txn=("app", 1))
    assert (result.inserted, result.updated) == (1, 2)
    got = {(r["w"], r["user"], r["page"]): r["n"] for r in read_delta(table.path).to_pylist()}
    assert got == {
        (1, "a", "/x"): 10,
        (1, None, "/x"): 2,
        (1, "a", None): 3,
        (1, None, None): 40,
        (1, "b", None): 5,
    }


def test_a_replayed_batch_is_skipped(tmp_path: Path) -> None:
    table = DeltaMergeTable(str(tmp_path / "t"), SCHEMA, ["w", "user", "page"])
    table.ensure()
    table.merge(_rows((1, "a", "/x", 1)), txn=("app", 7))
    version = DeltaTable(table.path).version()
    replay = table.merge(_rows((1, "a", "/x", 99)), txn=("app", 7))
    assert replay.skipped and DeltaTable(table.path).version() == version
    assert read_delta(table.path).to_pylist()[0]["n"] == 1
    # another writer (a fresh checkpoint) has its own transaction id
    assert not table.merge(_rows((1, "a", "/x", 2)), txn=("other", 0)).skipped


def test_an_existing_table_with_other_columns_is_refused(tmp_path: Path) -> None:
    DeltaMergeTable(str(tmp_path / "t"), SCHEMA, ["w"]).ensure()
    other = pa.schema([("w", pa.int64()), ("n", pa.float64())])
    with pytest.raises(TargetSchemaError, match=r"has columns .* but the pipeline writes"):
        DeltaMergeTable(str(tmp_path / "t"), other, ["w"]).ensure()


TIMED = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("user", pa.string()),
        ("n", pa.int64()),
    ]
)


def _window(start: datetime, minutes: int, users: list[str | None], n: int) -> pa.Table:
    end = start + timedelta(minutes=minutes)
    return pa.Table.from_pylist(
        [{"window_start": start, "window_end": end, "user": u, "n": n} for u in users], TIMED
    )


def test_a_merge_reads_only_the_files_of_the_windows_it_writes(tmp_path: Path) -> None:
    table = DeltaMergeTable(
        str(tmp_path / "t"), TIMED, ["window_start", "window_end", "user"], nullable_key=["user"]
    )
    table.ensure()
    base = datetime(2026, 11, 1, tzinfo=UTC)
    early = datetime(1, 1, 1, tzinfo=UTC)  # Spark's first instant: a four-digit year literal
    starts = [early, *(base + timedelta(minutes=k) for k in range(6))]
    for start in starts:  # one file per window
        table.merge(_window(start, 1, ["a", "b", None], 1))
    # A new window: no file holds it, none is read.
    fresh = table.merge(_window(base + timedelta(minutes=6), 1, ["a"], 1))
    assert (fresh.inserted, fresh.files_scanned, fresh.files_skipped) == (1, 0, len(starts))
    # An update reads the files of the windows inside its range only (bounds are a range:
    # the lowest and the highest window of the batch), and updates exactly its rows.
    again = pa.concat_tables(
        [
            _window(base + timedelta(minutes=2), 1, ["a", None], 5),
            _window(base + timedelta(minutes=3), 1, ["b"], 5),
        ]
    )
    result = table.merge(again)
    assert (result.inserted, result.updated, result.files_scanned) == (0, 3, 2)
    oldest = table.merge(_window(early, 1, ["a"], 5))
    assert (oldest.updated, oldest.files_scanned) == (1, 1)
    rows = {(r["window_start"], r["user"]): r["n"] for r in read_delta(table.path).to_pylist()}
    assert len(rows) == 3 * len(starts) + 1
    assert rows[(early, "a")] == rows[(base + timedelta(minutes=2), None)] == 5
    assert sum(1 for n in rows.values() if n == 5) == 4


def test_a_superseding_merge_reads_only_files_it_may_overlap(tmp_path: Path) -> None:
    table = DeltaMergeTable(
        str(tmp_path / "t"), TIMED, ["window_start", "window_end", "user"], nullable_key=["user"]
    )
    table.ensure()
    supersede = Supersede(group=("user",), start="window_start", end="window_end")
    base = datetime(2026, 11, 1, tzinfo=UTC)
    for k in range(0, 50, 10):  # sessions [k, k+5) min of user a, one file each
        table.merge(_window(base + timedelta(minutes=k), 5, ["a"], k), supersede=supersede)
    # A session [22, 33) of a overlaps [20, 25) and [30, 35): it replaces both.
    grown = table.merge(_window(base + timedelta(minutes=22), 11, ["a"], 99), supersede=supersede)
    assert (grown.inserted, grown.deleted) == (1, 2)
    assert grown.files_skipped >= 2 and grown.files_scanned <= 3
    got = sorted((r["window_start"], r["n"]) for r in read_delta(table.path).to_pylist())
    assert [n for _, n in got] == [0, 10, 99, 40]
