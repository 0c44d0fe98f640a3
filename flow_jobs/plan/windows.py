"""Window operators: each kind a small named unit with the Spark operator it compiles to.

Tumbling and hopping windows are Spark's native ``window()`` grouping with a watermark:
a JVM hash aggregation whose partial aggregates are shuffled and kept in the state store,
emitted in append mode once the watermark passes a window's end. ``window()`` aligns to
the epoch and a row belongs to every window [start, end) that contains it (seed 000's
hopping formula, ``[event_ts − duration + hop, event_ts]``, would miss the window that
starts exactly ``duration − hop`` before the row when ``hop`` does not divide the time
since epoch; Spark's is right).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.plan.aggregations import compile_aggregation
from flow_jobs.plan.errors import PlanError
from flow_jobs.plan.event_time import event_time_of
from flow_jobs.spec.models import WindowSpec

EVENT_TIME = "__flow_event_time"
_WINDOW = "__flow_window"


@dataclass(frozen=True)
class WindowKind:
    name: str
    compiles_to: str
    window: Callable[[Column, WindowSpec], Column]


def _ms(value: int | None) -> str:
    return f"{value} milliseconds"


WINDOW_KINDS: dict[str, WindowKind] = {
    k.name: k
    for k in (
        WindowKind(
            "tumbling",
            "groupBy(window(event_time, duration)) — native streaming aggregation",
            lambda t, w: F.window(t, _ms(w.duration_ms)),
        ),
        WindowKind(
            "hopping",
            "groupBy(window(event_time, duration, hop)) — native streaming aggregation",
            lambda t, w: F.window(t, _ms(w.duration_ms), _ms(w.hop_ms)),
        ),
    )
}


def with_event_time(frame: DataFrame, window: WindowSpec) -> DataFrame:
    """Add the watermarked event-time column the window groups on."""
    key = "transform.window.event_time_column"
    name = window.event_time_column
    if name not in frame.columns:
        raise PlanError(
            key,
            f"{name!r} is not a column of the window's input (columns: "
            f"{', '.join(frame.columns)}); select it in [transform].sql",
        )
    event_time = event_time_of(F.col(name), frame.schema[name].dataType, key, name)
    # Rows without an event time are dead-lettered at the source; a NULL here can only
    # come from [transform].sql, and a silent NULL window would never be emitted.
    guarded = F.when(
        event_time.isNull(),
        F.raise_error(
            F.lit(
                f"event time column {name!r} is NULL after [transform].sql; the source "
                "rows had one, so the SQL pre-stage produced this NULL"
            )
        ),
    ).otherwise(event_time)
    return frame.withColumn(EVENT_TIME, guarded).withWatermark(EVENT_TIME, _ms(window.lateness_ms))


def compile_window(frame: DataFrame, window: WindowSpec) -> DataFrame:
    """The windowed aggregation, with the output columns in the seed's order."""
    for i, column in enumerate(window.group_by):
        if column not in frame.columns:
            raise PlanError(
                f"transform.window.group_by[{i}]",
                f"{column!r} is not a column of the window's input "
                f"(columns: {', '.join(frame.columns)})",
            )
    timed = with_event_time(frame, window)
    event_time = F.col(EVENT_TIME)
    aggregations = [
        compile_aggregation(a, i, timed, event_time) for i, a in enumerate(window.aggregations)
    ]
    grouped = timed.groupBy(
        WINDOW_KINDS[window.kind].window(event_time, window).alias(_WINDOW),
        *(F.col(c) for c in window.group_by),
    ).agg(*aggregations)
    return grouped.select(
        F.col(f"{_WINDOW}.start").alias(window.window_start_column),
        F.col(f"{_WINDOW}.end").alias(window.window_end_column),
        *(F.col(c) for c in window.group_by),
        *(F.col(a.as_) for a in window.aggregations),
    )
