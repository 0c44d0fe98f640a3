"""``[transform.window.top_n]`` with ``emit = "current"``: every group's current row of
each open window, kept in the ledger's ``window_standings`` table; the ranking itself is
``flow_jobs.top_n.ranking``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from flow_jobs import state_codec
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.top_n.ranking import Ranking, StandingRow, comparable_value, rank


class Standings:
    """Every group's current row of each open window (``emit = "current"``), in the
    ledger's ``window_standings`` table, per pipeline and checkpoint generation
    (an earlier generation's rows go with the first batch of a new one)."""

    def __init__(self, store: LedgerStore, pipeline: str, state_version: int, ranking: Ranking):
        self.store = store
        self.pipeline = pipeline
        self.state_version = state_version
        self.ranking = ranking
        self._pruned = False  # earlier generations' standings (a reset) not yet dropped

    def update(self, rows: pa.Table, closed_before: datetime | None) -> pa.Table:
        """Take a batch's rows; returns the whole top N of every partition they touch.
        ``closed_before``: the previous batch's watermark (its closed windows leave)."""
        r, schema = self.ranking, rows.schema
        records = rows.to_pylist()
        with self.store.connect() as conn:
            if not self._pruned:
                conn.execute(
                    self.store.q(
                        "DELETE FROM {s}.window_standings WHERE pipeline = %s AND "
                        "state_version <> %s"
                    ),
                    (self.pipeline, self.state_version),
                )
                self._pruned = True
            if closed_before is not None:
                conn.execute(
                    self.store.q(
                        "DELETE FROM {s}.window_standings WHERE pipeline = %s AND "
                        "state_version = %s AND window_end <= %s"
                    ),
                    (self.pipeline, self.state_version, closed_before),
                )
            if not records:
                return rows
            with conn.cursor() as cur:
                cur.executemany(
                    self.store.q(
                        "INSERT INTO {s}.window_standings (pipeline, state_version, "
                        "window_start, window_end, group_key, row) VALUES (%s, %s, %s, %s, %s, "
                        "%s) ON CONFLICT (pipeline, state_version, window_start, window_end, "
                        "group_key) DO UPDATE SET row = EXCLUDED.row"
                    ),
                    [
                        (
                            self.pipeline,
                            self.state_version,
                            rec[r.start],
                            rec[r.end],
                            _group_key(rec, r.groups),
                            state_codec.dump(StandingRow(rec, schema)),
                        )
                        for rec in records
                    ],
                )
            windows = sorted({(rec[r.start], rec[r.end]) for rec in records})
            held = conn.execute(
                self.store.q(
                    "SELECT row FROM {s}.window_standings WHERE pipeline = %s AND "
                    "state_version = %s AND (window_start, window_end) IN "
                    "(SELECT * FROM unnest(%s::timestamptz[], %s::timestamptz[]))"
                ),
                (
                    self.pipeline,
                    self.state_version,
                    [w[0] for w in windows],
                    [w[1] for w in windows],
                ),
            ).fetchall()
        touched = {_partition(rec, r) for rec in records}
        standing = [
            rec
            for rec in (state_codec.load(h[0], StandingRow).record for h in held)
            if _partition(rec, r) in touched
        ]
        return rank(pa.Table.from_pylist(standing, schema=schema), r)


def _group_key(record: dict[str, Any], groups: Sequence[str]) -> str:
    return json.dumps([record[g] for g in groups], default=str)


def _partition(record: dict[str, Any], r: Ranking) -> tuple[Any, ...]:
    return tuple(comparable_value(record[c]) for c in r.partition_columns)
