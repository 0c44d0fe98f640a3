"""The Postgres target's writer and its read-back: an upsert into a table of the state
store's database, in the transaction that writes the batch's ledger row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import Jsonb

from flow_jobs.errors import TargetSchemaError
from flow_jobs.io.batch import BatchEntry, ClosedWindows, Supersede, WriteResult, split_deletes
from flow_jobs.sinks.base import Crowded, NoTargetYet, Sink, SinkOutput
from flow_jobs.sinks.postgres.spec import PostgresTarget

if TYPE_CHECKING:
    from flow_jobs.ledger.store import LedgerStore


def _not_distinct(column: str) -> sql.Composable:
    """``t.column`` equals ``s.column``, NULL equal to NULL (a NULL key is one key)."""
    return sql.SQL("t.{0} IS NOT DISTINCT FROM s.{0}").format(sql.Identifier(column))


# Arrow -> Postgres column types for the tables we create. Lists become arrays, structs
# and maps JSONB; anything else unknown is refused at start-up, not at the first batch.
def postgres_type(t: pa.DataType) -> str:
    if pa.types.is_timestamp(t):
        return "timestamptz" if t.tz else "timestamp"
    simple = [
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_int8, "smallint"),
        (pa.types.is_int16, "smallint"),
        (pa.types.is_int32, "integer"),
        (pa.types.is_int64, "bigint"),
        (pa.types.is_float32, "real"),
        (pa.types.is_float64, "double precision"),
        (pa.types.is_decimal, "numeric"),
        (pa.types.is_date, "date"),
        (lambda x: pa.types.is_string(x) or pa.types.is_large_string(x), "text"),
        (lambda x: pa.types.is_binary(x) or pa.types.is_large_binary(x), "bytea"),
        (lambda x: pa.types.is_struct(x) or pa.types.is_map(x), "jsonb"),
    ]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = postgres_type(t.value_type)
        return "jsonb" if inner == "jsonb" else f"{inner}[]"
    raise TargetSchemaError(f"no Postgres column type for Arrow type {t}")


class PostgresUpsertSink(Sink):
    """Upsert into a table of the state store's database (so output and ledger share a
    transaction). Created with the natural key as primary key; a key that can hold NULL
    (outer-join sides, nullable group_by columns) gets ``UNIQUE NULLS NOT DISTINCT``
    instead (PostgreSQL ≥ 15), so a NULL key is one key, as in the Delta MERGE."""

    kind = "postgres"
    spec_model = PostgresTarget
    once_by = "ledger"
    WRITES = "Postgres upsert"
    COMMIT = "Postgres transaction"
    spec: PostgresTarget

    def __init__(self, spec: PostgresTarget, output: SinkOutput, store: LedgerStore | None) -> None:
        """``store``: the state store, whose database holds the table."""
        super().__init__(spec, output, store)
        schema = self.schema = output.schema
        self.natural_key = list(output.natural_key)
        self.nullable = bool(set(output.nullable_key) & set(output.natural_key))
        self._table = sql.Identifier(spec.schema_name, spec.table)
        self._json_columns = {f.name for f in schema if postgres_type(f.type) == "jsonb"}

    def writing(self) -> str:
        keys = ", ".join(self.natural_key)
        values = [n for n in self.schema.names if n not in self.natural_key]
        unique = "UNIQUE NULLS NOT DISTINCT" if self.nullable else "PRIMARY KEY"
        return (
            f"COPY into a temporary table, then INSERT ... ON CONFLICT ({keys}) "
            f"{'DO UPDATE' if values else 'DO NOTHING'} into {self.description} ({unique} "
            f"({keys})), in the state store's database"
        )

    def ensure(self) -> None:
        assert self.store is not None, "a target built to be described is never written"
        columns = [sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(postgres_type(f.type)))
                   for f in self.schema]  # fmt: skip
        key = sql.SQL(", ").join(map(sql.Identifier, self.natural_key))
        unique = "UNIQUE NULLS NOT DISTINCT ({})" if self.nullable else "PRIMARY KEY ({})"
        constraint = sql.SQL(unique).format(key)
        with self.store.connect() as conn:
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    sql.Identifier(self.spec.schema_name)
                )
            )
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, {})").format(
                    self._table, sql.SQL(", ").join(columns), constraint
                )
            )
            existing = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s ORDER BY ordinal_position",
                    (self.spec.schema_name, self.spec.table),
                )
            ]
        if existing != self.schema.names:
            raise TargetSchemaError(
                f"Postgres table {self.description} has columns ({', '.join(existing)}), but "
                f"the pipeline writes ({', '.join(self.schema.names)}); write to a new table, "
                "or migrate it"
            )

    def write(
        self, rows: pa.Table, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        """Upsert in ``conn``, the ledger row's transaction: its id is the version."""
        assert conn is not None, "a Postgres target writes in its ledger row's transaction"
        names = self.schema.names
        inserted = updated = superseded = 0
        if rows.num_rows and self.deletes_flagged:
            rows, gone = split_deletes(rows)
            if gone.num_rows:
                superseded = self._delete_keys(conn, gone.select(names))
        if rows.num_rows:
            self._stage(conn, rows.select(names))
            if self.supersede is not None:
                superseded = self._delete_superseded(conn, self.supersede)
            if self.ranked is not None:
                superseded = self._delete_left_the_top(conn, self.ranked)
            inserted, updated = self._upsert(conn, names)
        xid = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        return WriteResult(False, inserted, updated, xid[0] if xid else None, superseded)

    def _stage(self, conn: Any, rows: pa.Table, name: str = "flow_batch") -> None:
        """The batch's rows in a temporary table (``flow_batch``) of the transaction."""
        names = rows.column_names
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        staged = sql.Identifier(name)
        conn.execute(
            sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA").format(
                staged, cols, self._table
            )
        )
        with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(staged, cols)) as copy:
            for row in rows.to_pylist():
                copy.write_row(
                    [Jsonb(row[n]) if n in self._json_columns else row[n] for n in names]
                )

    def _delete_keys(self, conn: Any, gone: pa.Table) -> int:
        """Delete the rows keyed as ``gone``'s (a change feed's deletes)."""
        staged = "flow_batch_deletes"
        self._stage(conn, gone, staged)
        same = sql.SQL(" AND ").join(_not_distinct(c) for c in self.natural_key)
        deleted = conn.execute(
            sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE {}").format(
                self._table, sql.Identifier(staged), same
            )
        )
        return deleted.rowcount

    def _delete_superseded(self, conn: Any, supersede: Supersede) -> int:
        """Delete the rows the batch's rows supersede (before their upsert)."""
        t, s = sql.Identifier("t"), sql.Identifier("s")
        start, end = sql.Identifier(supersede.start), sql.Identifier(supersede.end)
        conditions = [_not_distinct(c) for c in supersede.group]
        conditions += [
            sql.SQL("{t}.{start} < {s}.{end} AND {t}.{end} > {s}.{start}").format(
                t=t, s=s, start=start, end=end
            ),
            sql.SQL("NOT ({t}.{start} = {s}.{start} AND {t}.{end} = {s}.{end})").format(
                t=t, s=s, start=start, end=end
            ),
        ]
        if self.closed is not None:  # an earlier lineage's closed windows stay
            conditions.append(open_window(self.closed, "t"))
        deleted = conn.execute(
            sql.SQL("DELETE FROM {} AS t USING flow_batch AS s WHERE {}").format(
                self._table, sql.SQL(" AND ").join(conditions)
            )
        )
        return deleted.rowcount

    def _delete_left_the_top(self, conn: Any, partition: Sequence[str]) -> int:
        """Delete the rows of the partitions the batch holds whose key it does not hold
        (the batch is the whole top N of each partition it touches)."""

        def same(columns: Sequence[str]) -> sql.Composable:
            return sql.SQL(" AND ").join(_not_distinct(c) for c in columns)

        conditions = [
            sql.SQL("EXISTS (SELECT 1 FROM flow_batch AS s WHERE {})").format(same(partition)),
            sql.SQL("NOT EXISTS (SELECT 1 FROM flow_batch AS s WHERE {})").format(
                same(self.natural_key)
            ),
        ]
        if self.closed is not None:  # an earlier lineage's closed windows stay
            conditions.append(open_window(self.closed, "t"))
        deleted = conn.execute(
            sql.SQL("DELETE FROM {} AS t WHERE {}").format(
                self._table, sql.SQL(" AND ").join(conditions)
            )
        )
        return deleted.rowcount

    def _upsert(self, conn: Any, names: list[str]) -> tuple[int, int]:
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        values = [n for n in names if n not in self.natural_key]
        only_open = sql.SQL("")
        if self.closed is not None:
            only_open = sql.SQL(" WHERE {}").format(open_window(self.closed, "EXCLUDED"))
        action = (
            sql.SQL("DO UPDATE SET {}{}").format(
                sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in values
                ),
                only_open,
            )
            if values
            else sql.SQL("DO NOTHING")
        )
        results = conn.execute(
            sql.SQL(
                "INSERT INTO {t} ({cols}) SELECT {cols} FROM flow_batch "
                "ON CONFLICT ({key}) {action} RETURNING (xmax = 0)"
            ).format(
                t=self._table,
                cols=cols,
                key=sql.SQL(", ").join(map(sql.Identifier, self.natural_key)),
                action=action,
            )
        ).fetchall()
        inserted = sum(1 for (new,) in results if new)
        return inserted, len(results) - inserted

    # -- read back -------------------------------------------------------------------

    @classmethod
    def location(cls, spec: PostgresTarget, store_place: str) -> str:  # type: ignore[override]
        return f"Postgres table {spec.describe()} in {store_place}"

    @classmethod
    def psql_schema(cls, spec: PostgresTarget) -> str | None:  # type: ignore[override]
        return spec.schema_name

    @classmethod
    def newest_rows(  # type: ignore[override]
        cls, spec: PostgresTarget, key: Sequence[str], store: LedgerStore | None, limit: int
    ) -> list[dict[str, Any]] | None:
        if store is None:
            return None
        ordering = sql.SQL(", ").join(
            sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(c)) for c in key
        )
        by = sql.SQL(" ORDER BY {}").format(ordering) if key else sql.SQL("")
        query = sql.SQL("SELECT * FROM {}{} LIMIT %s").format(
            sql.Identifier(spec.schema_name, spec.table), by
        )
        try:
            with store.connect() as conn:
                cur = conn.execute(query, (limit,))
                names = [d.name for d in cur.description or []]
                return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        except psycopg.errors.UndefinedTable:
            raise NoTargetYet(spec.describe()) from None

    @classmethod
    def crowded(  # type: ignore[override]
        cls, spec: PostgresTarget, store: LedgerStore, columns: Sequence[str], limit: int
    ) -> Crowded:
        """One aggregate in Postgres: no row of the target comes into Python."""
        with store.connect() as conn:
            row = conn.execute(
                sql.SQL(
                    "SELECT count(*), coalesce(sum(k - %s), 0), coalesce(max(k), 0) FROM "
                    "(SELECT count(*) AS k FROM {} GROUP BY {} HAVING count(*) > %s) d"
                ).format(
                    sql.Identifier(spec.schema_name, spec.table),
                    sql.SQL(", ").join(map(sql.Identifier, columns)),
                ),
                (limit, limit),
            ).fetchone()
        return Crowded(*(int(v) for v in row)) if row else Crowded(0, 0, 0)


def open_window(closed: ClosedWindows, alias: str) -> sql.Composable:
    """``closed``'s condition as a Postgres condition on ``alias`` (``t``, ``EXCLUDED``):
    the row's window may be written."""
    table = sql.SQL(alias)
    condition: sql.Composable = sql.SQL("{}.{} > {}").format(
        table, sql.Identifier(closed.end_column), sql.Literal(closed.until)
    )
    if closed.replay_from is not None and closed.start_column is not None:
        condition = sql.SQL("({} OR {}.{} >= {})").format(
            condition, table, sql.Identifier(closed.start_column), sql.Literal(closed.replay_from)
        )
    return condition
