"""The Iceberg target's merge: a batch applied to the rows of the region it touches,
in Arrow rows on the driver (pyiceberg has no MERGE with conditions)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flow_jobs.io.batch import ClosedWindows, Supersede


@dataclass(frozen=True)
class Merged:
    """The region's rows after a batch, and what the batch did to them."""

    rows: list[dict[str, Any]]
    inserted: int
    updated: int
    deleted: int


def _open(row: dict[str, Any], closed: ClosedWindows) -> bool:
    """``ClosedWindows``' condition on one row: its window may be written."""
    end = row[closed.end_column]
    if end is not None and end > closed.until:
        return True
    if closed.replay_from is not None and closed.start_column is not None:
        start = row[closed.start_column]
        return start is not None and start >= closed.replay_from
    return False


def _row_key(row: dict[str, Any], columns: Iterable[str]) -> tuple[Any, ...]:
    """A row's values of ``columns``, comparable (NaN equals NaN; NULL equals NULL)."""
    return tuple(
        ("NaN",) if isinstance(row[c], float) and math.isnan(row[c]) else row[c] for c in columns
    )


def merge_region(
    held: list[dict[str, Any]],
    batch: list[dict[str, Any]],
    key: Sequence[str],
    closed: ClosedWindows | None,
    supersede: Supersede | None,
    ranked: Sequence[str] | None,
) -> Merged:
    """The region's rows (``held``) after the batch's, as Delta's MERGE and the
    Postgres upsert leave them: a matched row updated, a new one inserted, an earlier
    lineage's closed windows (``closed``) left as they are; the rows a session row
    supersedes and those that left a top N of ``ranked`` partitions deleted."""

    def writable(row: dict[str, Any]) -> bool:  # its window may be written
        return closed is None or _open(row, closed)

    index = {_row_key(r, key): i for i, r in enumerate(held)}
    kept = list(held)
    gone: set[int] = set()
    inserted = updated = 0
    for row in batch:
        at = index.get(_row_key(row, key))
        if at is None:
            kept.append(row)
            inserted += 1
        elif writable(row):
            kept[at] = row
            updated += 1
    if supersede is not None:
        s = supersede
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in batch:
            groups.setdefault(_row_key(row, s.group), []).append(row)
        for i, row in enumerate(held):
            if i in gone or not writable(row):
                continue
            for new in groups.get(_row_key(row, s.group), ()):
                same = row[s.start] == new[s.start] and row[s.end] == new[s.end]
                if not same and row[s.start] < new[s.end] and row[s.end] > new[s.start]:
                    gone.add(i)
                    break
    if ranked is not None:
        touched = {_row_key(r, ranked) for r in batch}
        keys = {_row_key(r, key) for r in batch}
        for i, row in enumerate(held):
            if (
                i not in gone
                and _row_key(row, ranked) in touched
                and _row_key(row, key) not in keys
                and writable(row)
            ):
                gone.add(i)
    rows = [r for i, r in enumerate(kept) if i not in gone]
    return Merged(rows, inserted, updated, len(gone))
