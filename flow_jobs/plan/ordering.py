"""The total order of a group's events, the same in both engines and under any cut.

Rows of equal event time are ordered by their Kafka position: the topic (by name,
among the pipeline's topics), then the partition, then the offset. A micro-batch cut,
a restart or a shuffle changes none of these, so first / last / collect / reduce and
count windows give the same result however the input was cut (ordering by arrival
across micro-batches would not: a row of partition 1 read in an earlier micro-batch
than a row of partition 0 would come first in one run and second in another).

Without a Kafka position (``[transform].sql`` that dropped ``_kafka``, a join's
output) the tie-break is a 64-bit hash of the row's visible columns: still a total
order of distinct rows; equal rows are interchangeable.

Both engines read the two columns built here: the native one sorts
``struct(event_time, lane, position, value)``, the state-API one sorts its buffered
events by ``(time, lane, position)`` (``flow_jobs.kernels.frame``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.spec.models import KAFKA_COLUMN

#: A lane is the topic's rank * 2^31 + the partition (a partition number is an INT).
LANE_STRIDE = 1 << 31


def tie_break(frame: DataFrame, topics: Sequence[str]) -> tuple[Column, Column]:
    """(lane, position) BIGINT columns of ``frame``'s rows; ``topics``: the pipeline's
    source topics (their sorted order ranks them)."""
    if KAFKA_COLUMN in frame.columns:
        kafka = F.col(KAFKA_COLUMN)
        names = sorted(set(topics))
        rank = (
            F.array_position(F.array(*(F.lit(t) for t in names)), kafka.getField("topic"))
            if len(names) > 1
            else F.lit(0).cast("bigint")
        )
        lane = rank * F.lit(LANE_STRIDE) + kafka.getField("partition").cast("bigint")
        return lane.cast("bigint"), kafka.getField("offset").cast("bigint")
    visible = [F.col(c) for c in frame.columns if not c.startswith("__flow")]
    return F.lit(0).cast("bigint"), F.xxhash64(*visible)
