"""What the sink, the ledger and a target's sink pass each other about one micro-batch:
its ledger row as the sink fills it in (``BatchEntry``, written by
``flow_jobs.ledger.batch_ledger.BatchLedger``), what a sink's write did (``WriteResult``), and the
rows a write must leave alone or delete besides its own (``ClosedWindows``,
``Supersede``), which every target kind honours in its own dialect."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc


@dataclass
class BatchEntry:
    """One ledger row, filled in by the sink as the batch is written."""

    pipeline: str
    query_id: str
    batch_id: int
    state_version: int
    started_at: datetime
    start_offsets: dict[str, Any] | None = None
    end_offsets: dict[str, Any] | None = None
    global_watermark: datetime | None = None
    output_rows: int = 0
    dead_lettered_rows: int = 0
    target_kind: str = ""
    target: str = ""
    compute_ms: float | None = None
    write_ms: float | None = None


@dataclass(frozen=True)
class WriteResult:
    skipped: bool  # the batch was already written (a replay)
    inserted: int
    updated: int
    #: the batch's target commit (``flow_jobs.sinks.describe_commit``), kept in the
    #: ledger's ``target_version``: a Delta table version, a Postgres transaction id...
    version: str | None
    superseded: int = 0  # rows an overlapping session row replaced (Supersede)


@dataclass(frozen=True)
class StagedFiles:
    """A batch's rows as data files the executors wrote, to commit (``Sink.inserts``):
    what the driver holds of them, one dict per file (its name, size, rows, statistics)."""

    files: tuple[dict[str, Any], ...]

    @property
    def num_rows(self) -> int:
        return sum(int(f["rows"]) for f in self.files)


class BatchWriter(Protocol):
    """What the ledger asks of a target's sink (``flow_jobs.sinks.base.Sink``): how it
    writes a batch at most once, and the write."""

    once_by: Literal["ledger", "ledger-first", "target"]

    def write(self, rows: pa.Table | StagedFiles, entry: BatchEntry, conn: Any) -> WriteResult: ...


@dataclass(frozen=True)
class Supersede:
    """Session windows emitted "current": a row replaces its group's rows whose
    [start, end) overlaps its own, earlier versions of the same session (it grew, its
    start moved, or two sessions merged). A group's sessions never overlap each other,
    so nothing else is deleted."""

    group: tuple[str, ...]
    start: str
    end: str


@dataclass(frozen=True)
class ClosedWindows:
    """The windows an earlier checkpoint lineage wrote complete, which a new lineage
    inserts if absent and never updates (it may have seen only part of their rows):
    those ending at or before ``until``, the highest watermark an earlier lineage ran
    under. A replay generation (``flow-jobs reset --from T``) re-reads every record
    stamped at or after T, so it rewrites the windows starting at or after T
    (``replay_from``) too: a matched row is updated when its window ends after
    ``until`` or starts at or after T. A window starting before T keeps its row.

    Each sink says this condition in its own dialect (a Delta predicate, a Postgres
    one); ``arrow_open`` says it over a batch's rows."""

    end_column: str
    until: datetime
    start_column: str | None = None
    replay_from: datetime | None = None

    def arrow_open(self, rows: pa.Table) -> pa.Array:
        """A mask over a batch's rows: true where the row's window may be written."""
        end = rows.column(self.end_column)
        mask = pc.greater(end, pa.scalar(self.until, end.type))
        if self.replay_from is not None and self.start_column is not None:
            start = rows.column(self.start_column)
            mask = pc.or_(mask, pc.greater_equal(start, pa.scalar(self.replay_from, start.type)))
        return mask


#: A batch's rows may hold this column (a change feed: ``[transform.mirror]``): a row
#: with TRUE there takes its natural key's row out of the target instead of writing
#: itself. It never reaches a target: ``Sink.deletes_flagged`` says a pipeline has it.
DELETE = "__flow_delete"


def split_deletes(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """A batch's rows written (upserted), and those deleting their key's row, both
    without ``DELETE``."""
    flag = pc.fill_null(rows.column(DELETE), False)
    plain = rows.drop_columns([DELETE])
    return plain.filter(pc.invert(flag)), plain.filter(flag)


def row_key(row: dict[str, Any], columns: Iterable[str]) -> tuple[Any, ...]:
    """A row's values of ``columns`` as one comparable key: NULL equals NULL, as in the
    targets' NULL-safe keys, and NaN equals NaN (``float('nan') != float('nan')``)."""
    return tuple(
        ("NaN",) if isinstance(row[c], float) and row[c] != row[c] else row[c] for c in columns
    )
