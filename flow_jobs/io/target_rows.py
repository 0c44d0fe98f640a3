"""A target's newest rows, read back with a bounded query (an ORDER BY with a LIMIT in
delta-rs's engine or in Postgres, never the whole table): what ``flow-jobs target show``
prints and a Dagster materialization previews."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from flow_jobs.io.state_store import StateStore
from flow_jobs.spec.models import PipelineSpec, revealed


class NoTargetYet(LookupError):
    """The target's table does not exist: the pipeline has not written yet."""


def newest_rows(
    spec: PipelineSpec, key: Sequence[str], store: StateStore | None, limit: int
) -> list[dict[str, Any]]:
    """The target's ``limit`` newest rows, newest first: ordered by its natural key
    ``key``, descending, NULLs last (a window's start and end, then its groups); a
    Postgres target is read in ``store``'s database. A Kafka target has none to read."""
    target = spec.target
    if target.kind == "delta":
        from deltalake.exceptions import TableNotFoundError

        from flow_jobs.io.delta import quoted, read_delta

        order = ", ".join(f"{quoted(c)} DESC NULLS LAST" for c in key)
        query = f"SELECT * FROM t{f' ORDER BY {order}' if order else ''} LIMIT {int(limit)}"
        try:
            return read_delta(target.path, revealed(target.storage_options), query).to_pylist()
        except TableNotFoundError:
            raise NoTargetYet(target.path) from None
    if target.kind == "postgres" and store is not None:
        ordering = sql.SQL(", ").join(
            sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(c)) for c in key
        )
        by = sql.SQL(" ORDER BY {}").format(ordering) if key else sql.SQL("")
        query = sql.SQL("SELECT * FROM {}{} LIMIT %s").format(
            sql.Identifier(target.schema_name, target.table), by
        )
        try:
            with store.connect() as conn:
                cur = conn.execute(query, (limit,))
                names = [d.name for d in cur.description or []]
                return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        except psycopg.errors.UndefinedTable:
            raise NoTargetYet(target.describe()) from None
    return []
