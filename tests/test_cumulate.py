"""Cumulating windows' rules, as pure logic: the spec keys and the windows a row is in
(docs/spec-reference.md, "Windows"); end to end they run in tests/test_window_kinds.py,
tests/test_emit_current.py, tests/test_late_rows.py, tests/test_combine.py and
tests/test_inspect.py against tests/reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from flow_jobs.spec.windows import WindowSpec
from flow_jobs.windows.cumulate import CumulateBounds


def _windows(t: int, step: int, most: int) -> list[tuple[int, int]]:
    """From the definition: the cumulation [c, c + most) aligned to the epoch holding t,
    and its windows [c, c + k * step), k = 1 .. most / step, that contain t."""
    c = t - t % most  # Python's % floors: also before the epoch
    return [(c, c + k * step) for k in range(1, most // step + 1) if c <= t < c + k * step]


@given(
    st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=20),
    st.integers(1, 50),
    st.integers(1, 8),
)
def test_the_windows_of_rows_are_the_definitions(times: list[int], step: int, k: int) -> None:
    most = step * k
    bounds = CumulateBounds(step, most, 0)
    keys = bounds.keys(np.array(times, np.int64))
    expected = sorted({w for t in times for w in _windows(t, step, most)}, key=lambda w: w[1])
    assert list(zip(bounds.starts(keys).tolist(), bounds.ends(keys).tolist(), strict=True)) == (
        expected
    )


def _window(**keys: object) -> WindowSpec:
    return WindowSpec.model_validate(
        {"kind": "cumulate", **keys, "aggregations": [{"agg": "count", "as": "n"}]}
    )


def test_the_longest_window_is_a_whole_number_of_steps() -> None:
    assert _window(step_ms=60_000, max_duration_ms=86_400_000).pane_ms == 60_000
    with pytest.raises(ValidationError, match="max_duration_ms = 90000 must be a multiple"):
        _window(step_ms=60_000, max_duration_ms=90_000)
    with pytest.raises(ValidationError, match='max_duration_ms is required when kind = "cumulate"'):
        _window(step_ms=60_000)
    with pytest.raises(ValidationError, match='step_ms is only valid for kind = "cumulate"'):
        WindowSpec.model_validate(
            {"kind": "tumbling", "duration_ms": 1, "step_ms": 1, "aggregations": []}
        )
