"""``flow-jobs inspect``: a stream-stream join's buffered rows, each with the watermark
that evicts it (read from Spark's symmetric hash join state, each side's)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import functions as F

from flow_jobs.records import EVENT_TS
from flow_jobs.runtime.inspect.report import (
    BufferedJoinRow,
    Reading,
    as_datetime,
    epoch_ms,
    filter_state,
    plain,
)
from flow_jobs.runtime.readings import StateInput
from flow_jobs.runtime.reports import JOIN_OPERATOR
from flow_jobs.windows.family import span_text


def read_join(given: StateInput) -> None:
    """The join's buffered rows into the report (its operator: Spark's join)."""
    join = [r for r in given.operators if r["operatorName"] == JOIN_OPERATOR]
    if join:
        c = given.reading
        reader = given.reader(join[0]["operatorId"])
        c.report.join_rows, c.report.buffered_join_rows = join_rows(reader, c)


def join_rows(reader: Any, c: Reading) -> tuple[list[BufferedJoinRow], int]:
    join = c.spec.transform.join
    assert join is not None
    lower, upper = join.bounds
    out: list[BufferedJoinRow] = []
    total = 0
    for side, keys, offset in (("left", join.left_keys, upper), ("right", join.right_keys, -lower)):
        state = reader.option("joinSide", side).load(c.report.checkpoint)
        key_fields = state.schema["key"].dataType.fieldNames()
        key_cols = {k: F.col(f"key.{f}") for k, f in zip(keys, key_fields, strict=False)}
        value_fields = state.schema["value"].dataType.fieldNames()
        # the watermarked event time of the side (flow_jobs.joins.compile), else EVENT_TS
        time_field = next(
            (f for f in value_fields if f == f"__flow_{side}_time"),
            EVENT_TS if EVENT_TS in value_fields else None,
        )
        time_col = F.unix_millis(F.col(f"value.{time_field}")) if time_field else F.lit(None)
        state = filter_state(state, key_cols, {k: v for k, v in c.groups.items() if k in key_cols})
        total += state.count()
        rows = (
            state.select(
                *(col.alias(f"k{i}") for i, col in enumerate(key_cols.values())),
                time_col.alias("t"),
                F.col("value"),
            )
            .orderBy("t")
            .limit(c.limit)
            .collect()
        )
        for r in rows:
            t = r["t"]
            rule, _ = c.because(
                f"evicted once {c.watermark_text()} passes event time "
                f"{'+' if offset >= 0 else '-'} {span_text(abs(offset))}"
                + (f" = {c.clock(t + offset)}" if t is not None else ""),
                None,
            )
            row = {k: plain(v) for k, v in r["value"].asDict().items() if not k.startswith("_")}
            out.append(
                BufferedJoinRow(
                    side,
                    {k: plain(r[f"k{i}"]) for i, k in enumerate(key_cols)},
                    as_datetime(t),
                    rule,
                    row,
                )
            )
    out.sort(key=lambda x: epoch_ms(x.event_time) if x.event_time else 0)
    return out[: c.limit], total
