"""Window operators: Spark's aggregation for the kinds it has, the state API for the rest.

Native kinds (tumbling, hopping, session) are Spark's ``window()`` / ``session_window()``
grouping with a watermark (each family's ``native_window``, ``flow_jobs.windows``): a
JVM hash aggregation whose partial aggregates are shuffled and kept in the state store.
``window()`` aligns to the epoch and a row belongs to every window [start, end) that
contains it (the textbook hopping formula,
``[event_ts − duration + hop, event_ts]``, misses the window that starts exactly
``duration − hop`` before the row when ``hop`` does not divide the time since epoch;
Spark's is right). A session is [first event, last event + gap).

Sliding and count-based windows have no native form: they run on Spark's
arbitrary-state API (``flow_jobs.plan.state_windows``), as do sessions with emit =
"current" (Spark refuses update mode for ``session_window``) and windows that reopen.

``emit = "final"`` is output mode append (a window once, when the watermark passes its
end); ``emit = "current"`` is update (every trigger, the windows it changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.aggregations import NativeWindow, aggregation_input, native_aggregate
from flow_jobs.aggregations.partials import Merge
from flow_jobs.errors import PlanError
from flow_jobs.io.combine import START
from flow_jobs.plan.event_time import EVENT_TIME, replace_event_time, with_event_time
from flow_jobs.plan.ordering import tie_break
from flow_jobs.plan.state_windows import compile_state_window
from flow_jobs.spec.models import WindowSpec

_WINDOW = "__flow_window"
_GAP = "__flow_gap"


@dataclass(frozen=True)
class CompiledWindow:
    frame: DataFrame
    output_mode: str  # "append" | "update"


def state_window_key(state: DataFrame) -> str:
    """The window struct's field in the key of a native window's state (Spark's state
    reader): ``window()``'s own, or the exploded windows' (``_exploded``)."""
    return _WINDOW if _WINDOW in state.schema["key"].dataType.fieldNames() else "window"


def check_group_by(frame: DataFrame, window: WindowSpec) -> None:
    for i, column in enumerate(window.group_by):
        if column not in frame.columns:
            raise PlanError(
                f"transform.window.group_by[{i}]",
                f"{column!r} is not a column of the window's input "
                f"(columns: {', '.join(frame.columns)})",
            )


def compile_window(
    frame: DataFrame,
    window: WindowSpec,
    pipeline: str,
    *,
    watermarked_time: str | None = None,
    source_watermarks: bool = False,
    topics: Sequence[str] = (),
    merge: Merge | None = None,
) -> CompiledWindow:
    """The windowed aggregation, with the output columns in ``PipelineSpec.output_columns``' order.
    ``topics``: the pipeline's source topics (ties of equal event time follow their
    Kafka position, ``flow_jobs.plan.ordering``); ``merge``: the input holds partial
    aggregates from the reader (``flow_jobs.plan.combine``)."""
    check_group_by(frame, window)
    mode = "update" if window.emit == "current" else "append"
    timed = with_event_time(
        frame, window, watermarked_time=watermarked_time, source_watermarks=source_watermarks
    )
    tie = tie_break(frame, topics)
    if window.engine == "state":
        return CompiledWindow(compile_state_window(timed, window, pipeline, tie), mode)
    event_time = F.col(EVENT_TIME)
    order = (event_time, *tie)
    if merge is not None and merge.plan.gap_ms:
        timed, window_column = _merged_sessions(timed, window, merge)
    else:
        window_column = window.native_window(event_time)
    assert window_column is not None  # engine "native": the family has a native form
    if window.EXPLODES:
        timed, window_column = _exploded(timed, window, window_column)
    bounds = (F.col(f"{_WINDOW}.start"), F.col(f"{_WINDOW}.end"))
    aggregates = [
        native_aggregate(
            aggregation_input(a, i, timed),
            NativeWindow(order, bounds, tuple(window.group_by), pipeline, merge),
        )
        for i, a in enumerate(window.aggregations)
    ]
    grouped = timed.groupBy(window_column.alias(_WINDOW), *(F.col(c) for c in window.group_by)).agg(
        *(c for a in aggregates for c in a.aggregates)
    )
    output = grouped.select(
        bounds[0].alias(window.window_start_column),
        bounds[1].alias(window.window_end_column),
        *(F.col(c) for c in window.group_by),
        *(c for a in aggregates for c in a.outputs),
    )
    return CompiledWindow(output, mode)


def _exploded(timed: DataFrame, window: WindowSpec, windows: Column) -> tuple[DataFrame, Column]:
    """One row per window of the row's list (cumulating windows), the (start, end)
    struct marked as the watermarked event time, as ``window()`` marks its own: Spark's
    aggregation then closes each window, and drops a late row of it, by its end."""
    timed = timed.withColumn(_WINDOW, F.explode(windows))
    return replace_event_time(timed, window, F.col(_WINDOW), _WINDOW), F.col(_WINDOW)


def _merged_sessions(
    timed: DataFrame, window: WindowSpec, merge: Merge
) -> tuple[DataFrame, Column]:
    """Sessions over rows and the reader's session partials (``flow_jobs.io.combine``):
    a row's session is [time, time + gap), a partial's [start, highest time + gap), what
    its rows' sessions merge into. Spark's ``session_window`` takes a gap per row for
    that; the watermark has been taken on the highest time before (the source's node or
    ``with_event_time``'s), so the event time may become the start here."""
    start = merge.partial.getField(START)
    span_us = F.unix_micros(F.col(EVENT_TIME)) - F.unix_micros(start)
    gap_us = F.coalesce(span_us, F.lit(0)) + F.lit(merge.plan.gap_ms * 1000)
    # session_window takes a gap column only as a calendar interval: exact seconds
    seconds = (gap_us.cast("decimal(24,0)") / F.lit(1_000_000)).cast("decimal(18,6)")
    timed = timed.withColumn(_GAP, F.make_interval(secs=seconds))
    timed = replace_event_time(timed, window, F.coalesce(start, F.col(EVENT_TIME)))
    return timed, F.session_window(F.col(EVENT_TIME), F.col(_GAP))
