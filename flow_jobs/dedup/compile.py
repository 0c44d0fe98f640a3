"""``[[transform.dedup]]``: a source's duplicates taken out before the window or the join;
the built-in ``dedup`` operator (``flow_jobs.operators.registry``; registered by
``flow_jobs.dedup.plugin``).

The source's view (late rows already out, its own watermark taken) goes through
``flow_jobs.dedup.processor``'s operator on ``transformWithState``, grouped by a hash
bucket of the keys; it releases each record once the watermark reaches it, marked when
it is a duplicate. The duplicates are counted per source (the observation
``flow_dedup_<source>``: the ledger, the run summary, ``flow_duplicates_total``), then
dropped or dead-lettered with their Kafka record (``on_duplicate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from flow_jobs.dead_letters import DeadLetterTap, divert, record_fields
from flow_jobs.dedup.processor import (
    BUCKET,
    BUCKETS,
    DUPLICATE_OF,
    KEY,
    LANE,
    POSITION,
    RELEASED_TIME,
    ROW,
    TIME,
    DedupProcessor,
)
from flow_jobs.dedup.spec import DedupSpec
from flow_jobs.errors import PlanError
from flow_jobs.operators.registry import OperatorInput
from flow_jobs.plan.carried_rows import JSON_OPTIONS, grouped, key_json
from flow_jobs.plan.deferred import deferred
from flow_jobs.plan.frame_columns import require_column
from flow_jobs.plan.ordering import tie_break
from flow_jobs.plan_lines import PlanLine
from flow_jobs.runtime.reports import DUPLICATES_PREFIX


@dataclass(frozen=True)
class CompiledDedup:
    """A source's view without its duplicates (``frame``), and what decides them."""

    frame: DataFrame
    dedup: DedupSpec
    source: str

    def describe(self) -> list[PlanLine]:
        d = self.dedup
        fate = "dead-lettered with their bytes" if d.on_duplicate == "dlq" else "dropped"
        return [
            PlanLine(
                f"dedup {self.source} on ({', '.join(d.keys)}) within {d.within_ms} ms",
                f"transformWithStateInPandas (event-time timers) over {BUCKETS} hash buckets "
                "of the keys, one state value and one timer per bucket, each row carried as "
                "one JSON string: a record is held until the watermark reaches it, then, in "
                "(event time, Kafka position) order, the first of its keys passes and a later "
                f"one within {d.within_ms} ms of the last that passed is a duplicate, "
                f"counted, then {fate}",
            )
        ]


def deduplicate(
    view: DataFrame,
    dedup: DedupSpec,
    key: str,
    source: str,
    time: Column,
    topics: Sequence[str],
    tap: DeadLetterTap,
    watermarked: str | None = None,
) -> CompiledDedup:
    """``view`` without its duplicates (``.frame``), each record released once the watermark reaches
    its event time ``time``; ``key``: the spec key of ``dedup``, for errors.
    ``watermarked``: the view's own watermarked TIMESTAMP column (a join side's), which
    stays Spark's event time after the operator; without it the operator adds one."""
    for i, name in enumerate(dedup.keys):
        require_column(view, f"{key}.keys[{i}]", name, f"source {source!r}")
    lane, position = tie_break(view, topics)
    keys = [grouped(F.col(k), view.schema[k].dataType) for k in dedup.keys]
    # Each row as one JSON string through the operator (flow_jobs.dedup.processor); the
    # watermarked time of a join side comes back as the operator's event-time column.
    carried = [c for c in view.columns if c != watermarked]
    prepared = view.select(
        F.pmod(F.xxhash64(*keys), F.lit(BUCKETS)).alias(BUCKET),
        F.unix_micros(time).alias(TIME),
        lane.alias(LANE),
        position.alias(POSITION),
        key_json(view, dedup.keys).alias(KEY),
        F.to_json(F.struct(*(F.col(c) for c in carried)), JSON_OPTIONS).alias(ROW),
    )
    out_time = watermarked or RELEASED_TIME
    schema = StructType(
        [
            StructField(ROW, StringType()),
            StructField(DUPLICATE_OF, StringType()),
            StructField(out_time, TimestampType()),
        ]
    )
    released = prepared.groupBy(BUCKET).transformWithStateInPandas(
        deferred(DedupProcessor(dedup.within_ms, out_time)),
        schema,
        "Append",
        "EventTime",
        eventTimeColumnName=out_time,
    )
    row_schema = StructType([view.schema[c] for c in carried])
    released = released.select(
        F.from_json(F.col(ROW), row_schema, JSON_OPTIONS).alias(ROW), DUPLICATE_OF, out_time
    ).select(
        *(F.col(f"{ROW}.{c}").alias(c) if c != watermarked else F.col(c) for c in view.columns),
        DUPLICATE_OF,
        *([] if watermarked else [RELEASED_TIME]),
    )
    duplicate = F.col(DUPLICATE_OF).isNotNull()
    released = released.observe(
        f"{DUPLICATES_PREFIX}{source}", F.count_if(duplicate).alias("duplicates")
    )
    if dedup.on_duplicate == "dlq":
        released = divert(released, [(duplicate, F.col(DUPLICATE_OF))], tap, record_fields(view))
    else:
        released = released.where(~duplicate)
    frame = released.drop(DUPLICATE_OF, *([] if watermarked else [RELEASED_TIME]))
    return CompiledDedup(frame, dedup, source)


def compile_dedup(dedup: DedupSpec, given: OperatorInput) -> CompiledDedup:
    """The ``dedup`` operator: ``deduplicate`` on the source's own watermark."""
    if given.time is None:
        raise PlanError(
            given.key,
            f"deduplication orders {given.source!r}'s records by their event time, which "
            f"must be a column of every source ({given.time_column!r} is computed in "
            "[transform].sql)",
        )
    tap = given.tap("duplicates")
    return deduplicate(
        given.view,
        dedup,
        given.key,
        given.source,
        given.time,
        given.topics,
        tap,
        given.watermarked,
    )
