"""``flow-jobs inspect``: a window's open windows, from Spark's aggregation state (native
windows) or from the operator's own (state-API windows, read by the window's family)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

from flow_jobs.aggregations import AGGREGATORS, NOT_DECODED, AggregationInput
from flow_jobs.kernels.frame import EventFrame, Values
from flow_jobs.kernels.ranges import Context, Ranges
from flow_jobs.plan.windows import state_window_key
from flow_jobs.runtime.inspect.buffers import NativeState
from flow_jobs.runtime.inspect.report import (
    DECODE_ALL_GROUPS,
    OpenWindow,
    Reading,
    as_datetime,
    epoch_ms,
    filter_state,
    plain,
    with_labels,
)
from flow_jobs.spec.models import Aggregation
from flow_jobs.windows.family import time_rule
from flow_jobs.windows.processor import STATE_VARIABLE, load_group

# -- native windows ------------------------------------------------------------------


def native_windows(
    reader: Any, c: Reading, plan: NativeState | str
) -> tuple[list[OpenWindow], int | None]:
    """The open windows in Spark's aggregation state, each aggregate read by its
    aggregator from the buffers the compiled plan says it keeps (``plan``: str, why the
    plan could not be read: every aggregate is then "n/a")."""
    state = reader.load(c.report.checkpoint)
    w = c.window
    value_type = state.schema["value"].dataType
    own = w.NATIVE_STATE_BOUNDS  # each group's own bounds, in the value (the family's)
    bounds = f"value.{own}" if own else f"key.{state_window_key(state)}"
    group_cols = {g: F.col(f"key.{g}") for g in w.group_by}
    state = filter_state(state, group_cols, c.window_groups)
    total = state.count()
    rows = (
        state.select(
            F.unix_millis(F.col(f"{bounds}.start")).alias("start"),
            F.unix_millis(F.col(f"{bounds}.end")).alias("end"),
            *(col.alias(f"g{i}") for i, col in enumerate(group_cols.values())),
            F.col("value"),
        )
        .orderBy("end", "start", *(f"g{i}" for i in range(len(group_cols))))
        .limit(c.limit)
        .collect()
    )
    fields = [(f.name, f.dataType.simpleString()) for f in value_type.fields]
    unreadable = plan if isinstance(plan, str) else plan.mismatch(fields)
    windows = []
    for r in rows:
        rule, sources = c.explained(time_rule(c, r["end"]))
        aggregates = (
            plan.aggregates(list(r["value"]))
            if isinstance(plan, NativeState) and unreadable is None
            else dict.fromkeys((a.as_ for a in w.aggregations), NOT_DECODED)
        )
        windows.append(
            OpenWindow(
                as_datetime(r["start"]),
                as_datetime(r["end"]),
                {g: plain(r[f"g{i}"]) for i, g in enumerate(w.group_by)},
                aggregates,
                rule,
                sources,
            )
        )
    if rows and unreadable is not None:
        c.report.note = f"every aggregate shows {NOT_DECODED}: {unreadable}"
    elif rows and isinstance(plan, NativeState) and plan.unread:
        c.report.note = _unread_note(w.aggregations, plan.unread)
    return windows, total


def _unread_note(aggregations: Iterable[Aggregation], unread: dict[str, str]) -> str:
    """Which aggregates show "n/a", and why."""
    return "; ".join(
        f"{a.as_} = {a.agg}({a.column or ''}) shows {NOT_DECODED}: {unread[a.as_]}"
        for a in aggregations
        if a.as_ in unread
    )


# -- state-API windows ---------------------------------------------------------------


def state_windows(reader: Any, c: Reading) -> tuple[list[OpenWindow], int | None]:
    """Each group's value holds its open windows: decoded here, ``limit`` groups at a
    time in the order their windows start, until ``limit`` windows are found."""
    w = c.window
    state = reader.option("stateVarName", STATE_VARIABLE).load(c.report.checkpoint)
    group_cols = {g: F.col(f"key.{g}") for g in w.group_by}
    state = filter_state(state, group_cols, c.window_groups).where(F.col("value.blob").isNotNull())
    ordered = state.select(
        *(col.alias(f"g{i}") for i, col in enumerate(group_cols.values())),
        F.col("value.blob").alias("blob"),
        F.col("value.span_start").alias("span_start"),
    ).orderBy("span_start", *(f"g{i}" for i in range(len(group_cols))))
    every = state.count() <= DECODE_ALL_GROUPS
    windows: list[OpenWindow] = []
    for r in ordered.toLocalIterator():
        group = {g: plain(r[f"g{i}"]) for i, g in enumerate(w.group_by)}
        windows.extend(_group_windows(load_group(r["blob"]).state, group, c))
        if not every and len(windows) >= c.limit:
            break
    windows.sort(
        key=lambda x: (epoch_ms(x.end) if x.end else 0, epoch_ms(x.start) if x.start else 0)
    )
    unread = {a.as_: AGGREGATORS[a.agg].not_inspected for a in w.aggregations}
    if windows and any(unread.values()):
        c.report.note = _unread_note(w.aggregations, {k: v for k, v in unread.items() if v})
    return windows[: c.limit], (len(windows) if every else None)


def _group_windows(state: Any, group: dict[str, Any], c: Reading) -> list[OpenWindow]:
    """A group's open windows, as the operator's own family sees them
    (``StateFamily.open_windows``), each with the rule that closes it (``close_rules``)."""
    family = c.window.state_family()
    held = family.open_windows(state)
    rules = family.close_rules(state, held, c)
    found = _windows(
        held.frame, held.ranges, held.starts, held.ends, group, [c.explained(r) for r in rules], c
    )
    labels = [(("index", r.index), ("revision", r.revision)) for r in rules]
    return [
        with_labels(x, **{k: v for k, v in label if v is not None})
        for x, label in zip(found, labels, strict=True)
    ]


def _windows(
    frame: EventFrame,
    ranges: Ranges,
    starts: np.ndarray,
    ends: np.ndarray,
    group: dict[str, Any],
    rules: list[tuple[str, tuple[str, ...]]],
    c: Reading,
) -> list[OpenWindow]:
    aggregates = _open_aggregates(c, frame, ranges)
    return [
        OpenWindow(as_datetime(int(s)), as_datetime(int(e)), group, values, rule, sources)
        for s, e, values, (rule, sources) in zip(starts, ends, aggregates, rules, strict=True)
    ]


def _open_aggregates(c: Reading, frame: EventFrame, ranges: Ranges) -> list[dict[str, Any]]:
    """Each open window's aggregates as they stand, computed by the operator's own
    aggregators (``Aggregator.state``) over the group's state. The frame's column kinds
    come from their dtype, so a timestamp column shows as the epoch microseconds it
    holds; ``reduce`` runs the user's functions, which ``inspect`` does not: "n/a"
    (``Aggregator.not_inspected``)."""
    kinds = {name: _kind(values) for name, values in frame.columns.items()}
    ctx = Context.of(frame, kinds, lambda i: f"open window {i}")
    out: list[dict[str, Any]] = [{} for _ in range(len(ranges))]
    for i, a in enumerate(c.window.aggregations):
        unit = AGGREGATORS[a.agg]
        given = AggregationInput(a, i, None, None, ())
        column = unit.state_column(given)
        values: Any = [NOT_DECODED] * len(ranges)
        if unit.not_inspected is None and (column is None or column in frame.columns):
            operator = unit.state(given, column, c.spec.name)
            values = operator.compute(ctx, ranges)[0]
        for window, value in zip(out, values, strict=True):
            window[a.as_] = None if value is pd.NA else plain(value)  # pandas' NULL
    return out


def _kind(values: Values) -> str:
    """A frame column's kind (``flow_jobs.kernels.frame.ColumnKind``) from its dtype."""
    if values.data.dtype == np.float64:
        return "float"
    return "int" if values.data.dtype == np.int64 else "object"
