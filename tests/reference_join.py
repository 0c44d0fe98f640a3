"""An independent reference computation of the stream-stream join, in Python, from
the rules of docs/spec-reference.md, "[transform.join]".

A left row L and a right row R match when every key pair is equal and not NULL and
``lower <= R.time - L.time <= upper``. Each match is one output row; an outer join
adds each row of the preserved side(s) that matched nothing, with NULLs for the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]


def reference_join(
    left: Sequence[Row],
    right: Sequence[Row],
    *,
    left_keys: Sequence[str],
    right_keys: Sequence[str],
    left_time: str,
    right_time: str,
    lower: int,
    upper: int,
    how: str,
    left_columns: Sequence[str],
    right_columns: Sequence[str],
) -> list[tuple]:
    """Output rows as tuples (left columns..., right columns...), sorted."""

    def key(row: Row, keys: Sequence[str]) -> tuple | None:
        values = tuple(row[k] for k in keys)
        return None if any(v is None for v in values) else values

    by_key: dict[tuple, list[int]] = {}
    for j, r in enumerate(right):
        k = key(r, right_keys)
        if k is not None:
            by_key.setdefault(k, []).append(j)

    out: list[tuple] = []
    matched_right: set[int] = set()
    nothing_left = tuple(None for _ in left_columns)
    nothing_right = tuple(None for _ in right_columns)
    for lrow in left:
        k = key(lrow, left_keys)
        hits = [
            j
            for j in (by_key.get(k, []) if k is not None else [])
            if lower <= right[j][right_time] - lrow[left_time] <= upper
        ]
        left_values = tuple(lrow[c] for c in left_columns)
        for j in hits:
            matched_right.add(j)
            out.append(left_values + tuple(right[j][c] for c in right_columns))
        if not hits and how in ("left", "full"):
            out.append(left_values + nothing_right)
    if how in ("right", "full"):
        for j, rrow in enumerate(right):
            if j not in matched_right:
                out.append(nothing_left + tuple(rrow[c] for c in right_columns))
    return sorted(out, key=lambda t: tuple((v is None, v if v is not None else 0) for v in t))
