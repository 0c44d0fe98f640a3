"""``[transform.window.top_n]``: the top N rows of each window, ranked on the driver.

The rule (docs/spec-reference.md, "Top N"): within each window (its start and end) and
``partition_by`` values, rows are ranked by ``order_by`` in its directions, then by the
group keys ascending, so no two rows tie; NULL ranks after every value in either
direction and NaN above every number (Arrow's sort with nulls at the end). The first
``n`` are written, and with ``with_ties`` every later row whose ``order_by`` values
equal the n-th's (SQL's ``RANK() <= n``).

``emit = "final"``: a window of these kinds closes for every group in the same
micro-batch (its end is the same for all), so the batch holds the whole window and is
ranked as it is (``rank``).

``emit = "current"``: a batch holds only the groups it changed. The ledger keeps
every group's current row of each open window (``flow_jobs.top_n.standings``, a table
beside the batch rows, per checkpoint generation, each row a ``StandingRow`` in the format of
``flow_jobs.state_codec``); each batch's rows update it, and every partition
they touch is ranked again from it. The batch then writes that partition's whole top N,
and the target deletes, in the same Delta commit or Postgres transaction, the rows of
those partitions that left it (``flow_jobs.sinks.base``: a sink's ``ranked``). A window's rows
leave the standings one batch after the watermark passed its end (no row can change
them then, nor a replay of the batch that closed it).

Written here rather than in Spark: Spark's streaming queries take no window function
(``row_number``) over a stream, and an update-mode batch never holds a window's other
groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from flow_jobs.spec.windows import TopNSpec, WindowSpec
from flow_jobs.state_codec import Fields


@dataclass(frozen=True)
class Ranking:
    """What ranks a window's rows: from the spec's window."""

    n: int
    start: str
    end: str
    partition: tuple[str, ...]  # partition_by
    order: tuple[tuple[str, str], ...]  # (column, "ascending" | "descending")
    groups: tuple[str, ...]  # group_by: the last tie-break
    with_ties: bool = False  # rows tied with the n-th on the order are kept too

    @staticmethod
    def of(window: WindowSpec) -> Ranking:
        top: TopNSpec | None = window.top_n
        assert top is not None
        return Ranking(
            top.n,
            window.window_start_column,
            window.window_end_column,
            tuple(top.partition_by),
            tuple(top.ordering()),
            tuple(window.group_by),
            top.with_ties,
        )

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The columns a rank is counted within: the window's bounds and partition_by."""
        return (self.start, self.end, *self.partition)


def comparable_value(value: Any) -> Any:
    """A value as ``rank`` compares partitions: NaN equal to NaN."""
    return ("NaN",) if isinstance(value, float) and math.isnan(value) else value


def rank(rows: pa.Table, ranking: Ranking) -> pa.Table:
    """The first ``n`` rows of each partition of ``rows``, in rank order."""
    if rows.num_rows == 0:
        return rows
    keys = [(c, "ascending") for c in ranking.partition_columns]
    sortable = rows
    for i, (column, direction) in enumerate(ranking.order):
        if pa.types.is_floating(rows.schema.field(column).type):
            # Arrow puts NaN with the NULLs; the rule has it above every number: sort on
            # "is NaN" first (NULL stays NULL, so last), in the same direction.
            flag = f"__flow_nan_{i}"
            sortable = sortable.append_column(flag, pc.is_nan(rows.column(column)))
            keys.append((flag, direction))
        keys.append((column, direction))
    keys += [(c, "ascending") for c in ranking.groups]
    # NULL after every value, in either direction
    order = pc.sort_indices(sortable, sort_keys=[(c, d, "at_end") for c, d in keys])
    ranked = rows.take(order)
    partitions = zip(
        *(ranked.column(c).to_pylist() for c in ranking.partition_columns), strict=True
    )
    ordered = zip(*(ranked.column(c).to_pylist() for c, _ in ranking.order), strict=True)
    keep, previous, seen, last = [], None, 0, None
    for i, (partition, values) in enumerate(zip(partitions, ordered, strict=True)):
        current = tuple(comparable_value(v) for v in partition)
        seen = seen + 1 if current == previous else 1
        previous = current
        place = tuple(comparable_value(v) for v in values)
        if seen <= ranking.n:
            keep.append(i)
            last = place  # the n-th row's order values, once seen reaches n
        elif ranking.with_ties and place == last:
            keep.append(i)
    return ranked.take(pa.array(keep, pa.int64()))


@dataclass(frozen=True)
class StandingRow:
    """A group's current row of an open window, as ``window_standings`` keeps it: its
    fields are the window's output columns."""

    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "top_n.row"

    record: dict[str, Any]
    #: the output's Arrow schema, to write the row (a row read back does not need it)
    schema: pa.Schema | None = None

    def to_fields(self) -> dict[str, pa.Array]:
        assert self.schema is not None, "a standing row is written with its schema"
        return {f.name: pa.array([self.record[f.name]], f.type) for f in self.schema}

    @classmethod
    def from_fields(cls, fields: Fields) -> StandingRow:
        return cls(fields.record())
