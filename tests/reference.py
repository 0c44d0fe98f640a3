"""An independent reference computation of window semantics, in plain Python.

It shares no code with flow_jobs: windows are enumerated from their definition
([start, end) aligned to the epoch, every window containing the row), aggregates follow
SQL NULL rules, first/last are by event time with ties to the smallest/largest value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

Row = dict[str, Any]


def window_starts(t: int, duration: int, hop: int | None) -> list[int]:
    """Every window start s (a multiple of hop) with s <= t < s + duration."""
    step = hop or duration
    last = t - t % step  # floor to the step, also for negative t
    starts = []
    s = last
    while s > t - duration:
        starts.append(s)
        s -= step
    return sorted(starts)


def _aggregate(agg: str, column: str | None, rows: list[Row], time_key: str) -> Any:
    if agg == "count":
        return len(rows) if column is None else sum(r[column] is not None for r in rows)
    values = [r[column] for r in rows if r[column] is not None]
    if agg in ("first", "last"):
        ordered = sorted((r[time_key], r[column]) for r in rows if r[column] is not None)
        if not ordered:
            return None
        return ordered[0][1] if agg == "first" else ordered[-1][1]
    if not values:
        return None
    if agg == "sum":
        return sum(values)
    if agg == "min":
        return min(values)
    if agg == "max":
        return max(values)
    if agg == "avg":
        return sum(values) / len(values)
    raise ValueError(agg)


def reference_windows(
    events: Iterable[Row],
    *,
    time_key: str,
    duration_ms: int,
    hop_ms: int | None,
    group_by: Sequence[str],
    aggregations: Sequence[tuple[str, str | None, str]],
    watermark_ms: int,
) -> dict[tuple, dict[str, Any]]:
    """Windows closed by ``watermark_ms`` (end <= watermark), keyed by natural key.

    ``events`` carry their event time in epoch milliseconds under ``time_key``;
    ``aggregations`` are (agg, column, alias).
    """
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for e in events:
        for start in window_starts(e[time_key], duration_ms, hop_ms):
            key = (start, start + duration_ms, *(e[g] for g in group_by))
            groups[key].append(e)
    out = {}
    for (start, end, *keys), rows in groups.items():
        if end > watermark_ms:
            continue
        natural = (_ts(start), _ts(end), *keys)
        out[natural] = {
            alias: _aggregate(agg, column, rows, time_key) for agg, column, alias in aggregations
        }
    return out


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
