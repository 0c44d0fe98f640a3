"""How a native window's aggregates merge the Kafka reader's partial aggregates
(``flow_jobs.plan.combine`` decides when a window pre-aggregates): each aggregate takes
a partial's part, or the row as a partial of one, so rows and partials aggregate alike.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from flow_jobs.io.combine import CombinePlan

#: The partial struct in a source view (hidden from ``[transform].sql``-visible columns).
PARTIAL_VIEW = "__flow_partial"


class Merge:
    """How a native window aggregates rows and partials alike: each column a partial's
    part, or what the row is as a partial of one."""

    def __init__(self, plan: CombinePlan) -> None:
        self.plan = plan
        self.partial = F.col(PARTIAL_VIEW)

    def _part(self, name: str, column: str | None) -> Column:
        slot = "" if column is None else str(self.plan.slot(column))
        return self.partial.getField(f"{name}{slot}")

    def _either(self, part: Column, row: Column) -> Column:
        return F.when(self.partial.isNull(), row).otherwise(part)

    def count(self, value: Column | None, column: str | None) -> Column:
        if value is None:
            return F.sum(F.coalesce(self._part("n", None), F.lit(1).cast("bigint")))
        return F.sum(self._either(self._part("nn", column), _present(value)))

    def sum(self, value: Column, column: str) -> Column:
        return F.try_sum(self._either(self._part("sum", column), value))

    def avg(self, value: Column, column: str) -> Column:
        total = F.try_sum(self._either(self._part("dsum", column), value.cast("double")))
        count = F.sum(self._either(self._part("nn", column), _present(value)))
        return F.try_divide(total, count)

    def extreme(self, name: str, value: Column, column: str) -> Column:
        pick = F.min if name == "min" else F.max
        return pick(self._either(self._part(name, column), value))

    def positional(self, name: str, row: Column, lane: Column, column: str) -> Column:
        """``row``: the row's ``struct(t, lane, pos, v)`` (NULL for a NULL value)."""
        part = self._part(name, column)
        folded = F.when(
            part.isNotNull(),
            F.struct(
                part.getField("t").alias("t"),
                lane.alias("lane"),
                part.getField("pos").alias("pos"),
                part.getField("v").alias("v"),
            ),
        )
        pick = F.min if name == "first" else F.max
        return pick(self._either(folded, row)).getField("v")


def _present(value: Column) -> Column:
    """A row as a partial of one: 1 non-NULL value, or 0 (BIGINT, as ``nn``)."""
    return F.when(value.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("bigint")
