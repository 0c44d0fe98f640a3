"""An independent reference computation of window semantics, in plain Python.

It shares no code with flow_jobs. Windows are enumerated from their definitions:

* tumbling / hopping: every epoch-aligned [start, end) containing the event;
* cumulate: per cumulation [c, c + max_duration) aligned to the epoch, the windows
  [c, c + k * step) for k = 1 .. max_duration / step; an event is in those containing it;
* session: a group's events sorted by time; an event joins the running session when it
  falls at or before the session's end (last event + gap); the session is [first, last + gap);
* sliding: one window [max(0, t - duration), t] per distinct event time t of a group;
* count: a group's events numbered in their total order (event time, then Kafka
  position, ``_arrival``); window k holds events [k * stride, k * stride + count - 1];
  its bounds are the times of its first and last event. An event is numbered once the
  watermark has reached it (t <= watermark), so only those count (docs/spec-reference.md,
  "Order of events"); ``current=True``: every event, partial windows included.
* session, ``current=True``: every session of the events given, open ones too.

Time windows are returned when closed by the watermark (end <= watermark; sliding:
end < watermark); count windows when complete. Aggregates follow SQL NULL rules;
first/last/collect/reduce follow event time, ties by Kafka position: ``_arrival`` holds
a sortable (topic, partition, offset) or any rank that orders the same way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

Row = dict[str, Any]
# (agg, column, alias, options): options may hold initializer/reducer functions
Agg = tuple[str, str | None, str, dict[str, Any]]


def window_starts(t: int, duration: int, hop: int | None) -> list[int]:
    """Every window start s (a multiple of hop) with s <= t < s + duration."""
    step = hop or duration
    s = t - t % step  # floor to the step, also for negative t
    starts = []
    while s > t - duration:
        starts.append(s)
        s -= step
    return sorted(starts)


def _sorted_members(rows: list[Row], time_key: str) -> list[Row]:
    return sorted(rows, key=lambda r: (r[time_key], r["_arrival"]))


def aggregate(agg: Agg, rows: list[Row], time_key: str) -> list[Any]:
    """One window's value(s) for one aggregation (two for count_distinct with a sketch)."""
    name, column, _alias, options = agg
    if name == "count":
        return [len(rows) if column is None else sum(r[column] is not None for r in rows)]
    if name == "reduce" and column is None:
        ordered = _sorted_members(rows, time_key)
        values = [{k: v for k, v in r.items() if not k.startswith("_")} for r in ordered]
        return [_fold(values, options["initializer"], options["reducer"])]
    present = [r for r in rows if r[column] is not None]
    values = [r[column] for r in present]
    if name in ("first", "last", "collect", "reduce"):
        ordered = [r[column] for r in _sorted_members(present, time_key)]
        if name == "collect":
            return [ordered]
        if name == "reduce":
            return [_fold(ordered, options["initializer"], options["reducer"])]
        if not ordered:
            return [None]
        return [ordered[0] if name == "first" else ordered[-1]]
    if name == "count_distinct":
        return [len(set(values))] + ([Ellipsis] if options.get("keep_sketch") else [])
    if not values:
        return [None]
    if name == "sum":
        total = sum(values)
        # An integer sum outside BIGINT is NULL (docs/spec-reference.md, "Numbers").
        if isinstance(total, int) and not -(2**63) <= total < 2**63:
            return [None]
        return [total]
    if name == "min":
        return [min(values)]
    if name == "max":
        return [max(values)]
    if name == "avg":
        return [sum(values) / len(values)]
    raise ValueError(name)


def _fold(values: list[Any], initializer: Callable, reducer: Callable) -> Any:
    if not values:
        return None
    acc = initializer(values[0])
    for v in values[1:]:
        acc = reducer(acc, v)
    return acc


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def reference_windows(
    events: Iterable[Row],
    *,
    kind: str = "tumbling",
    time_key: str,
    duration_ms: int | None = None,
    hop_ms: int | None = None,
    gap_ms: int | None = None,
    count: int | None = None,
    step: int | None = None,
    step_ms: int | None = None,
    max_duration_ms: int | None = None,
    group_by: Sequence[str],
    aggregations: Sequence[Agg | tuple[str, str | None, str]],
    watermark_ms: int | None = None,
    current: bool = False,
) -> dict[tuple, dict[str, Any]]:
    """Closed windows keyed by natural key, each with its aggregate values by alias.

    ``events`` carry epoch milliseconds under ``time_key`` and their Kafka position (or
    a rank ordering the same way) under ``_arrival``. Events given without it are ranked
    in the order given, which is their Kafka order when the caller produced them in that
    order to one partition, or when no two of a group share an event time. ``current``:
    windows as emit = "current" leaves them: count windows keyed by index and group,
    partial ones too; every session, open ones too.
    """
    events = list(events)
    if not all("_arrival" in e for e in events):
        assert not any("_arrival" in e for e in events), "give _arrival to all events or none"
        events = [{**e, "_arrival": i} for i, e in enumerate(events)]
    aggs: list[Agg] = [a if len(a) == 4 else (*a, {}) for a in aggregations]  # type: ignore[misc]
    by_group: dict[tuple, list[Row]] = defaultdict(list)
    for e in events:
        by_group[tuple(e[g] for g in group_by)].append(e)

    windows: list[tuple[tuple, list[Row]]] = []  # (natural key, members)
    for group, rows in by_group.items():
        if kind in ("tumbling", "hopping"):
            assert duration_ms is not None and watermark_ms is not None
            spans: dict[Any, list[Row]] = defaultdict(list)
            for r in rows:
                for s in window_starts(r[time_key], duration_ms, hop_ms):
                    spans[s].append(r)
            for s, members in spans.items():
                if s + duration_ms <= watermark_ms:
                    windows.append(((_ts(s), _ts(s + duration_ms), *group), members))
        elif kind == "cumulate":
            assert step_ms is not None and max_duration_ms is not None
            assert current or watermark_ms is not None
            spans = defaultdict(list)
            for r in rows:
                t = r[time_key]
                c = t - t % max_duration_ms  # floor, also for negative t
                for k in range(1, max_duration_ms // step_ms + 1):
                    if t < c + k * step_ms:
                        spans[(c, c + k * step_ms)].append(r)
            for (s, e), members in spans.items():
                if current or e <= watermark_ms:
                    windows.append(((_ts(s), _ts(e), *group), members))
        elif kind == "session":
            assert gap_ms is not None and (current or watermark_ms is not None)
            ordered = sorted(rows, key=lambda r: r[time_key])
            sessions: list[list[Row]] = []
            for r in ordered:
                if sessions and r[time_key] <= sessions[-1][-1][time_key] + gap_ms:
                    sessions[-1].append(r)
                else:
                    sessions.append([r])
            for members in sessions:
                start, end = members[0][time_key], members[-1][time_key] + gap_ms
                if current or end <= watermark_ms:
                    windows.append(((_ts(start), _ts(end), *group), members))
        elif kind == "sliding":
            assert duration_ms is not None and watermark_ms is not None
            for t in sorted({r[time_key] for r in rows}):
                if t < watermark_ms:
                    start = max(0, t - duration_ms)
                    members = [r for r in rows if start <= r[time_key] <= t]
                    windows.append(((_ts(start), _ts(t), *group), members))
        else:
            assert count is not None
            stride = {"count_tumbling": count, "count_sliding": 1}.get(kind, step)
            assert stride is not None
            ordered = _sorted_members(rows, time_key)
            if not current:
                assert watermark_ms is not None
                ordered = [r for r in ordered if r[time_key] <= watermark_ms]
            k = 0
            while k * stride < len(ordered) and (current or k * stride + count <= len(ordered)):
                members = ordered[k * stride : k * stride + count]
                first, last = members[0][time_key], members[-1][time_key]
                key = (k, *group) if current else (_ts(first), _ts(last), k, *group)
                windows.append((key, members))
                k += 1

    out = {}
    for key, members in windows:
        values: dict[str, Any] = {}
        if current and kind.startswith("count_"):  # bounds are values, not the key
            values["window_start"] = _ts(members[0][time_key])
            values["window_end"] = _ts(members[-1][time_key])
        for agg in aggs:
            results = aggregate(agg, members, time_key)
            values[agg[2]] = results[0]
            if len(results) > 1:
                values[agg[2] + "_sketch"] = results[1]
        out[key] = values
    return out
