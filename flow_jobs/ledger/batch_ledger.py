"""A micro-batch's ledger row (docs/guide/operating.md): built and written here, and only here.

The sink hands each batch to ``BatchLedger.write``, which writes the batch's rows to the
target and its ledger row, each at most once, in the way the target's sink allows
(``flow_jobs.sinks.base``: ``Sink.once_by``); the progress tracker adds Spark's figures
for the batch with ``BatchLedger.add_progress`` once Spark reports it done. The table
itself, its migrations and its readers live in ``flow_jobs.ledger.store``.

Batches are keyed by (pipeline, query id, batch id): Spark's query id is stored in the
checkpoint, so a checkpoint deleted by hand starts a new lineage of batch ids instead of
colliding with the old one; a replay finds its batch's row and skips the write. A
generation started with ``--from TIME`` keeps that time (``replay_from``): its fresh
checkpoint starts every source there.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import Jsonb

from flow_jobs.instants import epoch_ms, iso
from flow_jobs.io.batch import BatchEntry, BatchWriter, WriteResult
from flow_jobs.ledger.store import LedgerStore

#: What a batch whose ledger row exists writes: nothing.
ALREADY_WRITTEN = WriteResult(skipped=True, inserted=0, updated=0, version=None)


class BatchLedger:
    """The one writer of the ledger's batch rows, in ``store``'s schema."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store

    def write(self, target: BatchWriter, rows: pa.Table, entry: BatchEntry) -> WriteResult:
        """Write one batch's rows to ``target`` and its ledger row, at most once each.

        * ``"ledger"`` (Postgres): the rows and the ledger row commit in one
          transaction; a batch whose row exists is skipped.
        * ``"ledger-first"`` (Kafka): a batch whose row exists is skipped; otherwise the
          rows are written, then the row (a crash in between repeats the rows).
        * ``"target"`` (Delta): the target's own transaction id makes a replayed write a
          no-op; the row is written after it, unless a first attempt wrote it already.
        """
        if target.once_by == "ledger":
            with self.store.connect() as conn:
                if self._recorded(conn, entry):
                    return ALREADY_WRITTEN
                result = target.write(rows, entry, conn)
                self._insert(conn, entry, result)
            return result
        if target.once_by == "ledger-first":
            with self.store.connect() as conn:
                if self._recorded(conn, entry):
                    return ALREADY_WRITTEN
        result = target.write(rows, entry, None)
        with self.store.connect() as conn:
            self._insert(conn, entry, result)
        return result

    def _recorded(self, conn: psycopg.Connection, entry: BatchEntry) -> bool:
        """Whether this batch's ledger row exists; locks it until ``conn`` commits."""
        row = conn.execute(
            self.store.q(
                "SELECT 1 FROM {s}.batches WHERE pipeline = %s AND query_id = %s "
                "AND batch_id = %s FOR UPDATE"
            ),
            (entry.pipeline, entry.query_id, entry.batch_id),
        ).fetchone()
        return row is not None

    def _insert(self, conn: psycopg.Connection, entry: BatchEntry, result: WriteResult) -> None:
        """Insert the batch's ledger row in ``conn``'s transaction; a replay keeps the
        first row (the one that describes the write)."""
        row = {
            "pipeline": entry.pipeline,
            "query_id": entry.query_id,
            "batch_id": entry.batch_id,
            "state_version": entry.state_version,
            "start_offsets": Jsonb(entry.start_offsets),
            "end_offsets": Jsonb(entry.end_offsets),
            "global_watermark": entry.global_watermark,
            "output_rows": entry.output_rows,
            "dead_lettered_rows": entry.dead_lettered_rows,
            "target_kind": entry.target_kind,
            "target": entry.target,
            "target_version": result.version,
            "replayed": result.skipped,
            "started_at": entry.started_at,
            "compute_ms": entry.compute_ms,
            "write_ms": entry.write_ms,
        }
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} ({cols}) VALUES ({vals}) "
                "ON CONFLICT (pipeline, query_id, batch_id) DO NOTHING"
            ).format(
                t=sql.Identifier(self.store.schema, "batches"),
                cols=sql.SQL(", ").join(map(sql.Identifier, row)),
                vals=sql.SQL(", ").join(sql.Placeholder() * len(row)),
            ),
            list(row.values()),
        )

    def add_progress(
        self,
        pipeline: str,
        query_id: str,
        batch_id: int,
        *,
        input_rows: int,
        late_rows: dict[str, int],
        batch_ms: float | None,
        duplicates: dict[str, int] | None = None,
        write_ms: float | None,
        max_event_times: dict[str, int | None],
        lateness_ms: dict[str, int],
    ) -> None:
        """Add what Spark reports once a batch is done (input rows, late rows and
        duplicates per source, per-source event times) to its row. Per-source watermark =
        the source's highest event time so far minus its lateness: carried from the
        previous batch of the same query."""
        with self.store.connect() as conn:
            previous = conn.execute(
                self.store.q(
                    "SELECT source_watermarks FROM {s}.batches WHERE pipeline = %s AND "
                    "query_id = %s AND batch_id < %s AND source_watermarks IS NOT NULL "
                    "ORDER BY batch_id DESC LIMIT 1"
                ),
                (pipeline, query_id, batch_id),
            ).fetchone()
            marks: dict[str, str | None] = dict(previous[0]) if previous else {}
            for source, latest in max_event_times.items():
                before = marks.get(source)
                mark = source_watermark_ms(
                    None if before is None else _epoch_ms(before),
                    latest,
                    lateness_ms.get(source, 0),
                )
                marks[source] = None if mark is None else iso(mark, timespec="milliseconds")
            conn.execute(
                self.store.q(
                    "UPDATE {s}.batches SET input_rows = %s, late_rows = %s, "
                    "source_late_rows = %s, source_duplicates = %s, batch_ms = %s, write_ms = %s, "
                    "max_event_times = %s, "
                    "source_watermarks = %s WHERE pipeline = %s AND query_id = %s AND batch_id = %s"
                ),
                (
                    input_rows,
                    sum(late_rows.values()),
                    Jsonb(late_rows),
                    Jsonb(duplicates) if duplicates else None,
                    batch_ms,
                    write_ms,
                    Jsonb(
                        {
                            k: v if v is None else iso(v, timespec="milliseconds")
                            for k, v in max_event_times.items()
                        }
                    ),
                    Jsonb(marks),
                    pipeline,
                    query_id,
                    batch_id,
                ),
            )


def source_watermark_ms(
    previous_ms: int | None, max_event_time_ms: int | None, lateness_ms: int
) -> int | None:
    """A source's watermark after a batch (epoch ms), the one rule the ledger and the
    metrics share: its highest event time so far minus its lateness; it never moves
    back, and a batch without an event time of the source leaves it where it was."""
    candidate = None if max_event_time_ms is None else int(max_event_time_ms) - lateness_ms
    return max((m for m in (previous_ms, candidate) if m is not None), default=None)


def _epoch_ms(iso: str) -> int:
    return epoch_ms(datetime.fromisoformat(iso.replace("Z", "+00:00")))
