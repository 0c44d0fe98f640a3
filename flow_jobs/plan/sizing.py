"""State sizing: an upper bound, warned about at start-up above 1 GB.

The rules: docs/spec-reference.md, "Memory caps".

    state ≈ active windows × max_groups_per_window × state per group

Per-group state is what each aggregator keeps between micro-batches, as it says
(``Aggregator.state_bytes``: a distinct-count sketch 2^precision bytes, an exact
distinct set up to its cap, ...). Aggregators whose state grows with the window's rows
(``Aggregator.state_grows_with_rows``: collect, reduce on native windows; and every
aggregator of sliding and count windows, which keep the window's events) are sized by
``rows_per_window``, which we cannot know: the estimate then says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from flow_jobs.aggregations import AGGREGATORS
from flow_jobs.spec.models import WindowSpec

GB = 1 << 30
_ROW_BYTES = 48  # a buffered value with its time and bookkeeping, as saved


@dataclass(frozen=True)
class StateEstimate:
    active_windows: int
    groups: int
    bytes_per_group: int
    per_row: bool  # per-group state grows with the rows of a window

    @property
    def total(self) -> int:
        return self.active_windows * self.groups * self.bytes_per_group

    def describe(self) -> str:
        rows = " per buffered row" if self.per_row else ""
        return (
            f"{self.active_windows} active windows x {self.groups:,} groups x "
            f"{self.bytes_per_group:,} bytes{rows} = {self.total / GB:,.1f} GB"
        )


def estimate_state(window: WindowSpec) -> StateEstimate:
    active = window.active_windows()  # each family's bound (flow_jobs.windows)
    units = [(AGGREGATORS[a.agg], a) for a in window.aggregations]  # each says its own
    per_row = window.engine == "state" or any(u.state_grows_with_rows for u, _ in units)
    per_group = sum(u.state_bytes(a) for u, a in units)
    if window.engine == "state":
        per_group = _ROW_BYTES * (1 + len(window.aggregations))
    return StateEstimate(active, window.max_groups_per_window, per_group, per_row)
