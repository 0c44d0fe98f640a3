"""The Delta MERGE writer alone (delta-rs, no Spark): keys, NULLs, transactions."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from flow_jobs.io.delta import DeltaMergeTable, TargetSchemaError, read_delta

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
