"""What the sink, the ledger and a target pass each other about one micro-batch: its
ledger row as the sink fills it in (``BatchEntry``, written by
``flow_jobs.io.ledger.BatchLedger``) and what a target's write did (``WriteResult``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


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
    version: str | None  # Delta table version, Postgres transaction id, Kafka offsets
    superseded: int = 0  # rows an overlapping session row replaced (Supersede)
