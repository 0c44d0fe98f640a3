"""``flow-jobs inspect``: a window join's held rows, each in its window."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import functions as F

from flow_jobs import state_codec
from flow_jobs.runtime.inspect.report import BufferedJoinRow, Reading, as_datetime, epoch_ms
from flow_jobs.runtime.readings import StateInput
from flow_jobs.window_join.processor import STATE_VARIABLE, WindowJoinState


def read_window_join(given: StateInput) -> None:
    """The held rows into the report (its operator: the query's first stateful one)."""
    if given.operators:
        c = given.reading
        reader = given.reader(given.operators[0]["operatorId"])
        c.report.join_rows, c.report.buffered_join_rows = window_join_rows(reader, c)


def window_join_rows(reader: Any, c: Reading) -> tuple[list[BufferedJoinRow], int]:
    """Each row a bucket holds, once per window it is in
    (``flow_jobs.window_join.processor``), the windows that close first first."""
    join = c.spec.transform.window_join
    assert join is not None
    state = reader.option("stateVarName", STATE_VARIABLE).load(c.report.checkpoint)
    out: list[tuple[int, BufferedJoinRow]] = []
    for r in state.where(F.col("value.blob").isNotNull()).toLocalIterator():
        held = state_codec.load(r["value"]["blob"], WindowJoinState)
        for end, start, side, t, _, _, key, row in held.held:
            name = "left" if side == 0 else "right"
            window = f"[{c.clock(start // 1000)}, {c.clock(end // 1000)})"
            because = c.because(
                f"in window {window}, joined once {c.watermark_text()} reaches its end",
                end // 1000,
            )[0]
            values = json.loads(row)
            values.pop("__flow_wj_position", None)
            keys = _keys(join.side_keys(name), key)
            out.append((end, BufferedJoinRow(name, keys, as_datetime(t // 1000), because, values)))
    # --group by key name: a left or a right key, compared as strings
    rows = [
        (end, x)
        for end, x in out
        if all(str(x.key.get(k, x.row.get(k))) == v for k, v in c.groups.items())
    ]
    rows.sort(key=lambda e: (e[0], e[1].side, epoch_ms(e[1].event_time) if e[1].event_time else 0))
    return [x for _, x in rows[: c.limit]], len(rows)


def _keys(names: list[str], key: str | None) -> dict[str, Any]:
    """A held key (the operator's JSON of the keys by place) by the side's names."""
    if key is None:
        return dict.fromkeys(names)
    values = json.loads(key)
    return {n: values.get(f"k{i}") for i, n in enumerate(names)}
