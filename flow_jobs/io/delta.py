"""Delta MERGE through ``deltalake`` (delta-rs): the one writer every Delta table uses.

Idempotence comes from two layers:

* MERGE on the natural key, so a row written twice (a re-run from a fresh checkpoint)
  updates itself instead of duplicating;
* Delta's application transaction (``txn``) action: every commit records
  ``(app_id, version = micro-batch id)``, and a batch whose version the table already
  holds for that app id is skipped, so a replayed micro-batch (a crash between the
  write and Spark's commit log) changes nothing, not even the table version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.schema import Field

from flow_jobs.errors import TargetSchemaError, TargetUnavailable
from flow_jobs.instants import iso
from flow_jobs.io.batch import Supersede
from flow_jobs.locations import is_uri


@dataclass(frozen=True)
class MergeResult:
    skipped: bool  # the batch was already committed under this app id
    inserted: int
    updated: int
    table_version: int
    deleted: int = 0  # rows superseded by an overlapping one (Supersede)
    files_scanned: int = 0  # target files the MERGE read
    files_skipped: int = 0  # target files its bounds let it skip (file statistics)


#: Marks a source row of a superseding MERGE: true to upsert it, false to delete the
#: target rows it supersedes (each row of the batch comes twice).
_UPSERT = "flow_upsert"


def quoted(column: str) -> str:
    """A column name as a DataFusion identifier."""
    # DataFusion folds unquoted identifiers to lower case; quote to keep "userId".
    return '"' + column.replace('"', '""') + '"'


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """Every column nullable and every timestamp microseconds UTC, as Delta stores them."""
    fields = []
    for f in schema:
        t = f.type
        if pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC")
        fields.append(pa.field(f.name, t, nullable=True))
    return pa.schema(fields)


class DeltaMergeTable:
    """A Delta table written by MERGE on a natural key, once per (app id, batch id)."""

    def __init__(
        self,
        path: str,
        schema: pa.Schema,
        natural_key: Sequence[str],
        *,
        nullable_key: Sequence[str] = (),
        update_matched: bool = True,
        storage_options: dict[str, str] | None = None,
        added: Sequence[str] = (),
    ) -> None:
        self.path = path
        #: nullable columns added to the schema later: a table without them gets them
        self.added = tuple(added)
        self.schema = normalize_schema(schema)
        self.natural_key = list(natural_key)
        self.update_matched = update_matched
        self.storage_options = storage_options or None
        # NULL-safe equality only where a key column can hold NULL (group_by columns):
        # plain equality keeps file skipping effective on the window columns.
        # Each comparison in parentheses: delta-rs's parser binds IS NOT DISTINCT FROM
        # looser than AND, so `a IS NOT DISTINCT FROM b AND c ...` would mis-parse.
        self.nullable_key = tuple(nullable_key)
        self._predicate = self._equal(self.natural_key)

    def _equal(self, columns: Sequence[str]) -> str:
        return " AND ".join(
            f"(t.{quoted(c)} IS NOT DISTINCT FROM s.{quoted(c)})"
            if c in self.nullable_key
            else f"(t.{quoted(c)} = s.{quoted(c)})"
            for c in columns
        )

    def uri(self) -> str:
        return self.path if is_uri(self.path) else str(Path(self.path).resolve())

    def open(self) -> DeltaTable:
        return DeltaTable(self.uri(), storage_options=self.storage_options)

    def ensure(self) -> DeltaTable:
        """Create the table if missing; refuse one whose columns differ."""
        try:
            table = self.open()
        except TableNotFoundError:
            try:
                if not is_uri(self.path):
                    Path(self.uri()).mkdir(parents=True, exist_ok=True)
                return DeltaTable.create(
                    self.uri(), self.schema, mode="ignore", storage_options=self.storage_options
                )
            except (OSError, DeltaError) as e:
                reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
                raise TargetUnavailable(
                    f"Delta table {self.path} cannot be created: {reason}; name a place "
                    "the run can write in target.path"
                ) from None
        existing = normalize_schema(pa.schema(table.schema().to_arrow()))
        missing = [f for f in self.schema if f.name in self.added and f.name not in existing.names]
        earlier = pa.schema([f for f in self.schema if f not in missing])
        if missing and existing.equals(earlier):  # a table from before they were added
            table.alter.add_columns([Field.from_arrow(f) for f in missing])
            existing = normalize_schema(pa.schema(table.schema().to_arrow()))
        if not existing.equals(self.schema):
            raise TargetSchemaError(
                f"Delta table {self.path} has columns {_describe(existing)}, but the "
                f"pipeline writes {_describe(self.schema)}; write to a new path, or "
                "migrate the table"
            )
        return table

    def merge(
        self,
        rows: pa.Table,
        txn: tuple[str, int] | None = None,
        update_if: str | None = None,
        supersede: Supersede | None = None,
        delete_if: str | None = None,
        deletes: pa.Table | None = None,
    ) -> MergeResult:
        """MERGE ``rows``; with ``txn = (app_id, batch_id)``, at most once per batch;
        ``update_if``: a predicate on the source row (alias ``s``) a matched row must
        meet to be updated (the others stay as they are). ``supersede``: the same MERGE
        (one commit) also deletes the rows each row supersedes, those meeting
        ``delete_if`` (a predicate on the target row, alias ``t``). ``deletes``: target
        rows (their natural keys) the same MERGE deletes (top_n rows that left the top)."""
        table = self.open()
        commit = None
        if txn is not None:
            app_id, version = txn
            done = table.transaction_version(app_id)
            if done is not None and done >= version:
                return MergeResult(True, 0, 0, table.version())
            commit = CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=version)]
            )
        source = rows.select(self.schema.names).cast(self.schema)
        if supersede is not None:
            return self._supersede(table, source, supersede, commit, update_if, delete_if)
        if deletes is not None and deletes.num_rows:
            gone = deletes.select(self.schema.names).cast(self.schema)
            return self._upsert_and_delete(table, source, gone, commit, update_if, delete_if)
        merger = table.merge(
            source,
            _all(self._predicate, self._bounds(source)),
            source_alias="s",
            target_alias="t",
            commit_properties=commit,
        )
        if self.update_matched:
            merger = merger.when_matched_update_all(predicate=update_if)
        metrics = merger.when_not_matched_insert_all().execute()
        return MergeResult(
            False,
            int(metrics["num_target_rows_inserted"]),
            int(metrics["num_target_rows_updated"]),
            self.open().version(),
            **_files(metrics),
        )

    def _bounds(self, source: pa.Table) -> str | None:
        """Literal ranges of the batch's key timestamps (window_start, ...): a target
        row can only match a source row with the same value, so every match lies inside
        them, and delta-rs skips the files whose statistics lie outside (it derives no
        such bounds from an equality on non-partition columns itself: measured with
        deltalake 1.6, a MERGE of a new window scanned every file of the table)."""
        bounds = []
        for name in self.natural_key:
            if name in self.nullable_key or not pa.types.is_timestamp(self.schema.field(name).type):
                continue
            low, high = _timestamp_range(source.column(name))
            if low is None:
                continue
            bounds.append(f"t.{quoted(name)} >= '{low}' AND t.{quoted(name)} <= '{high}'")
        return _all(*bounds) if bounds else None

    def _upsert_and_delete(
        self,
        table: DeltaTable,
        source: pa.Table,
        gone: pa.Table,
        commit: CommitProperties | None,
        update_if: str | None,
        delete_if: str | None,
    ) -> MergeResult:
        """One MERGE: ``source`` upserted, the rows keyed as ``gone``'s deleted."""
        predicate = _all(self._predicate, self._bounds(pa.concat_tables([source, gone])))
        return self._flagged_merge(table, source, gone, predicate, commit, update_if, delete_if)

    def _supersede(
        self,
        table: DeltaTable,
        source: pa.Table,
        supersede: Supersede,
        commit: CommitProperties | None,
        update_if: str | None,
        delete_if: str | None,
    ) -> MergeResult:
        start, end = quoted(supersede.start), quoted(supersede.end)
        same = f"(t.{start} = s.{start} AND t.{end} = s.{end})"
        overlaps = f"(t.{start} < s.{end} AND t.{end} > s.{start})"
        group = self._equal(supersede.group)
        predicate = (
            f"{group} AND " if group else ""
        ) + f"((s.{_UPSERT} AND {same}) OR (NOT s.{_UPSERT} AND {overlaps} AND NOT {same}))"
        # Every target row matched overlaps (or equals) a batch row: it starts before the
        # latest end and ends after the earliest start (file skipping, as in _bounds).
        first_start, _ = _timestamp_range(source.column(supersede.start))
        _, last_end = _timestamp_range(source.column(supersede.end))
        if first_start is not None and last_end is not None:
            predicate = _all(predicate, f"t.{start} <= '{last_end}'", f"t.{end} >= '{first_start}'")
        return self._flagged_merge(table, source, source, predicate, commit, update_if, delete_if)

    def _flagged_merge(
        self,
        table: DeltaTable,
        upserts: pa.Table,
        deletes: pa.Table,
        predicate: str,
        commit: CommitProperties | None,
        update_if: str | None,
        delete_if: str | None,
    ) -> MergeResult:
        """One MERGE of ``upserts`` (flagged true: updated or inserted) and ``deletes``
        (flagged false: the target rows ``predicate`` matches them to are deleted)."""
        flagged = pa.concat_tables(
            [
                upserts.append_column(_UPSERT, pa.array([True] * upserts.num_rows, pa.bool_())),
                deletes.append_column(_UPSERT, pa.array([False] * deletes.num_rows, pa.bool_())),
            ]
        )
        columns = {quoted(c): f"s.{quoted(c)}" for c in self.schema.names}
        metrics = (
            table.merge(
                flagged,
                predicate,
                source_alias="s",
                target_alias="t",
                commit_properties=commit,
            )
            .when_matched_update(columns, predicate=_all(f"s.{_UPSERT}", update_if))
            .when_matched_delete(predicate=_all(f"NOT s.{_UPSERT}", delete_if))
            .when_not_matched_insert(columns, predicate=f"s.{_UPSERT}")
            .execute()
        )
        return MergeResult(
            False,
            int(metrics["num_target_rows_inserted"]),
            int(metrics["num_target_rows_updated"]),
            self.open().version(),
            int(metrics["num_target_rows_deleted"]),
            **_files(metrics),
        )


def _timestamp_range(column: pa.ChunkedArray) -> tuple[str | None, str | None]:
    """The lowest and highest UTC instants of a timestamp column as SQL literals."""
    extremes = pc.min_max(column.cast(pa.timestamp("us", tz="UTC")))
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if low is None or high is None:
        return None, None
    return _literal(low), _literal(high)


def _literal(instant: datetime) -> str:
    return iso(instant, timespec="microseconds")


def _files(metrics: dict) -> dict[str, int]:
    return {
        "files_scanned": int(metrics.get("num_target_files_scanned", 0)),
        "files_skipped": int(metrics.get("num_target_files_skipped_during_scan", 0)),
    }


def _all(*predicates: str | None) -> str:
    return " AND ".join(f"({p})" for p in predicates if p)


def read_delta(
    path: str, storage_options: dict[str, str] | None = None, sql: str = "SELECT * FROM t"
) -> pa.Table:
    """The current snapshot of a Delta table (or the rows of ``sql`` over it, registered
    as ``t``: an ORDER BY with a LIMIT stays in the engine), read by delta-rs's own query
    engine, with the table's own column types.

    Not ``DeltaTable.to_pyarrow_table()``: its pyarrow dataset scan holds a Python
    filesystem wrapper that Arrow's threads may release after the interpreter has
    finalized, which aborts the process at exit (seen here, ~1 run in 2).
    """
    table = DeltaTable(path, storage_options=storage_options)
    reader = QueryBuilder().register("t", table).execute(sql)
    schema = normalize_schema(pa.schema(table.schema().to_arrow()))
    return pa.table(reader.read_all()).cast(schema)


def query_delta(path: str, sql: str, storage_options: dict[str, str] | None = None) -> pa.Table:
    """``sql`` over the Delta table, registered as ``t``, run by delta-rs's query engine
    (DataFusion), for an aggregate: only its result leaves delta-rs."""
    table = DeltaTable(path, storage_options=storage_options)
    return pa.table(QueryBuilder().register("t", table).execute(sql).read_all())


def _describe(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"
