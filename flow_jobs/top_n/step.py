"""``[transform.window.top_n]`` as a batch step (``flow_jobs.runtime.batch_steps``): each
batch's rows ranked (``emit = "final"``), or the standings updated and every partition
the batch touches ranked from them (``emit = "current"``)."""

from __future__ import annotations

from dataclasses import dataclass

from flow_jobs.ledger.store import LedgerStore
from flow_jobs.plan_lines import PlanLine
from flow_jobs.runtime.batch_steps import StepRun
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.top_n.ranking import Ranking, rank
from flow_jobs.top_n.standings import Standings


@dataclass(frozen=True)
class TopNStep:
    pipeline: str
    ranking: Ranking
    current: bool  # emit = "current": the standings, and the target's deletes

    @staticmethod
    def plan(spec: PipelineSpec) -> TopNStep | None:
        if not spec.has_window or spec.window.top_n is None:
            return None
        return TopNStep(spec.name, Ranking.of(spec.window), spec.window.emit == "current")

    @property
    def deletes_within(self) -> tuple[str, ...] | None:
        return self.ranking.partition_columns if self.current else None

    def describe(self) -> list[PlanLine]:
        r = self.ranking
        within = ", ".join(r.partition_columns)
        order = ", ".join(f"{c} {d}" for c, d in r.order)
        how = (
            f"a batch's rows ranked with Arrow within ({within}) by {order}, then the "
            f"group keys (NULL last, NaN above every number); the first {r.n} written"
            + (f", and every row tied with the {r.n}th on the order" if r.with_ties else "")
        )
        if self.current:
            how += (
                "; every group's current row of each open window kept in the state "
                "store (window_standings), each touched partition ranked from it"
            )
        return [PlanLine(f"top_n = {r.n}", how)]

    def start(self, store: LedgerStore, state_version: int) -> StepRun:
        if not self.current:  # the batch holds every window it closes whole
            return lambda rows, closed_before: rank(rows, self.ranking)
        # the whole top N of each partition the batch touches
        return Standings(store, self.pipeline, state_version, self.ranking).update
