"""How a native window's aggregates merge the Kafka reader's partial aggregates
(``flow_jobs.combine.decide`` decides when a window pre-aggregates): each aggregate merges
the parts it declares (``Aggregator.partial_parts``), each part a partial's field, or the
row as a partial of one, so rows and partials aggregate alike
(``flow_jobs.partial_parts.PartialPart``: ``of_partial``, ``of_row``,
``merge``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from flow_jobs.partial_parts import Order, PartialPart

if TYPE_CHECKING:
    from flow_jobs.kafka.combine import CombinePlan

#: The partial struct in a source view (hidden from ``[transform].sql``-visible columns).
PARTIAL_VIEW = "__flow_partial"


class Merge:
    """How a native window aggregates rows and partials alike: each aggregator (its
    native compile, ``flow_jobs.aggregations``) merges its parts (``merged``)."""

    def __init__(self, plan: CombinePlan) -> None:
        self.plan = plan
        self.partial = F.col(PARTIAL_VIEW)

    def field(self, part: PartialPart, column: str) -> Column:
        """The partial's ``part`` of ``column`` (NULL on a row)."""
        return self.partial.getField(f"{part.name}{self.plan.slot(column)}")

    def rows(self) -> Column:
        """The partial's row count (NULL on a row)."""
        return self.partial.getField("n")

    def merged(self, part: PartialPart, column: str, value: Column, order: Order) -> Column:
        """The Spark aggregate of ``part`` of ``column`` over partials and rows alike
        (``value``: the row's value of ``column``)."""
        on_partial = part.of_partial(self.field(part, column), order)
        on_row = part.of_row(value, order)
        return part.merge(F.when(self.partial.isNull(), on_row).otherwise(on_partial))
