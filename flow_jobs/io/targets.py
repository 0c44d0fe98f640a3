"""Targets: where a micro-batch's rows land, each exactly once with its ledger row
(``flow_jobs.io.ledger.BatchLedger`` writes the row, as ``BatchTarget.once_by`` says).

* Delta: MERGE on the natural key with Delta's application transaction (app id = the
  query, version = the batch id), then the ledger row. A replay after a crash finds the
  transaction in the table and skips the MERGE; the ledger row is then written if the
  crash came before it.
* Postgres: upsert on the natural key and the ledger row in one Postgres transaction;
  a batch whose ledger row exists is skipped. Output and ledger commit together.
* Kafka: append-only. A batch whose ledger row exists is skipped; a crash after the
  produce and before the ledger commit repeats the batch's rows (warned at start-up).

Session windows emitted "current" (``Supersede``): a row also replaces its group's rows
whose bounds it overlaps, in the same Delta commit or Postgres transaction. Kafka cannot
delete, so that combination is refused in the spec.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql
from psycopg.types.json import Jsonb

from flow_jobs.errors import PlanError
from flow_jobs.io.batch import BatchEntry, WriteResult
from flow_jobs.io.delta import DeltaMergeTable, Supersede, TargetSchemaError
from flow_jobs.io.formats.framing import python_rows
from flow_jobs.io.json_rows import to_json
from flow_jobs.io.state_store import StateStore
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import DeltaTarget, KafkaTarget, PostgresTarget, Target

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClosedWindows:
    """The windows an earlier checkpoint lineage wrote complete, which a new lineage
    inserts if absent and never updates (it may have seen only part of their rows):
    those ending at or before ``until``, the highest watermark an earlier lineage ran
    under. A replay generation (``flow-jobs reset --from T``) re-reads every record
    stamped at or after T, so it rewrites the windows starting at or after T
    (``replay_from``) too: a matched row is updated when its window ends after
    ``until`` or starts at or after T. A window starting before T keeps its row."""

    end_column: str
    until: datetime
    start_column: str | None = None
    replay_from: datetime | None = None

    def delta_open(self, alias: str) -> str:
        """A Delta SQL predicate on a row (``alias``): its window may be written."""
        condition = f"{alias}.`{self.end_column}` > '{_iso(self.until)}'"
        if self.replay_from is not None and self.start_column is not None:
            replayed = f"{alias}.`{self.start_column}` >= '{_iso(self.replay_from)}'"
            condition = f"({condition} OR {replayed})"
        return condition

    def postgres_open(self, alias: str) -> sql.Composable:
        """The same, as a Postgres condition on ``alias`` (``t``, ``EXCLUDED``)."""
        table = sql.SQL(alias)
        condition: sql.Composable = sql.SQL("{}.{} > {}").format(
            table, sql.Identifier(self.end_column), sql.Literal(self.until)
        )
        if self.replay_from is not None and self.start_column is not None:
            condition = sql.SQL("({} OR {}.{} >= {})").format(
                condition, table, sql.Identifier(self.start_column), sql.Literal(self.replay_from)
            )
        return condition

    def arrow_open(self, rows: pa.Table) -> pa.Array:
        """The same, as a mask over a batch's rows."""
        end = rows.column(self.end_column)
        mask = pc.greater(end, pa.scalar(self.until, end.type))
        if self.replay_from is not None and self.start_column is not None:
            start = rows.column(self.start_column)
            mask = pc.or_(mask, pc.greater_equal(start, pa.scalar(self.replay_from, start.type)))
        return mask


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat()


#: How ``BatchLedger.write`` writes a batch at most once, by ``BatchTarget.once_by``.
ONCE = {
    "target": "then the batch's ledger row in the state store",
    "ledger": "in one transaction with the batch's ledger row; a batch whose ledger row "
    "exists is skipped",
    "ledger-first": "a batch whose ledger row exists is skipped, and its ledger row is "
    "written after the flush: a crash between the two repeats the batch's rows (at least "
    "once; consumers dedupe on the key)",
}


class BatchTarget(ABC):
    kind: str
    #: How a batch is written at most once (``BatchLedger.write``): "ledger", in its
    #: ledger row's transaction; "ledger-first", only while it has no ledger row;
    #: "target", by the target's own transaction id.
    once_by: ClassVar[Literal["ledger", "ledger-first", "target"]]
    #: How it writes, in a few words (the CLI's one line, Dagster's description).
    WRITES: ClassVar[str]

    @classmethod
    def summary(cls, spec: Target) -> str:
        """The target in one phrase, without building it: how and where it writes."""
        return f"{cls.WRITES} into {spec.describe()}"

    def __init__(self, description: str) -> None:
        self.description = description
        #: windows an earlier checkpoint lineage wrote complete: inserted if absent,
        #: never updated (a fresh lineage may have seen only part of their rows)
        self.closed: ClosedWindows | None = None
        #: session windows emitted "current": what a row supersedes
        self.supersede: Supersede | None = None
        #: top_n emitted "current": a batch holds the whole top N of each partition it
        #: touches, and the target's other rows of those partitions are deleted
        self.ranked: tuple[str, ...] | None = None  # the partition columns

    def protect_closed_windows(self, closed: ClosedWindows) -> None:
        self.closed = closed

    @abstractmethod
    def ensure(self) -> None:
        """Create the target if missing; refuse one whose columns differ."""

    @abstractmethod
    def write(
        self, rows: pa.Table, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        """Write one batch's rows (never its ledger row); ``conn`` is the ledger row's
        transaction when ``once_by`` is "ledger", else None."""

    def version(self) -> str | None:
        return None

    def close(self) -> None:  # noqa: B027 - optional hook; most targets hold no client
        """Release clients at the end of a run."""

    @abstractmethod
    def writing(self) -> str:
        """How a batch's rows are written (``describe`` adds the deletes and the once)."""

    def describe(self) -> list[PlanLine]:
        deletes = []
        if self.supersede is not None:
            deletes.append(
                f"the rows each row supersedes (its group's overlapping {self.supersede.start}"
                f" to {self.supersede.end}) deleted in the same write"
            )
        if self.ranked is not None:
            deletes.append(
                f"the rows of each ({', '.join(self.ranked)}) it touches that left the top "
                "deleted in the same write"
            )
        how = "; ".join([self.writing(), *deletes, ONCE[self.once_by]])
        return [PlanLine(f"target {self.kind}", how)]


class DeltaBatchTarget(BatchTarget):
    kind = "delta"
    once_by = "target"
    WRITES = "Delta MERGE (deltalake)"

    def __init__(self, spec: DeltaTarget, table: DeltaMergeTable) -> None:
        super().__init__(spec.path)
        self.table = table

    def ensure(self) -> None:
        self.table.ensure()

    def version(self) -> str | None:
        return str(self.table.open().version())

    def writing(self) -> str:
        t = self.table
        return (
            f"deltalake MERGE into {t.path} on ({', '.join(t.natural_key)}), a matched row "
            "updated, a new one inserted, in one Delta commit carrying the application "
            "transaction (app id flow-jobs/<pipeline>/<query id>, version = batch id): a "
            "replayed batch finds its version there and is skipped"
        )

    def write(
        self, rows: pa.Table, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        app_id = f"flow-jobs/{entry.pipeline}/{entry.query_id}"
        if rows.num_rows:
            update_if = delete_if = None
            if self.closed is not None:
                update_if = self.closed.delta_open("s")
                delete_if = self.closed.delta_open("t")
            merged = self.table.merge(
                rows,
                txn=(app_id, entry.batch_id),
                update_if=update_if,
                supersede=self.supersede,
                delete_if=delete_if,
                deletes=self._left_the_top(rows) if self.ranked is not None else None,
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
        partitions = {_row_key(r, self.ranked) for r in rows.select(self.ranked).to_pylist()}
        kept = {_row_key(r, self.table.natural_key) for r in rows.to_pylist()}
        gone = [
            i
            for i, r in enumerate(held.to_pylist())
            if _row_key(r, self.ranked) in partitions
            and _row_key(r, self.table.natural_key) not in kept
        ]
        return held.take(pa.array(gone, pa.int64()))


def _not_distinct(column: str) -> sql.Composable:
    """``t.column`` equals ``s.column``, NULL equal to NULL (a NULL key is one key)."""
    return sql.SQL("t.{0} IS NOT DISTINCT FROM s.{0}").format(sql.Identifier(column))


def _row_key(row: dict[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    """A row's values of ``columns``, comparable (NaN equals NaN)."""
    return tuple(
        ("NaN",) if isinstance(row[c], float) and row[c] != row[c] else row[c] for c in columns
    )


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


class PostgresBatchTarget(BatchTarget):
    """Upsert into a table of the state store's database (so output and ledger share a
    transaction). Created with the natural key as primary key; a key that can hold NULL
    (outer-join sides, nullable group_by columns) gets ``UNIQUE NULLS NOT DISTINCT``
    instead (PostgreSQL ≥ 15), so a NULL key is one key, as in the Delta MERGE."""

    kind = "postgres"
    once_by = "ledger"
    WRITES = "Postgres upsert"

    def __init__(
        self,
        spec: PostgresTarget,
        schema: pa.Schema,
        natural_key: Sequence[str],
        nullable_key: Sequence[str],
        ledger: StateStore | None,
    ) -> None:
        """``ledger``: the state store, whose database holds the table (None: built only
        to be described, by ``validate --plan``)."""
        super().__init__(spec.describe())
        self.spec = spec
        self.schema = schema
        self.natural_key = list(natural_key)
        self.nullable = bool(set(nullable_key) & set(natural_key))
        self.ledger = ledger
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
        assert self.ledger is not None, "a target built to be described is never written"
        columns = [sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(postgres_type(f.type)))
                   for f in self.schema]  # fmt: skip
        key = sql.SQL(", ").join(map(sql.Identifier, self.natural_key))
        unique = "UNIQUE NULLS NOT DISTINCT ({})" if self.nullable else "PRIMARY KEY ({})"
        constraint = sql.SQL(unique).format(key)
        with self.ledger.connect() as conn:
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
        if rows.num_rows:
            self._stage(conn, rows.select(names))
            if self.supersede is not None:
                superseded = self._delete_superseded(conn, self.supersede)
            if self.ranked is not None:
                superseded = self._delete_left_the_top(conn, self.ranked)
            inserted, updated = self._upsert(conn, names)
        xid = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        return WriteResult(False, inserted, updated, xid[0] if xid else None, superseded)

    def _stage(self, conn: Any, rows: pa.Table) -> None:
        """The batch's rows in a temporary table (``flow_batch``) of the transaction."""
        names = rows.column_names
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE flow_batch ON COMMIT DROP AS SELECT {} FROM {} WITH NO DATA"
            ).format(cols, self._table)
        )
        with conn.cursor().copy(sql.SQL("COPY flow_batch ({}) FROM STDIN").format(cols)) as copy:
            for row in rows.to_pylist():
                copy.write_row(
                    [Jsonb(row[n]) if n in self._json_columns else row[n] for n in names]
                )

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
            conditions.append(self.closed.postgres_open("t"))
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
            conditions.append(self.closed.postgres_open("t"))
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
            only_open = sql.SQL(" WHERE {}").format(self.closed.postgres_open("EXCLUDED"))
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


class KafkaBatchTarget(BatchTarget):
    """Rows produced to a topic, keyed by the natural key (as a JSON array): JSON
    objects, or Confluent-framed records of a registry format (``flow_jobs.io.formats``)
    whose schema, derived from the rows' (``schema``), is registered when the run starts."""

    kind = "kafka"
    once_by = "ledger-first"
    WRITES = "Kafka produce"

    def __init__(
        self,
        spec: KafkaTarget,
        natural_key: Sequence[str],
        schema: pa.Schema | None = None,
        pipeline: str = "",
    ) -> None:
        super().__init__(spec.topic)
        self.spec = spec
        self.natural_key = list(natural_key)
        self._producer: Any = None
        self._schema = schema
        self._pipeline = pipeline
        self._encode: Callable[[dict[str, Any]], bytes] = to_json

    def _registry_encoder(self) -> Callable[[dict[str, Any]], bytes]:
        """Registers the rows' schema under the target's subject (or finds it there) and
        returns the format's serializer of one row."""
        from confluent_kafka.serialization import MessageField, SerializationContext

        from flow_jobs.io.formats import PayloadSchemaError, format_module
        from flow_jobs.io.formats.framing import record_name
        from flow_jobs.io.registry import RegistryUnreachable, client_for, register

        spec, fmt = self.spec, self.spec.format
        assert spec.schema_registry is not None and self._schema is not None
        config = spec.schema_registry.client_config()
        module = format_module(fmt)
        try:
            text = module.target_schema(self._schema, record_name(self._pipeline))
            register(config, spec.value_subject, text, fmt)
        except PayloadSchemaError as e:
            raise PlanError(
                "target.format", f"the window rows have no {module.TITLE} schema: {e}"
            ) from None
        except RegistryUnreachable as e:
            key = "schema_registry.url" if "cannot reach" in str(e) else "subject"
            raise PlanError(f"target.{key}", f"{spec.value_subject}: {e}") from None
        serialize = module.target_serializer(client_for(config), text, spec.value_subject)
        context = SerializationContext(spec.topic, MessageField.VALUE)
        return lambda row: serialize(row, context)

    def writing(self) -> str:
        from flow_jobs.io.formats import format_module

        spec = self.spec
        body = (
            "a JSON object"
            if spec.format == "json"
            else f"a {format_module(spec.format).TITLE} record, Confluent-framed, its schema "
            f"registered under {spec.value_subject} when the run starts"
        )
        return (
            f"confluent-kafka producer to topic {spec.topic} (enable.idempotence: its own "
            f"retries add no duplicates), each row {body} keyed by its natural key "
            f"({', '.join(self.natural_key)}) as a JSON array, flushed before the batch ends"
        )

    def ensure(self) -> None:
        from confluent_kafka import Producer

        from flow_jobs.kafka.logs import librdkafka_logger

        if self.spec.format != "json":
            self._encode = self._registry_encoder()
        config = {
            "bootstrap.servers": self.spec.bootstrap_servers,
            "enable.idempotence": True,  # no duplicates from the producer's own retries
            **{k: v.get_secret_value() for k, v in self.spec.client_config.items()},
            "logger": librdkafka_logger(),  # flow_jobs.kafka.logs
        }
        self._producer = Producer(config)
        log.warning(
            "target kafka %s is append-only: a crash after a batch is produced and before "
            "its ledger row commits repeats that batch's rows; consumers should dedupe "
            "on the message key (the natural key)",
            self.spec.topic,
        )

    def write(
        self, rows: pa.Table, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        errors: list[str] = []
        last: dict[int, int] = {}

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

        producer = self._producer
        if self.closed is not None:  # an append-only topic cannot insert "if absent"
            rows = rows.filter(self.closed.arrow_open(rows))
        listed = rows.to_pylist() if self.spec.format == "json" else python_rows(rows)
        for row in listed:
            key = to_json([row[c] for c in self.natural_key])
            value = self._encode(row)
            while True:
                try:
                    producer.produce(self.spec.topic, value=value, key=key,
                                     on_delivery=delivered)  # fmt: skip
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
        remaining = producer.flush(60)
        if errors or remaining:
            raise RuntimeError(
                f"kafka target {self.spec.topic}: batch {entry.batch_id} not fully delivered "
                f"({len(errors)} errors, {remaining} pending): {errors[:3]}"
            )
        offsets = json.dumps(last, sort_keys=True) if last else None
        return WriteResult(False, rows.num_rows, 0, offsets)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None


#: The writer of each ``[target] kind``.
TARGETS: dict[str, type[BatchTarget]] = {
    t.kind: t for t in (DeltaBatchTarget, PostgresBatchTarget, KafkaBatchTarget)
}
