"""A Delta batch that only inserts, written by the executors: each task writes its rows
as a Parquet data file into the table's folder, and the driver commits the files' add
actions (delta-rs' write transaction) in one Delta commit carrying the batch's
application transaction. The driver holds the files' names and statistics, never the
rows (``flow_jobs.runtime.sink``: the toArrow path is not taken).

A replayed batch finds its application transaction in the table and commits nothing;
its new files are removed. A crash between the files and the commit leaves files no
commit names: Delta readers never see them, and ``VACUUM`` removes them.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flow_jobs.io.batch import BatchEntry, StagedFiles, WriteResult
from flow_jobs.io.task_files import remove_files, stage_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: the custom commit metadata naming the query whose batch a commit holds
QUERY_ID = "flow-jobs.query-id"


def file_stats(metadata: Any, rows: int) -> str:
    """A data file's statistics as Delta's add action carries them: its row count, and
    each column's minimum, maximum and NULL count where Parquet kept them and Delta
    compares them as we would (integers, instants and dates; not strings, whose
    statistics Parquet may cut short, nor floats): what MERGE's and readers'
    file skipping read. A column without them is never skipped, never wrong."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int | None] = {}
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            name = column.path_in_schema
            if "." in name:
                continue  # a nested column: Delta keys it by its path in its own way
            s = column.statistics
            known = s is not None and s.has_null_count and nulls.get(name, 0) is not None
            nulls[name] = (nulls.get(name, 0) or 0) + s.null_count if known and s else None
            if s is None or not s.has_min_max:
                continue  # a row group of NULLs only has no bounds: the others decide
            lo, hi = _literal(s.min), _literal(s.max)
            low[name] = _UNKNOWN if lo is None else _lower(low.get(name), lo)
            high[name] = _UNKNOWN if hi is None else _higher(high.get(name), hi)
    out: dict[str, Any] = {"numRecords": rows}
    out["minValues"] = {k: _shown(v, up=False) for k, v in low.items() if v is not _UNKNOWN}
    out["maxValues"] = {k: _shown(v, up=True) for k, v in high.items() if v is not _UNKNOWN}
    out["nullCount"] = {k: n for k, n in nulls.items() if n is not None}
    return json.dumps(out)


_UNKNOWN = object()


def _lower(known: Any, value: Any) -> Any:
    return value if known is None else known if known is _UNKNOWN else min(known, value)


def _higher(known: Any, value: Any) -> Any:
    return value if known is None else known if known is _UNKNOWN else max(known, value)


def _literal(value: Any) -> Any:
    """A statistic Delta compares as we do, or None."""
    if isinstance(value, bool | float) or value is None:
        # floats: Parquet's bounds leave NaN out (and write 0.0 as -0.0), so a file
        # holding NaN would look as if it held none
        return None
    if isinstance(value, int | datetime | date):
        return value
    return None  # strings, bytes, decimals: left out


def _shown(value: Any, up: bool) -> Any:
    """A bound as Delta's statistics write it: an instant in UTC to the millisecond
    (a maximum rounded up, so that no row lies above it), a date as ISO-8601."""
    if isinstance(value, datetime):
        instant = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        if up and instant.microsecond % 1000:
            instant += timedelta(microseconds=1000 - instant.microsecond % 1000)
        return instant.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if isinstance(value, date):
        return value.isoformat()
    return value


class DeltaFileInserts:
    """A Delta table's inserts written by the executors (``root``: its local folder)."""

    def __init__(self, root: str, schema: pa.Schema) -> None:
        self.root = root
        self.schema = schema

    def stage(self, frame: DataFrame, batch_id: int) -> StagedFiles:
        """Run the micro-batch (its one action): each task writes its file."""
        return stage_files(frame, self.root, self.schema, f"part-b{batch_id:08d}", file_stats)

    def commit(
        self, staged: StagedFiles, entry: BatchEntry, app_id: str, open_table: Any
    ) -> WriteResult:
        """The files' add actions in one commit with the batch's transaction; a batch
        committed before takes none (its new files are removed)."""
        from deltalake.transaction import AddAction, CommitProperties, Transaction

        table = open_table()
        done = table.transaction_version(app_id)
        if done is not None and done >= entry.batch_id:
            remove_files(self.root, staged)
            return WriteResult(True, 0, 0, str(table.version()))
        if not staged.files:
            return WriteResult(False, 0, 0, str(table.version()))
        actions = [
            AddAction(f["path"], f["size"], {}, f["modified"], True, f["stats"])
            for f in staged.files
        ]
        table.create_write_transaction(
            actions,
            mode="append",
            schema=table.schema(),
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=entry.batch_id)],
                custom_metadata={QUERY_ID: entry.query_id},
            ),
        )
        return WriteResult(False, staged.num_rows, 0, str(open_table().version()))


def inserted_only_by(history: list[dict[str, Any]], version: int, query_id: str) -> bool:
    """Whether every commit of a table (its ``history``, newest first, up to
    ``version``) is its creation or one of ``query_id``'s executor inserts: then it holds
    no row another lineage, or a MERGE, wrote, and an insert cannot repeat one."""
    if len(history) != version + 1:
        return False  # some commits are gone from the log: not known
    for commit in history:
        if commit.get("operation") == "CREATE TABLE":
            continue
        if commit.get(QUERY_ID) != query_id:
            return False
    return True
