"""Late rows, row by row: which rows are behind the watermark, before any window sees them.

Spark's window operators drop a micro-batch's late rows themselves, by the watermark
the *previous* batch ran under (Spark 4's late-event watermark; the current batch's one
only evicts state), but per window: a row whose window ended at or before it (pinned in
``tests/test_spark_contracts.py``). Any such row is late by the row rule below, which is
stricter (a row behind the watermark whose window is still open is late too), so a row
below the current watermark still counts when its window closes in that same batch, and
Spark's filter finds nothing left to drop. They do it after
partial aggregation, though, so ``numRowsDroppedByWatermark`` counts partial aggregates,
not rows (one late row in three hopping windows counts 3; five late rows of one group and
window, 1), and the rows themselves are gone. The source view applies the same rule
first, row by row, in the scan's stage:

    late  ⇔  event time ≤ W(N−1)

where W(N−1) is the watermark of the batch before (``batchWatermarkMs`` of Spark's offset
log, which the Kafka reader stamps on every row as ``_late_watermark``; none in a
query's first batch). Spark's operator then finds nothing more to drop. Late rows are
counted per source (``observe``: ``late_rows`` in the source's observed metrics) and
dropped (``late_data = "drop"``) or dead-lettered with their bytes (``"dlq"``). Where the
stamp is NULL (a checkpoint the reader cannot read) no row is late here, and Spark's own
count is what remains.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from flow_jobs.kafka.schema import LATE_WATERMARK
from flow_jobs.plan.event_time import ISO_MILLIS

LATE = "__flow_late"


def late_condition(event_time: Column) -> Column:
    """True for a late row (never NULL: without a stamp, False)."""
    return F.coalesce(event_time <= F.col(LATE_WATERMARK), F.lit(False))


def late_reason(event_time: Column, name: str) -> Column:
    """The dead-letter reason of a late row: its event time, the watermark, the gap."""
    watermark = F.col(LATE_WATERMARK)
    behind = F.unix_millis(watermark) - F.unix_millis(event_time)
    return F.concat(
        F.lit(f"late: event time {name} = "),
        F.date_format(event_time, ISO_MILLIS),
        F.lit(" is "),
        behind.cast("string"),
        F.lit(" ms behind the watermark "),
        F.date_format(watermark, ISO_MILLIS),
    )
