"""The Postgres ledger: every pipeline's durable record (docs/guide/operating.md), in
the schema the spec's ``[state_store]`` names; not Spark's state store, which keeps
operator state in the checkpoint. It holds what the checkpoint does not: one row per
micro-batch (``flow_jobs.ledger.batch_ledger``), the spec fingerprint each checkpoint
generation (``state_version``, bumped by ``flow-jobs reset``) was started under, and a
dead-letter table. It makes target writes exactly-once and is what Dagster and
``flow-jobs state show`` read. A local checkpoint's own marker is checked with the
fingerprint (``flow_jobs.io.checkpoint_claim``). One run per pipeline:
``flow_jobs.ledger.run_lock``; migrations: ``flow_jobs.ledger.schema``; where the
database is: ``flow_jobs.ledger.location``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from flow_jobs.io.checkpoint_claim import check_claim, claim_checkpoint, spec_changed
from flow_jobs.io.waits import DEFAULT_RETRY_FOR_MS, state_store_away, wait_out
from flow_jobs.ledger import pool
from flow_jobs.ledger.location import state_store_schema, state_store_url
from flow_jobs.ledger.pool import retried_read
from flow_jobs.ledger.run_lock import RunLock, hold, lock_key
from flow_jobs.ledger.schema import DEFAULT_SCHEMA, MIGRATIONS, SCHEMA_NAME
from flow_jobs.spec.fingerprint import earlier_fingerprint, fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import PipelineSpec

log = logging.getLogger(__name__)

T = TypeVar("T")


def refuse_incompatible(spec: PipelineSpec, spec_path: str | None = None) -> None:
    """``LedgerStore.check_resumable`` on the spec's state store, opened for it: what a run
    (the CLI's, the facade's, Dagster's) asks before it starts Spark."""
    store = LedgerStore.for_spec(spec)
    try:
        store.check_resumable(spec, spec_path)
    finally:
        store.close()


@dataclass(frozen=True)
class PipelineState:
    name: str
    state_version: int
    fingerprint: str
    #: set by ``flow-jobs reset --from``: this generation's fresh checkpoint starts
    #: every source at this time, and replays the windows from it (``ClosedWindows``)
    replay_from: datetime | None = None


class LedgerStore:
    """The ledger in one Postgres schema. Each call takes a connection of the URL's pool
    (``flow_jobs.ledger.pool``) for one transaction, so Spark's batch thread and the
    runner's progress thread never share one; ``close()`` releases the pool."""

    def __init__(
        self, url: str, schema: str = DEFAULT_SCHEMA, retry_for_ms: int = DEFAULT_RETRY_FOR_MS
    ) -> None:
        if not SCHEMA_NAME.match(schema):
            raise ValueError(f"state_store.schema = {schema!r} must match [a-z_][a-z0-9_]*")
        self._url = url
        self.retry_for_ms = retry_for_ms
        self.schema = schema
        self._s = sql.Identifier(schema)
        self._pool: ConnectionPool | None = None  # opened by the first connect()

    @classmethod
    def for_spec(cls, spec: PipelineSpec) -> LedgerStore:
        retry_for = spec.runtime.retry_for_ms
        store = cls(state_store_url(spec), state_store_schema(spec), retry_for)
        store.migrate()
        return store

    @property
    def url(self) -> str:
        """The database's URL, password and all: for a client, never for a log."""
        return self._url

    def __repr__(self) -> str:  # never the URL: it may hold a password
        return f"LedgerStore(schema={self.schema!r})"

    @contextmanager
    def connect(self) -> Iterator[psycopg.Connection]:
        """A connection for one transaction: committed when the block ends, rolled back
        if it raises."""
        if self._pool is None:
            self._pool = pool.acquire(self._url, self)
        with self._pool.connection() as conn:
            yield conn

    def retrying(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, tried again while the state store is away, up to
        ``retry_for_ms`` (``flow_jobs.io.waits``); ``call`` must be idempotent."""
        return wait_out(what, call, self.retry_for_ms, state_store_away)

    def close(self) -> None:
        """Release the URL's pool (closed once no other store of this process uses it);
        a later ``connect()`` opens it again."""
        if self._pool is not None:
            self._pool = None
            pool.release(self._url, self)

    def q(self, text: str) -> sql.Composed:
        """SQL with ``{s}`` standing for this store's schema."""
        return sql.SQL(text).format(s=self._s)

    # -- schema -------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply every migration not yet applied; return the schema version."""
        with self.connect() as conn:
            lock = f"flow-jobs:{self.schema}"
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
            conn.execute(self.q("CREATE SCHEMA IF NOT EXISTS {s}"))
            conn.execute(
                self.q(
                    "CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
                    "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
            )
            done = {r[0] for r in conn.execute(self.q("SELECT version FROM {s}.schema_migrations"))}
            for version, statements in MIGRATIONS:
                if version in done:
                    continue
                conn.execute(self.q(statements))
                conn.execute(
                    self.q("INSERT INTO {s}.schema_migrations (version) VALUES (%s)"), (version,)
                )
                log.debug("state store %s: applied migration %s", self.schema, version)
        return MIGRATIONS[-1][0]

    # -- pipelines and fingerprints --------------------------------------------------

    def open_pipeline(self, spec: PipelineSpec, spec_path: str | None = None) -> PipelineState:
        """Register the pipeline, or check that its checkpoint may resume under ``spec``:
        the ledger's fingerprint for this name, then the checkpoint's own marker.
        ``spec_path``: the spec file as the user gave it, for the reset a refusal names.

        A fingerprint an earlier flow-jobs stored without the order fields
        (``flow_jobs.spec.fingerprint.ORDER_KEYS``) that equals this spec's without them
        is accepted, and this spec's is stored in the ledger and the marker in its place:
        later changes are judged with the order."""
        fields = fingerprint_fields(spec)
        fingerprint = fingerprint_of(fields)
        earlier = earlier_fingerprint(fields)
        location = spec.checkpoint_location()
        with self.connect() as conn:
            row = conn.execute(
                self.q(
                    "SELECT state_version, fingerprint, fingerprint_fields, replay_from "
                    "FROM {s}.pipelines WHERE name = %s FOR UPDATE"
                ),
                (spec.name,),
            ).fetchone()
            if row is None:
                conn.execute(
                    self.q(
                        "INSERT INTO {s}.pipelines (name, fingerprint, fingerprint_fields) "
                        "VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING"
                    ),
                    (spec.name, fingerprint, Jsonb(fields)),
                )
                # A refusal rolls the registration back with it.
                claim_checkpoint(location, spec.name, fingerprint, earlier, spec_path)
                return PipelineState(spec.name, 0, fingerprint)
            state_version, stored, stored_fields, replay_from = row
            upgraded = stored is not None and stored != fingerprint and stored == earlier
            if stored is None or upgraded:
                # After a reset this generation takes the current spec; after an upgrade
                # the fingerprint with the order fields replaces the one without.
                conn.execute(
                    self.q(
                        "UPDATE {s}.pipelines SET fingerprint = %s, fingerprint_fields = %s, "
                        "updated_at = now() WHERE name = %s"
                    ),
                    (fingerprint, Jsonb(fields), spec.name),
                )
            if upgraded:
                log.warning(
                    "pipeline %s: its checkpoint was registered by an earlier flow-jobs, "
                    "under fingerprint %s, which left out the order of aggregations; the "
                    "spec's order is taken as the checkpoint's (a reorder made since "
                    "cannot be told) and fingerprint %s is stored, so a later reorder is "
                    "refused",
                    spec.name,
                    stored,
                    fingerprint,
                )
            elif stored is not None and stored != fingerprint:
                raise spec_changed(spec, state_version, stored, stored_fields, fields, spec_path)
            claim_checkpoint(location, spec.name, fingerprint, earlier, spec_path)
            return PipelineState(spec.name, int(state_version), fingerprint, replay_from)

    def check_resumable(self, spec: PipelineSpec, spec_path: str | None = None) -> None:
        """What ``open_pipeline`` refuses (``IncompatibleSpec``), read only: a ledger
        fingerprint the spec's differs from, a local checkpoint marked by another
        pipeline or fingerprint. A run asks this before it starts Spark, so a refused
        spec change costs opening the store, not a JVM's start; ``open_pipeline`` judges
        again as it registers the run (a change made in between)."""
        fields = fingerprint_fields(spec)
        fingerprint = fingerprint_of(fields)
        earlier = earlier_fingerprint(fields)
        with self.connect() as conn:
            row = conn.execute(
                self.q(
                    "SELECT state_version, fingerprint, fingerprint_fields "
                    "FROM {s}.pipelines WHERE name = %s"
                ),
                (spec.name,),
            ).fetchone()
        if row is not None:
            state_version, stored, stored_fields = row
            if stored is not None and stored not in (fingerprint, earlier):
                raise spec_changed(spec, state_version, stored, stored_fields, fields, spec_path)
        check_claim(spec.checkpoint_location(), spec.name, fingerprint, earlier, spec_path)

    def record_natural_key(self, name: str, key: Sequence[str]) -> None:
        with self.connect() as conn:
            conn.execute(
                self.q("UPDATE {s}.pipelines SET natural_key = %s WHERE name = %s"),
                (Jsonb(list(key)), name),
            )

    @retried_read("listing the pipelines")
    def pipeline_names(self) -> list[str]:
        """Every pipeline the store has registered (a run's start registers it)."""
        with self.connect() as conn:
            return [
                r[0] for r in conn.execute(self.q("SELECT name FROM {s}.pipelines ORDER BY name"))
            ]

    @retried_read("reading a natural key")
    def natural_key(self, name: str) -> list[str] | None:
        with self.connect() as conn:
            row = conn.execute(
                self.q("SELECT natural_key FROM {s}.pipelines WHERE name = %s"), (name,)
            ).fetchone()
        return list(row[0]) if row and row[0] else None

    def reset(
        self,
        name: str,
        retire: Callable[[int], object] | None = None,
        replay_from: datetime | None = None,
    ) -> int:
        """Start a new checkpoint generation: bump the state version and forget the
        fingerprint, calling ``retire(old_version)`` (which moves the old checkpoint
        aside: ``flow_jobs.runtime.checkpoint.retire_checkpoint``) while the pipeline's
        row is locked. With ``replay_from`` (aware), the generation's fresh checkpoint
        starts every source at that time instead of its ``starting_offsets``. Returns
        the new version."""
        with self.connect() as conn:
            row = conn.execute(
                self.q("SELECT state_version FROM {s}.pipelines WHERE name = %s FOR UPDATE"),
                (name,),
            ).fetchone()
            if row is None:
                raise KeyError(f"pipeline {name} is not in the state store ({self.schema})")
            old = int(row[0])
            if retire is not None:
                retire(old)
            conn.execute(
                self.q(
                    "UPDATE {s}.pipelines SET state_version = %s, fingerprint = NULL, "
                    "fingerprint_fields = NULL, replay_from = %s, updated_at = now() "
                    "WHERE name = %s"
                ),
                (old + 1, replay_from, name),
            )
        return old + 1

    # -- one run per pipeline --------------------------------------------------------

    def lock_key(self, name: str) -> int:
        """The pipeline's advisory lock key (``flow_jobs.ledger.run_lock``)."""
        return lock_key(self.schema, name)

    def run_lock(self, name: str, command: str = "run") -> AbstractContextManager[RunLock]:
        """Hold pipeline ``name``'s lock until the block ends, or raise ``PipelineBusy``
        (``flow_jobs.ledger.run_lock.hold``)."""
        return hold(self, name, command)

    # -- the ledger (its rows are written by batch_ledger.BatchLedger) --------------

    @retried_read("reading earlier lineages")
    def earlier_lineages_watermark(self, pipeline: str, query_id: str) -> datetime | None:
        """The highest watermark any other checkpoint lineage (an earlier checkpoint of
        this pipeline: before a reset, or lost) ran under: its windows ending at or
        before it were complete when that lineage wrote them."""
        with self.connect() as conn:
            row = conn.execute(
                self.q(
                    "SELECT max(global_watermark) FROM {s}.batches "
                    "WHERE pipeline = %s AND query_id <> %s"
                ),
                (pipeline, query_id),
            ).fetchone()
        return row[0] if row else None

    @retried_read("reading recent batches")
    def recent_batches(self, pipeline: str, limit: int = 20) -> list[dict[str, Any]]:
        with self.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            rows = cur.execute(
                self.q(
                    "SELECT *, now() - global_watermark AS watermark_lag FROM {s}.batches "
                    "WHERE pipeline = %s ORDER BY committed_at DESC, batch_id DESC LIMIT %s"
                ),
                (pipeline, limit),
            ).fetchall()
        return list(reversed(rows))

    @retried_read("reading the last offsets")
    def last_end_offsets(self, pipeline: str) -> dict[str, Any] | None:
        """The end offsets of the pipeline's most recent batch (any lineage)."""
        with self.connect() as conn:
            row = conn.execute(
                self.q(
                    "SELECT end_offsets FROM {s}.batches WHERE pipeline = %s AND "
                    "end_offsets IS NOT NULL ORDER BY committed_at DESC, batch_id DESC LIMIT 1"
                ),
                (pipeline,),
            ).fetchone()
        return row[0] if row else None

    @retried_read("reading batch totals")
    def totals(self, pipeline: str, batches: int) -> dict[str, Any]:
        """Sums over the pipeline's most recent ``batches`` batches, and the newest one."""
        with self.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            row = cur.execute(
                self.q(
                    """SELECT count(*) AS batches, sum(input_rows) AS input_rows,
                        sum(late_rows) AS late_rows, max(committed_at) AS last_commit,
                        now() AS now
                    FROM (SELECT * FROM {s}.batches WHERE pipeline = %s
                          ORDER BY committed_at DESC, batch_id DESC LIMIT %s) recent"""
                ),
                (pipeline, batches),
            ).fetchone()
        return dict(row or {})

    @retried_read("reading batch ids")
    def batch_ids(self, pipeline: str) -> dict[str, list[int]]:
        """Every recorded batch id, by query id (each a checkpoint lineage)."""
        out: dict[str, list[int]] = {}
        with self.connect() as conn:
            for query_id, batch_id in conn.execute(
                self.q(
                    "SELECT query_id, batch_id FROM {s}.batches WHERE pipeline = %s "
                    "ORDER BY query_id, batch_id"
                ),
                (pipeline,),
            ):
                out.setdefault(query_id, []).append(int(batch_id))
        return out

    # -- dead letters ----------------------------------------------------------------

    def insert_dead_letters(self, rows: Sequence[dict[str, Any]]) -> int:
        """Dead letters into the store's table; a row already there (same Kafka
        position) is kept. Returns how many were new."""
        if not rows:
            return 0
        columns = [
            "pipeline", "source", "reason", "topic", "partition", "offset",
            "key", "value", "kafka_timestamp", "batch_id", "dead_lettered_at",
            "header_keys", "header_values",
        ]  # fmt: skip
        statement = sql.SQL(
            "INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT DO NOTHING"
        ).format(
            t=sql.Identifier(self.schema, "dead_letters"),
            cols=sql.SQL(", ").join(map(sql.Identifier, columns)),
            vals=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        )
        inserted = 0
        with self.connect() as conn, conn.cursor() as cur:
            for row in rows:
                headers = row.get("headers")
                row = {
                    **row,
                    "header_keys": None if headers is None else [h["key"] for h in headers],
                    "header_values": None if headers is None else [h["value"] for h in headers],
                }
                cur.execute(statement, [row[c] for c in columns])
                inserted += cur.rowcount
        return inserted
