"""The Iceberg target's merge: a batch applied to the rows of the region it touches,
in Arrow rows on the driver (pyiceberg has no MERGE with conditions)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flow_jobs.io.batch import Supersede, row_key


@dataclass(frozen=True)
class Merged:
    """The region's rows after a batch, and what the batch did to them."""

    rows: list[dict[str, Any]]
    inserted: int
    updated: int
    deleted: int


def merge_region(
    held: list[dict[str, Any]],
    batch: list[dict[str, Any]],
    key: Sequence[str],
    supersede: Supersede | None,
    ranked: Sequence[str] | None,
    held_open: Sequence[bool | None] | None = None,
    batch_open: Sequence[bool | None] | None = None,
    deletes: Sequence[dict[str, Any]] = (),
) -> Merged:
    """The region's rows (``held``) after the batch's, as Delta's MERGE and the
    Postgres upsert leave them: a matched row updated, a new one inserted; the rows a
    session row supersedes and those that left a top N of ``ranked`` partitions
    deleted. ``held_open``/``batch_open``: per row, whether its window may be written
    (``ClosedWindows.arrow_open``: an earlier lineage's closed windows stay as they
    are); None: every window may. ``deletes``: the keys of held rows a change feed's
    deletes take out."""

    def writable(mask: Sequence[bool | None] | None, i: int) -> bool:
        return mask is None or bool(mask[i])

    index = {row_key(r, key): i for i, r in enumerate(held)}
    kept = list(held)
    gone: set[int] = set()
    inserted = updated = 0
    for j, row in enumerate(batch):
        at = index.get(row_key(row, key))
        if at is None:
            kept.append(row)
            inserted += 1
        elif writable(batch_open, j):
            kept[at] = row
            updated += 1
    if supersede is not None:
        s = supersede
        groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for row in batch:
            groups.setdefault(row_key(row, s.group), []).append(row)
        for i, row in enumerate(held):
            if i in gone or not writable(held_open, i):
                continue
            for new in groups.get(row_key(row, s.group), ()):
                same = row[s.start] == new[s.start] and row[s.end] == new[s.end]
                if not same and row[s.start] < new[s.end] and row[s.end] > new[s.start]:
                    gone.add(i)
                    break
    if ranked is not None:
        touched = {row_key(r, ranked) for r in batch}
        keys = {row_key(r, key) for r in batch}
        for i, row in enumerate(held):
            if (
                i not in gone
                and row_key(row, ranked) in touched
                and row_key(row, key) not in keys
                and writable(held_open, i)
            ):
                gone.add(i)
    deleted = {row_key(r, key) for r in deletes}
    for i, row in enumerate(held):
        if row_key(row, key) in deleted:
            gone.add(i)
    rows = [r for i, r in enumerate(kept) if i not in gone]
    return Merged(rows, inserted, updated, len(gone))
