"""``[[transform.dedup]]``: a source's duplicates taken out before the window or the join.

The source's view (late rows already out, its own watermark taken) goes through
``flow_jobs.operators.dedup``'s operator on ``transformWithState``, grouped by a hash
bucket of the keys; it releases each record once the watermark reaches it, marked when
it is a duplicate. The duplicates are counted per source (the observation
``flow_dedup_<source>``: the ledger, the run summary, ``flow_duplicates_total``), then
dropped or dead-lettered with their Kafka record (``on_duplicate``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    FloatType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from flow_jobs.errors import PlanError
from flow_jobs.io.dead_letters import DeadLetterTap
from flow_jobs.operators.dedup import (
    BUCKET,
    BUCKETS,
    DUPLICATE_OF,
    KEY,
    LANE,
    POSITION,
    RELEASED_TIME,
    TIME,
    DedupProcessor,
)
from flow_jobs.plan.diversions import divert, record_fields
from flow_jobs.plan.ordering import tie_break
from flow_jobs.spec.models import DedupSpec

#: Each deduplicated source's observation: ``duplicates``, its records dropped or
#: dead-lettered as duplicates in the batch (``flow_jobs.runtime.reports``).
OBSERVED_PREFIX = "flow_dedup_"


def deduplicate(
    view: DataFrame,
    dedup: DedupSpec,
    key: str,
    source: str,
    time: Column,
    topics: Sequence[str],
    tap: DeadLetterTap,
    watermarked: str | None = None,
) -> DataFrame:
    """``view`` without its duplicates, each record released once the watermark reaches
    its event time ``time``; ``key``: the spec key of ``dedup``, for errors.
    ``watermarked``: the view's own watermarked TIMESTAMP column (a join side's), which
    stays Spark's event time after the operator; without it the operator adds one."""
    for i, name in enumerate(dedup.keys):
        if name not in view.columns:
            raise PlanError(
                f"{key}.keys[{i}]",
                f"{name!r} is not a column of source {source!r} "
                f"(columns: {', '.join(c for c in view.columns if not c.startswith('__'))})",
            )
    columns = tuple(view.columns)
    lane, position = tie_break(view, topics)
    keys = [_grouped(F.col(k), view.schema[k].dataType) for k in dedup.keys]
    prepared = view.select(
        *(F.col(c) for c in columns),
        F.pmod(F.xxhash64(*keys), F.lit(BUCKETS)).alias(BUCKET),
        F.unix_millis(time).alias(TIME),
        lane.alias(LANE),
        position.alias(POSITION),
        F.struct(*keys).alias(KEY),
    )
    released_time = [] if watermarked else [StructField(RELEASED_TIME, TimestampType())]
    schema = StructType(
        [*view.schema.fields, StructField(DUPLICATE_OF, StringType()), *released_time]
    )
    released = prepared.groupBy(BUCKET).transformWithState(
        DedupProcessor(dedup.within_ms, columns, released_time=not watermarked),
        schema,
        "Append",
        "EventTime",
        eventTimeColumnName=watermarked or RELEASED_TIME,
    )
    duplicate = F.col(DUPLICATE_OF).isNotNull()
    released = released.observe(
        f"{OBSERVED_PREFIX}{source}", F.count_if(duplicate).alias("duplicates")
    )
    if dedup.on_duplicate == "dlq":
        released = divert(released, [(duplicate, F.col(DUPLICATE_OF))], tap, record_fields(view))
    else:
        released = released.where(~duplicate)
    return released.drop(DUPLICATE_OF, *([] if watermarked else [RELEASED_TIME]))


def _grouped(column: Column, data_type: object) -> Column:
    """A key as SQL ``GROUP BY`` compares it: -0.0 is 0.0 (Spark's hash tells them
    apart, its grouping does not; NaN hashes as one value)."""
    if isinstance(data_type, FloatType | DoubleType):
        return F.when(column == 0, F.lit(0).cast(data_type)).otherwise(column)
    return column
