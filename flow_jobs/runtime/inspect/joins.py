"""``flow-jobs inspect``: a stream-stream join's buffered rows, each with the watermark
that evicts it; a temporal join's held stream records and kept versions."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import functions as F

from flow_jobs import state_codec
from flow_jobs.operators.temporal import STATE_VARIABLE as TEMPORAL_STATE
from flow_jobs.operators.temporal import TemporalState
from flow_jobs.records import EVENT_TS
from flow_jobs.runtime.inspect.report import (
    BufferedJoinRow,
    Reading,
    as_datetime,
    epoch_ms,
    filter_state,
    plain,
)
from flow_jobs.windows.family import span_text

# -- join buffers --------------------------------------------------------------------


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
        # the watermarked event time of the side (flow_jobs.plan.joins), else EVENT_TS
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


# -- the temporal join's held records and kept versions ------------------------------


def temporal_rows(reader: Any, c: Reading) -> tuple[list[BufferedJoinRow], int]:
    """The stream records each bucket holds until the watermark reaches them, and the
    versions it keeps (``flow_jobs.operators.temporal``), those due first."""
    join = c.spec.transform.temporal_join
    assert join is not None
    state = reader.option("stateVarName", TEMPORAL_STATE).load(c.report.checkpoint)
    out: list[BufferedJoinRow] = []
    for r in state.where(F.col("value.blob").isNotNull()).toLocalIterator():
        held = state_codec.load(r["value"]["blob"], TemporalState)
        for t, _, _, key, row in held.held:
            out.append(
                BufferedJoinRow(
                    "stream",
                    _keys(join.stream_keys, key),
                    as_datetime(t // 1000),
                    c.because(
                        f"joined with its version once {c.watermark_text()} reaches "
                        f"{c.clock(t // 1000)}",
                        t // 1000,
                    )[0],
                    json.loads(row),
                )
            )
        for key, versions in held.versions.items():
            for i, (t, _, _, tombstone, row) in enumerate(versions):
                later = versions[i + 1][0] // 1000 if i + 1 < len(versions) else None
                leaves = (
                    f"leaves once the watermark passes {c.clock(later)} (the next version)"
                    if later is not None
                    else "a tombstone: leaves once the watermark passes it"
                    if tombstone
                    else "kept until a later version or a tombstone"
                    + (f", or retention_ms = {join.retention_ms}" if join.retention_ms else "")
                )
                out.append(
                    BufferedJoinRow(
                        "version",
                        _keys(join.version_keys, key),
                        as_datetime(t // 1000),
                        leaves,
                        {} if tombstone else json.loads(row),
                    )
                )
    # --group by key name: a stream key or a version key, compared as strings
    out = [x for x in out if all(str(x.key.get(k, x.row.get(k))) == v for k, v in c.groups.items())]
    out.sort(key=lambda x: (x.side != "stream", epoch_ms(x.event_time) if x.event_time else 0))
    return out[: c.limit], len(out)


def _keys(names: list[str], key: str | None) -> dict[str, Any]:
    """A held key (the operator's JSON of the keys by place) by the side's names."""
    if key is None:
        return dict.fromkeys(names)
    values = json.loads(key)
    return {n: values.get(f"k{i}") for i, n in enumerate(names)}
