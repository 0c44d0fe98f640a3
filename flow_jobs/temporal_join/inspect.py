"""``flow-jobs inspect``: a temporal join's held stream records and kept versions."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import functions as F

from flow_jobs import state_codec
from flow_jobs.runtime.inspect.report import (
    BufferedJoinRow,
    Reading,
    as_datetime,
    epoch_ms,
)
from flow_jobs.runtime.readings import StateInput
from flow_jobs.temporal_join.processor import STATE_VARIABLE as TEMPORAL_STATE
from flow_jobs.temporal_join.processor import TemporalState


def read_temporal_join(given: StateInput) -> None:
    """The held records and kept versions into the report (its operator: the query's
    first stateful one)."""
    if given.operators:
        c = given.reading
        reader = given.reader(given.operators[0]["operatorId"])
        c.report.join_rows, c.report.buffered_join_rows = temporal_rows(reader, c)


def temporal_rows(reader: Any, c: Reading) -> tuple[list[BufferedJoinRow], int]:
    """The stream records each bucket holds until the watermark reaches them, and the
    versions it keeps (``flow_jobs.temporal_join.processor``), those due first."""
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
