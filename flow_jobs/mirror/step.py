"""``[transform.mirror]``'s batch step (``flow_jobs.runtime.batch_steps``): a batch's
changes cut to the last one of each key, so that the target's one write of the batch
(an upsert and a delete per key at most) leaves each row as the last change left it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from flow_jobs.ledger.store import LedgerStore
from flow_jobs.mirror.compile import ORDER
from flow_jobs.plan_lines import PlanLine
from flow_jobs.runtime.batch_steps import StepRun
from flow_jobs.spec.models import PipelineSpec


@dataclass(frozen=True)
class MirrorStep:
    key: tuple[str, ...]

    @staticmethod
    def plan(spec: PipelineSpec) -> MirrorStep | None:
        mirror = spec.transform.mirror
        return None if mirror is None else MirrorStep(tuple(mirror.key))

    @property
    def deletes_within(self) -> tuple[str, ...] | None:
        return None

    def describe(self) -> list[PlanLine]:
        return [
            PlanLine(
                "the last change of each key",
                f"a batch's changes sorted with Arrow by ({', '.join(self.key)}) and their "
                "order (the database's time, then the Kafka position); the last of each key "
                "kept",
            )
        ]

    def start(self, store: LedgerStore, state_version: int) -> StepRun:
        return self.run

    def run(self, rows: pa.Table, closed_before: datetime | None) -> pa.Table:
        return last_changes(rows, self.key)


def last_changes(rows: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """Each key's last change in ``rows`` (by ``ORDER``), without the order's columns. A
    NULL database time sorts first: such a change is placed by its Kafka position."""
    if rows.num_rows == 0:
        return rows.drop_columns(list(ORDER))
    order = [(c, "ascending", "at_start") for c in (*key, *ORDER)]
    ranked = rows.take(pc.sort_indices(rows, sort_keys=order))
    if rows.num_rows == 1:
        return ranked.drop_columns(list(ORDER))
    # the last row of each run of equal keys (NULL equal to NULL, as the targets' keys)
    current = ranked.select(list(key)).slice(0, ranked.num_rows - 1)
    following = ranked.select(list(key)).slice(1)
    same = None
    for name in key:
        a, b = current.column(name), following.column(name)
        equal = pc.or_kleene(
            pc.and_kleene(pc.is_null(a), pc.is_null(b)), pc.fill_null(pc.equal(a, b), False)
        )
        same = equal if same is None else pc.and_(same, equal)
    assert same is not None
    last = pc.invert(same)
    if isinstance(last, pa.ChunkedArray):
        last = last.combine_chunks()
    keep = pa.concat_arrays([last, pa.array([True])])  # the last row ends its run
    return ranked.filter(keep).drop_columns(list(ORDER))
