"""Window operators: Spark's aggregation for the kinds it has, the state API for the rest.

A kind with a native form is Spark's grouping on the window column its family gives
(``WindowSpec.native_window``: ``window()``, ``session_window()``, or a list of windows
per row that is exploded first, ``EXPLODES``) with a watermark: a JVM hash aggregation
whose partial aggregates are shuffled and kept in the state store.

A window runs on Spark's arbitrary-state API (``flow_jobs.plan.state_windows``) where
``WindowSpec.engine`` says so: its kind has no native form, or Spark's operator cannot
do what it asks (reopen, emit what it refuses, cap an exact distinct set while open).

``emit = "final"`` is output mode append (a window once, when the watermark passes its
end); ``emit = "current"`` is update (every trigger, the windows it changed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.aggregations import AGGREGATORS, NativeWindow, aggregation_input, native_aggregate
from flow_jobs.aggregations.partials import Merge
from flow_jobs.kafka.combine import START
from flow_jobs.plan.event_time import EVENT_TIME, replace_event_time, with_event_time
from flow_jobs.plan.frame_columns import require_column
from flow_jobs.plan.ordering import tie_break
from flow_jobs.plan.state_windows import compile_state_window
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import WindowSpec
from flow_jobs.spec.windows import ON_STATE_API
from flow_jobs.windows.processor import STATE_VARIABLE

_WINDOW = "__flow_window"
_GAP = "__flow_gap"


#: Spark's setting naming the state store's provider class, and Spark's default.
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_DEFAULT_PROVIDER = "HDFSBackedStateStoreProvider"


@dataclass(frozen=True)
class CompiledWindow:
    frame: DataFrame
    output_mode: str  # "append" | "update"
    window: WindowSpec
    engine: str  # what compile_window built: "native" (Spark's aggregation) | "state"
    #: where the watermark is taken: "sources" (each its own, the window the lowest),
    #: "join" (a side's watermarked time) or "window" (withWatermark before the window)
    watermark: str
    merges: bool  # the input holds the reader's partial aggregates
    state_store: str  # the state store provider's class, as the session sets it

    def describe(self) -> list[PlanLine]:
        w = self.window
        aggregations = [
            PlanLine(
                f"{a.as_} = {a.agg}({a.column or ''})",
                AGGREGATORS[a.agg].native_form
                if self.engine == "native"
                else AGGREGATORS[a.agg].state_form,
            )
            for a in w.aggregations
        ]
        return [
            PlanLine(f"window: {w.kind} {w.size_text}", self._operator()),
            PlanLine("watermark", self._watermark()),
            PlanLine(f"emit = {w.emit}", self._emit()),
            *aggregations,
            PlanLine("state", self._state()),
        ]

    def _operator(self) -> str:
        w = self.window
        group = ", ".join(w.group_by)
        if self.engine == "state":
            return (
                f"{ON_STATE_API} grouped by ({group or 'one group'}), the family's Python "
                f"(flow_jobs.windows) on each group's rows: {w.state_reason}"
            )
        native = w.native_text
        text = f"groupBy({native}{', ' + group if group else ''}): Spark's streaming aggregation"
        if self.merges:
            text += ", merging the Kafka reader's partials with the rows"
        return text

    def _watermark(self) -> str:
        w = self.window
        delay = f"{w.watermark_delay_ms} ms"
        if w.reopens:
            delay += " (lateness_ms + allowed_lateness_ms)"
        if w.time_mode == "processing":
            return f"withWatermark(arrival time, {delay}): each row stamped when it is read"
        if self.watermark == "sources":
            return f"the lowest of the sources' own watermarks, each {delay} behind"
        if self.watermark == "join":
            return "the join side's watermark, which its event time keeps"
        return f"withWatermark({w.event_time_column}, {delay}), after [transform].sql"

    def _emit(self) -> str:
        w = self.window
        if w.reopens:
            return (
                f"output mode {self.output_mode}: each window when the watermark + "
                f"allowed_lateness_ms passes its end, then again ({w.revision_column} + 1) in "
                "each batch that corrects it, until the watermark passes its end"
            )
        text = (
            f"output mode {self.output_mode}: every trigger, the windows it changed"
            if self.output_mode == "update"
            else f"output mode {self.output_mode}: each window once, when it closes"
        )
        if w.supersedes_overlapping:
            text += "; each row replaces the group's rows its bounds overlap"
        return text

    def _state(self) -> str:
        held = (
            "each open (window, group)'s aggregation buffers"
            if self.engine == "native"
            else f"per group one value ({STATE_VARIABLE}: its open windows' events) and one "
            "event-time timer"
        )
        return f"Spark's state store ({self.state_store}) in the checkpoint: {held}"


def state_store_provider(frame: DataFrame) -> str:
    """The short name of the state store provider the frame's session runs."""
    provider = frame.sparkSession.conf.get(STATE_STORE_PROVIDER, None)
    return (provider or _DEFAULT_PROVIDER).rsplit(".", 1)[-1]


def state_window_key(state: DataFrame) -> str:
    """The window struct's field in the key of a native window's state (Spark's state
    reader): ``window()``'s own, or the exploded windows' (``_exploded``)."""
    return _WINDOW if _WINDOW in state.schema["key"].dataType.fieldNames() else "window"


def check_group_by(frame: DataFrame, window: WindowSpec) -> None:
    for i, column in enumerate(window.group_by):
        require_column(frame, f"transform.window.group_by[{i}]", column, "the window's input")


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
    aggregates from the reader (``flow_jobs.combine.decide``)."""
    check_group_by(frame, window)
    mode = "update" if window.emit == "current" else "append"
    timed = with_event_time(
        frame, window, watermarked_time=watermarked_time, source_watermarks=source_watermarks
    )
    tie = tie_break(frame, topics)
    watermark = (
        "join" if watermarked_time is not None else "sources" if source_watermarks else "window"
    )
    compiled = CompiledWindow(
        frame,
        mode,
        window,
        window.engine,
        watermark,
        merge is not None,
        state_store_provider(frame),
    )
    if window.engine == "state":
        return replace(compiled, frame=compile_state_window(timed, window, pipeline, tie))
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
    return replace(compiled, frame=output)


def _exploded(timed: DataFrame, window: WindowSpec, windows: Column) -> tuple[DataFrame, Column]:
    """One row per window of the row's list (a family that ``EXPLODES``), the (start, end)
    struct marked as the watermarked event time, as ``window()`` marks its own: Spark's
    aggregation then closes each window, and drops a late row of it, by its end."""
    timed = timed.withColumn(_WINDOW, F.explode(windows))
    return replace_event_time(timed, window, F.col(_WINDOW), _WINDOW), F.col(_WINDOW)


def _merged_sessions(
    timed: DataFrame, window: WindowSpec, merge: Merge
) -> tuple[DataFrame, Column]:
    """Sessions over rows and the reader's session partials (``flow_jobs.kafka.combine``):
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
