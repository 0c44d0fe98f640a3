"""The Delta target's writer and its read-back: one MERGE per batch, carrying Delta's
application transaction (app id = the query, version = the batch id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from flow_jobs.instants import iso
from flow_jobs.io.batch import (
    BatchEntry,
    ClosedWindows,
    StagedFiles,
    WriteResult,
    row_key,
    split_deletes,
)
from flow_jobs.io.delta import DeltaMergeTable, query_delta, quoted, read_delta
from flow_jobs.io.task_files import local_root
from flow_jobs.locations import is_uri
from flow_jobs.sinks.base import Crowded, NoTargetYet, Sink, SinkOutput, TargetUnreadable
from flow_jobs.sinks.delta.files import DeltaFileInserts, inserted_only_by
from flow_jobs.sinks.delta.spec import DeltaTarget
from flow_jobs.spec.base import revealed

if TYPE_CHECKING:
    import psycopg

    from flow_jobs.ledger.store import LedgerStore


class DeltaMergeSink(Sink):
    """MERGE into a Delta table on the natural key: a matched row updated, a new one
    inserted, and the rows a batch supersedes or drops from the top N deleted, in one
    commit."""

    kind = "delta"
    spec_model = DeltaTarget
    once_by = "target"
    WRITES = "Delta MERGE (deltalake)"
    COMMIT = "Delta version"
    spec: DeltaTarget
    table: DeltaMergeTable

    def __init__(self, spec: DeltaTarget, output: SinkOutput, store: LedgerStore | None) -> None:
        super().__init__(spec, output, store)
        self._files: DeltaFileInserts | None = None
        self.table = DeltaMergeTable(
            spec.path,
            output.schema,
            output.natural_key,
            nullable_key=output.nullable_key,
            storage_options=revealed(spec.storage_options),
        )

    def ensure(self) -> None:
        self.table.ensure()

    def version(self) -> str | None:
        return str(self.table.open().version())

    def writing(self) -> str:
        t = self.table
        merge = (
            f"deltalake MERGE into {t.path} on ({', '.join(t.natural_key)}), a matched row "
            "updated, a new one inserted, in one Delta commit carrying the application "
            "transaction (app id flow-jobs/<pipeline>/<query id>, version = batch id): a "
            "replayed batch finds its version there and is skipped"
        )
        if self.spec.inserts_from == "driver" or local_root(t.uri()) is None:
            return merge
        return (
            f"{merge}; a batch that only inserts, on a table only this checkpoint's inserts "
            "wrote: each task writes its rows as a Parquet file into the table's folder, and "
            "the driver commits their add actions (delta-rs write transaction) with the same "
            "application transaction"
        )

    def inserts(self, query_id: str, plain_paths_shared: bool) -> DeltaFileInserts | None:
        """The executors write a batch's files where the table is in a folder every
        process reaches (a plain path on a local master, a ``file://`` URI) and holds
        only this query's inserts (its history says so: no MERGE, no other lineage), so
        no insert can repeat a row in it."""
        self._files = None
        takes_back = (self.supersede, self.ranked, self.closed)
        if self.spec.inserts_from != "executors" or self.deletes_flagged or any(takes_back):
            return None
        if not plain_paths_shared and not is_uri(self.spec.path):
            return None
        root = local_root(self.table.uri())
        table = self.table.open()
        if root is None or not inserted_only_by(table.history(), table.version(), query_id):
            return None
        self._files = DeltaFileInserts(root, self.table.schema)
        return self._files

    def write(
        self, rows: pa.Table | StagedFiles, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        app_id = f"flow-jobs/{entry.pipeline}/{entry.query_id}"
        if isinstance(rows, StagedFiles):
            assert self._files is not None, "files staged without an inserts writer"
            return self._files.commit(rows, entry, app_id, self.table.open)
        if rows.num_rows:
            update_if = delete_if = None
            if self.closed is not None:
                update_if = open_window(self.closed, "s")
                delete_if = open_window(self.closed, "t")
            deletes = None
            if self.deletes_flagged:
                rows, deletes = split_deletes(rows)
            elif self.ranked is not None:
                deletes = self._left_the_top(rows)
            merged = self.table.merge(
                rows,
                txn=(app_id, entry.batch_id),
                update_if=update_if,
                supersede=self.supersede,
                delete_if=delete_if,
                deletes=deletes,
            )
            return WriteResult(
                merged.skipped,
                merged.inserted,
                merged.updated,
                str(merged.table_version),
                merged.deleted,
            )
        return WriteResult(False, 0, 0, self.version())

    def _left_the_top(self, rows: pa.Table) -> pa.Table:
        """The target's rows in the partitions ``rows`` hold, which ``rows`` (their whole
        top N) no longer hold."""
        assert self.ranked is not None
        start = self.ranked[0]  # the window's start, then its end and partition_by
        dataset = self.table.open().to_pyarrow_dataset()
        starts = rows.column(start).cast(dataset.schema.field(start).type)
        held = dataset.to_table(filter=pc.field(start).isin(pc.unique(starts)))
        if held.num_rows == 0:
            return held
        partitions = {row_key(r, self.ranked) for r in rows.select(self.ranked).to_pylist()}
        kept = {row_key(r, self.table.natural_key) for r in rows.to_pylist()}
        gone = [
            i
            for i, r in enumerate(held.to_pylist())
            if row_key(r, self.ranked) in partitions
            and row_key(r, self.table.natural_key) not in kept
        ]
        return held.take(pa.array(gone, pa.int64()))

    # -- read back -------------------------------------------------------------------

    @classmethod
    def location(cls, spec: DeltaTarget, store_place: str) -> str:  # type: ignore[override]
        return f"Delta table {spec.path}"

    @classmethod
    def newest_rows(  # type: ignore[override]
        cls, spec: DeltaTarget, key: Sequence[str], store: LedgerStore | None, limit: int
    ) -> list[dict[str, Any]]:
        from deltalake.exceptions import TableNotFoundError

        order = ", ".join(f"{quoted(c)} DESC NULLS LAST" for c in key)
        query = f"SELECT * FROM t{f' ORDER BY {order}' if order else ''} LIMIT {int(limit)}"
        try:
            return read_delta(spec.path, revealed(spec.storage_options), query).to_pylist()
        except TableNotFoundError:
            raise NoTargetYet(spec.path) from None

    @classmethod
    def crowded(  # type: ignore[override]
        cls, spec: DeltaTarget, store: LedgerStore, columns: Sequence[str], limit: int
    ) -> Crowded:
        """One aggregate in delta-rs's engine: no row of the target comes into Python."""
        query = (
            f"SELECT count(*) AS groups, coalesce(sum(k - {limit}), 0) AS extra, "
            "coalesce(max(k), 0) AS most FROM (SELECT count(*) AS k FROM t GROUP BY "
            f"{', '.join(map(quoted, columns))} HAVING count(*) > {limit}) d"
        )
        try:
            found = query_delta(spec.path, query, revealed(spec.storage_options))
        except Exception as e:
            raise TargetUnreadable(f"cannot read the target: {e}") from e
        return Crowded(*(int(found[c][0].as_py()) for c in ("groups", "extra", "most")))


def open_window(closed: ClosedWindows, alias: str) -> str:
    """``closed``'s condition as a Delta SQL predicate on a row (``alias``): its window
    may be written."""
    condition = f"{alias}.`{closed.end_column}` > '{iso(closed.until)}'"
    if closed.replay_from is not None and closed.start_column is not None:
        replayed = f"{alias}.`{closed.start_column}` >= '{iso(closed.replay_from)}'"
        condition = f"({condition} OR {replayed})"
    return condition
