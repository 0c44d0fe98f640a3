"""The Iceberg target's writer and its read-back, through pyiceberg.

Each batch is one catalog commit. pyiceberg has no MERGE with conditions, so the sink
merges in Arrow: it reads the rows of the table a batch can touch (the *region*: the
batch's range of each timestamp key column), applies the batch to them as the Delta and
Postgres targets do (a matched row updated, a new one inserted, an earlier lineage's
closed windows left alone, superseded sessions and rows that left a top N deleted),
and replaces the region with the result: ``overwrite`` with the region's filter, in one
transaction that also records the batch id in a table property. A replayed batch finds
its id there and is skipped, as Delta's application transactions do; the property
lives in the table's metadata, so expiring snapshots does not forget it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from flow_jobs.errors import TargetSchemaError, TargetUnavailable
from flow_jobs.io.batch import BatchEntry, StagedFiles, WriteResult, row_key, split_deletes
from flow_jobs.io.delta import normalize_schema
from flow_jobs.io.task_files import local_root
from flow_jobs.locations import is_uri
from flow_jobs.secrets import redact
from flow_jobs.sinks.base import Crowded, NoTargetYet, Sink, SinkOutput, TargetUnreadable
from flow_jobs.sinks.iceberg.catalog import load, partition_field
from flow_jobs.sinks.iceberg.files import IcebergFileInserts, inserted_only_by
from flow_jobs.sinks.iceberg.merge import merge_region
from flow_jobs.sinks.iceberg.spec import IcebergTarget

if TYPE_CHECKING:
    import psycopg
    from pyiceberg.catalog import Catalog
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

    from flow_jobs.ledger.store import LedgerStore

#: the table property holding the last batch id an application (a query) committed
TXN_PROPERTY = "flow-jobs.batch.{app_id}"


class IcebergSink(Sink):
    """Commit each batch to an Iceberg table: the region of the table it touches
    replaced by the region merged with the batch, in one snapshot commit."""

    kind = "iceberg"
    spec_model = IcebergTarget
    once_by = "target"
    WRITES = "Iceberg commit (pyiceberg)"
    COMMIT = "Iceberg snapshot"
    spec: IcebergTarget

    def __init__(self, spec: IcebergTarget, output: SinkOutput, store: LedgerStore | None) -> None:
        super().__init__(spec, output, store)
        self.schema = normalize_schema(output.schema)
        self.natural_key = list(output.natural_key)
        missing = [c for c in spec.partition_columns() if c not in self.schema.names]
        if missing:
            raise TargetSchemaError(
                f"target.partition_by names {', '.join(missing)}, not a column the pipeline "
                f"writes ({', '.join(self.schema.names)})"
            )
        # the key's timestamp columns that never hold NULL bound the region a batch reads
        self._bounded = [
            c
            for c in self.natural_key
            if c not in output.nullable_key and pa.types.is_timestamp(self.schema.field(c).type)
        ]
        self._catalog: Catalog | None = None
        self._files: IcebergFileInserts | None = None

    # -- the writer ------------------------------------------------------------------

    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load(self.spec, self.store.url if self.store is not None else None)
        return self._catalog

    def close(self) -> None:
        """Release a SQL catalog's connections (its SQLAlchemy engine's pool)."""
        engine = getattr(self._catalog, "engine", None)
        if engine is not None:
            engine.dispose()
        self._catalog = None

    def table(self) -> Table:
        return self.catalog().load_table(self.spec.identifier)

    def ensure(self) -> None:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

        try:
            catalog = self.catalog()
        except Exception as e:  # any client's error: each is said in one line
            raise TargetUnavailable(
                f"Iceberg {self.spec.catalog.kind} catalog {self.spec.catalog.name!r} cannot "
                f"be opened: {redact(_first_line(e))}; check target.catalog"
            ) from None
        namespace, _ = self.spec.identifier
        try:
            catalog.create_namespace_if_not_exists(namespace)
            try:
                table = catalog.load_table(self.spec.identifier)
            except NoSuchTableError:
                table = self._create(catalog)
        except NamespaceAlreadyExistsError:  # another run created it meanwhile
            table = catalog.load_table(self.spec.identifier)
        except (OSError, ValueError) as e:
            raise TargetUnavailable(
                f"Iceberg table {self.spec.describe()} cannot be created: "
                f"{redact(_first_line(e))}; check target.catalog (its warehouse must be "
                "writable)"
            ) from None
        existing = normalize_schema(table.schema().as_arrow())
        ours = pa.schema([pa.field(f.name, _plain(f.type)) for f in self.schema])
        theirs = pa.schema([pa.field(f.name, _plain(f.type)) for f in existing])
        if not theirs.equals(ours):
            raise TargetSchemaError(
                f"Iceberg table {self.spec.describe()} has columns {_describe(theirs)}, but "
                f"the pipeline writes {_describe(ours)}; write to a new table, or migrate it"
            )

    def _create(self, catalog: Catalog) -> Table:
        """The table with its partition spec, in one commit (a crash leaves none)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            created = catalog.create_table_transaction(self.spec.identifier, self.schema)
            if self.spec.partition_by:
                with created.update_spec() as update:
                    for entry in self.spec.partition_by:
                        column, transform, name = partition_field(entry)
                        update.add_field(column, transform, name)
            created.commit_transaction()
        except TableAlreadyExistsError:
            pass
        return catalog.load_table(self.spec.identifier)

    def version(self) -> str | None:
        snapshot = self.table().current_snapshot()
        return None if snapshot is None else str(snapshot.snapshot_id)

    def writing(self) -> str:
        if self.deletes_flagged:
            region = "the table's rows of the keys the batch names"
        elif self._bounded:
            region = f"the table's rows in the batch's range of {', '.join(self._bounded)}"
        else:
            region = "the whole table (the key has no timestamp column to bound it by)"
        return (
            f"pyiceberg commit to {self.spec.describe()} on ({', '.join(self.natural_key)}): "
            f"{region} read, merged with the batch in Arrow (a matched row updated, a new "
            "one inserted) and overwritten in one snapshot commit that records the batch id "
            "in the table property flow-jobs.batch.<app id> (app id flow-jobs/<pipeline>/"
            "<query id>): a replayed batch finds it there and is skipped"
            + (
                "; a batch that only inserts, into an unpartitioned table only this "
                "checkpoint's inserts wrote: each task writes its rows as a Parquet file into "
                "the table's data folder, and the driver adds the files (pyiceberg add_files) "
                "in the same kind of commit"
                if self.spec.inserts_from == "executors" and not self.spec.partition_by
                else ""
            )
        )

    def inserts(self, query_id: str, plain_paths_shared: bool) -> IcebergFileInserts | None:
        """The executors write a batch's files into an unpartitioned table of a local
        warehouse every process reaches (a plain path with a local master, a ``file://``
        URI on a cluster), whose every snapshot is one of this query's inserts."""
        self._files = None
        takes_back = (self.supersede, self.ranked, self.closed)
        if self.spec.inserts_from != "executors" or self.deletes_flagged or any(takes_back):
            return None
        warehouse = self.spec.catalog.warehouse
        if self.spec.partition_by or not (plain_paths_shared or is_uri(warehouse or "")):
            return None
        table = self.table()
        root = local_root(table.location())
        if root is None or not inserted_only_by(table, query_id):
            return None
        self._files = IcebergFileInserts(str(Path(root, "data")), self.schema)
        return self._files

    def write(
        self, rows: pa.Table | StagedFiles, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        table = self.table()
        txn = TXN_PROPERTY.format(app_id=f"flow-jobs/{entry.pipeline}/{entry.query_id}")
        done = table.properties.get(txn)
        if done is not None and int(done) >= entry.batch_id:
            if isinstance(rows, StagedFiles) and self._files is not None:
                self._files.discard(rows)
            return WriteResult(True, 0, 0, self._snapshot(table))
        if isinstance(rows, StagedFiles):
            assert self._files is not None, "files staged without an inserts writer"
            self._files.commit(table, rows, {txn: str(entry.batch_id)}, _summary(entry))
            return WriteResult(False, rows.num_rows, 0, self._snapshot(self.table()))
        if rows.num_rows == 0:
            return WriteResult(False, 0, 0, self._snapshot(table))
        target_schema = table.schema().as_arrow()
        gone: list[dict[str, Any]] = []
        if self.deletes_flagged:
            rows, deleted = split_deletes(rows)
            gone = deleted.select(self.natural_key).to_pylist()
        batch = rows.select(self.schema.names).cast(self.schema)
        region = self._region(batch) if not self.deletes_flagged else self._keys(batch, gone)
        held = table.scan(row_filter=region).to_arrow()
        closed = self.closed
        merged = merge_region(
            held.to_pylist(),
            batch.to_pylist(),
            self.natural_key,
            self.supersede,
            self.ranked,
            held_open=None if closed is None else closed.arrow_open(held).to_pylist(),
            batch_open=None if closed is None else closed.arrow_open(batch).to_pylist(),
            deletes=gone,
        )
        result = pa.Table.from_pylist(merged.rows, schema=target_schema)
        properties = _summary(entry)
        with table.transaction() as tx:
            if held.num_rows and merged.rows:
                tx.overwrite(result, overwrite_filter=region, snapshot_properties=properties)
            elif held.num_rows:  # the batch deleted every row of its region
                tx.delete(region, snapshot_properties=properties)
            elif merged.rows:
                tx.append(result, snapshot_properties=properties)
            tx.set_properties({txn: str(entry.batch_id)})
        return WriteResult(
            False, merged.inserted, merged.updated, self._snapshot(self.table()), merged.deleted
        )

    @staticmethod
    def _snapshot(table: Table) -> str | None:
        snapshot = table.current_snapshot()
        return None if snapshot is None else str(snapshot.snapshot_id)

    def _region(self, batch: pa.Table) -> BooleanExpression:
        """The table's rows a batch can match, supersede or push out of a top N."""
        from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThanOrEqual

        bounds: list[BooleanExpression] = []
        if self.supersede is not None:
            # a row it supersedes overlaps one of its rows: it starts before the latest
            # end and ends after the earliest start
            first_start, _ = _range(batch.column(self.supersede.start))
            _, last_end = _range(batch.column(self.supersede.end))
            if first_start is not None and last_end is not None:
                bounds.append(LessThanOrEqual(self.supersede.start, last_end))
                bounds.append(GreaterThanOrEqual(self.supersede.end, first_start))
        else:
            for column in self._bounded:
                low, high = _range(batch.column(column))
                if low is not None and high is not None:
                    bounds.append(GreaterThanOrEqual(column, low))
                    bounds.append(LessThanOrEqual(column, high))
        return reduce(And, bounds) if bounds else AlwaysTrue()

    def _keys(self, batch: pa.Table, gone: list[dict[str, Any]]) -> BooleanExpression:
        """A change feed's region: the table's rows of the keys its batch names."""
        from pyiceberg.expressions import AlwaysFalse, And, EqualTo, In, IsNull, Or

        keys = {row_key(r, self.natural_key) for r in batch.select(self.natural_key).to_pylist()}
        keys |= {row_key(r, self.natural_key) for r in gone}
        if not keys:
            return AlwaysFalse()
        if len(self.natural_key) == 1:
            (column,) = self.natural_key
            values = [k[0] for k in keys if k[0] is not None]
            found: BooleanExpression = In(column, values) if values else AlwaysFalse()
            return Or(found, IsNull(column)) if len(values) < len(keys) else found

        def equal(column: str, value: Any) -> BooleanExpression:
            return IsNull(column) if value is None else EqualTo(column, value)

        rows = (reduce(And, (equal(c, v) for c, v in zip(self.natural_key, k, strict=True)))
                for k in keys)  # fmt: skip
        return reduce(Or, rows)

    # -- read back -------------------------------------------------------------------

    @classmethod
    def location(cls, spec: IcebergTarget, store_place: str) -> str:  # type: ignore[override]
        catalog = spec.catalog
        where = (
            f"the SQL catalog {catalog.name!r} in {store_place}"
            if catalog.kind == "sql" and catalog.uri is None
            else f"the {catalog.kind} catalog {catalog.name!r}"
        )
        return f"Iceberg table {spec.describe()} in {where}"

    @classmethod
    def newest_rows(  # type: ignore[override]
        cls, spec: IcebergTarget, key: Sequence[str], store: LedgerStore | None, limit: int
    ) -> list[dict[str, Any]]:
        """Read batch by batch, keeping the ``limit`` newest: memory bounded by the
        limit and one record batch, never the whole table."""
        table = cls._open(spec, store)
        newest: pa.Table | None = None
        for batch in table.scan().to_arrow_batch_reader():
            part = pa.Table.from_batches([batch])
            newest = part if newest is None else pa.concat_tables([newest, part])
            newest = _top(newest, key, limit)
        return [] if newest is None else _top(newest, key, limit).to_pylist()

    @classmethod
    def crowded(  # type: ignore[override]
        cls, spec: IcebergTarget, store: LedgerStore, columns: Sequence[str], limit: int
    ) -> Crowded:
        try:
            table = cls._open(spec, store)
            counts: list[pa.Table] = []
            for batch in table.scan(selected_fields=tuple(columns)).to_arrow_batch_reader():
                part = pa.Table.from_batches([batch]).group_by(list(columns), use_threads=False)
                counts.append(part.aggregate([([], "count_all")]))
        except NoTargetYet:
            raise
        except Exception as e:
            raise TargetUnreadable(f"cannot read the target: {e}") from e
        if not counts:
            return Crowded(0, 0, 0)
        total = pa.concat_tables(counts).group_by(list(columns)).aggregate([("count_all", "sum")])
        k = total.column("count_all_sum")
        over = pc.filter(k, pc.greater(k, limit))
        if len(over) == 0:
            return Crowded(0, 0, 0)
        extra = int(pc.sum(over).as_py()) - limit * len(over)
        return Crowded(len(over), extra, int(pc.max(over).as_py()))

    @classmethod
    def _open(cls, spec: IcebergTarget, store: LedgerStore | None) -> Table:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return load(spec, store.url if store is not None else None).load_table(spec.identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise NoTargetYet(spec.describe()) from None


def _summary(entry: BatchEntry) -> dict[str, str]:
    """A batch's snapshot summary properties."""
    return {
        "flow-jobs.pipeline": entry.pipeline,
        "flow-jobs.query-id": entry.query_id,
        "flow-jobs.batch-id": str(entry.batch_id),
    }


def _range(column: pa.ChunkedArray) -> tuple[str | None, str | None]:
    """The lowest and highest UTC instants of a timestamp column, as Iceberg literals."""
    extremes = pc.min_max(column.cast(pa.timestamp("us", tz="UTC")))
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if low is None or high is None:
        return None, None
    # pyiceberg's literal parser takes "+00:00", not "Z"
    return low.isoformat(timespec="microseconds"), high.isoformat(timespec="microseconds")


def _top(rows: pa.Table, key: Sequence[str], limit: int) -> pa.Table:
    if not key:
        return rows.slice(0, limit)
    order = [(c, "descending", "at_end") for c in key]  # NULLs last
    return rows.take(pc.sort_indices(rows, sort_keys=order)[:limit])


def _plain(t: pa.DataType) -> pa.DataType:
    """A type as Iceberg keeps it: strings and binaries of one width, lists of ones."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_plain(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_plain(t.key_type), _plain(t.item_type))
    return t


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _describe(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"
