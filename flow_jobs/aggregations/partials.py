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
    """How a native window aggregates rows and partials alike: each aggregator (its
    ``merged``, ``flow_jobs.aggregations``) reads a partial's part, or what the row is as
    a partial of one."""

    def __init__(self, plan: CombinePlan) -> None:
        self.plan = plan
        self.partial = F.col(PARTIAL_VIEW)

    def part(self, name: str, column: str | None) -> Column:
        """The partial's part ``name`` of ``column`` (None: the partial's row count)."""
        slot = "" if column is None else str(self.plan.slot(column))
        return self.partial.getField(f"{name}{slot}")

    def either(self, part: Column, row: Column) -> Column:
        """``part`` on a partial, ``row`` on a row."""
        return F.when(self.partial.isNull(), row).otherwise(part)


def present(value: Column) -> Column:
    """A row as a partial of one: 1 non-NULL value, or 0 (BIGINT, as ``nn``)."""
    return F.when(value.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("bigint")
