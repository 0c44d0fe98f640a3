"""What the sink, the ledger and a target pass each other about one micro-batch: its
ledger row as the sink fills it in (``BatchEntry``, written by
``flow_jobs.io.ledger.BatchLedger``) and what a target's write did (``WriteResult``)."""

from __future__ import annotations

import json
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
    #: the batch's target commit (``describe_commit``), kept in the ledger's
    #: ``target_version``: a Delta table version, a Postgres transaction id, Kafka offsets
    version: str | None
    superseded: int = 0  # rows an overlapping session row replaced (Supersede)


#: What a target commit is, per target kind: the Delta table version the batch left
#: (the one its MERGE committed, or the table's as it stood when it merged nothing),
#: the id of the Postgres transaction that wrote its rows with its ledger row, the
#: offset of its last message in each partition of a Kafka topic (none when it
#: produced nothing).
COMMIT_NAMES = {"delta": "Delta version", "postgres": "Postgres transaction",
                "kafka": "Kafka offsets"}  # fmt: skip


def describe_commit(kind: str, commit: str | None) -> str:
    """A target commit as every output says it: "Delta version 7", "Postgres transaction
    758", "Kafka offsets 0=41,1=40"; "-" for none."""
    if commit is None:
        return "-"
    if kind == "kafka":
        try:
            offsets = json.loads(commit)
            commit = ",".join(f"{p}={o}" for p, o in sorted(offsets.items(), key=_partition))
        except (ValueError, AttributeError):  # not the JSON a Kafka target records
            pass
    return f"{COMMIT_NAMES.get(kind, kind)} {commit}"


def _partition(item: tuple[str, Any]) -> int:
    return int(item[0]) if str(item[0]).isdigit() else -1
