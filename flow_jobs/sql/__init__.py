"""Pipelines written in SQL (docs/spec-reference.md, "SQL").

A front end to the spec, below it: it reads SQL with a real parser (sqlglot, taught
Flink's clauses in ``dialect``) into the TOML-shaped document the spec validates, so a
SQL pipeline and its TOML twin are one spec, one plan and one fingerprint.

* ``read_pipeline(text, name, aggregators)``: a ``.sql`` pipeline file's document.
* ``lift_transform(transform, aggregators)``: a ``[transform]`` table whose ``sql`` is
  a whole windowed query, as the window keys it equals (other SQL is left as it is: a
  pre-stage).
* ``SqlError``: a clause refused, with its place (``locate``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlglot
from sqlglot.errors import ParseError

from flow_jobs.sql.dialect import FlowSQL
from flow_jobs.sql.errors import SqlError
from flow_jobs.sql.pipeline_file import read_pipeline
from flow_jobs.sql.windowed import is_windowed, ordered, windowed_query

__all__ = ["SqlError", "lift_transform", "read_pipeline"]


def lift_transform(transform: dict[str, Any], aggregators: Collection[str]) -> dict[str, Any]:
    """``transform`` with a windowed ``sql`` turned into the ``window`` keys it equals
    (and the pre-stage its WHERE is); the table's own ``window`` keys (lateness,
    emit, ...) stay, and one the query also gives is refused."""
    sql = transform.get("sql")
    if not isinstance(sql, str):
        return transform
    try:
        statement = sqlglot.parse_one(sql, read=FlowSQL)
    except ParseError:
        return transform  # not ours to judge: Spark reads the pre-stage
    if not is_windowed(statement):
        return transform
    try:
        query = windowed_query(statement, aggregators, sql)
    except SqlError as e:
        raise e.locate(sql) from None
    given = dict(transform.get("window") or {})
    if not isinstance(given, dict):
        return transform
    options = given.pop("aggregations", None)
    both = [k for k in query.window if k in given]
    if both:
        raise SqlError(
            f"transform.window.{both[0]} is also given by [transform].sql's window; keep one"
        )
    lifted = {k: v for k, v in transform.items() if k != "sql"}
    if query.sql:
        lifted["sql"] = query.sql
    try:
        window = query.with_options(ordered({**query.window, **given}), options)
    except SqlError as e:
        raise e.locate(sql) from None
    lifted["window"] = window
    return lifted
