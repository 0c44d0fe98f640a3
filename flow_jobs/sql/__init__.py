"""Pipelines written in SQL (docs/spec-reference.md, "SQL").

A front end to the spec, below it: it reads SQL with a real parser (sqlglot, taught
Flink's clauses in ``dialect``) into the TOML-shaped document the spec validates, so a
SQL pipeline and its TOML twin are one spec, one plan and one fingerprint.

* ``read_pipeline(text, name, aggregators)``: a ``.sql`` pipeline file's document.
* ``lift_transform(transform, aggregators)``: a ``[transform]`` table whose ``sql`` is
  a whole windowed query or join, as the stage keys it equals (other SQL is left as it
  is: a pre-stage).
* ``render_pipeline(document)``: the other way, a ``.sql`` file of a TOML document.
* ``SqlError``: a clause refused, with its place (``locate``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from flow_jobs.sql.dialect import FlowSQL
from flow_jobs.sql.errors import SqlError
from flow_jobs.sql.joins import is_join, join_query
from flow_jobs.sql.pipeline_file import read_pipeline
from flow_jobs.sql.render import render_pipeline
from flow_jobs.sql.windowed import is_windowed, ordered, windowed_query

__all__ = ["SqlError", "lift_transform", "read_pipeline", "render_pipeline"]


def lift_transform(
    transform: dict[str, Any], aggregators: Collection[str], sources: Collection[str] = ()
) -> dict[str, Any]:
    """``transform`` with a ``sql`` that is a whole windowed query or join turned into
    the stage keys it equals (a window's WHERE stays, as the pre-stage); the table's own
    keys for that stage (lateness, emit, ...) stay, and one the query also gives is
    refused. A join is a stream join only between two of ``sources`` (the declared
    ones); one with a lookup stays in the pre-stage, where lookups are joined."""
    sql = transform.get("sql")
    if not isinstance(sql, str):
        return transform
    try:
        statement = sqlglot.parse_one(sql, read=FlowSQL)
    except ParseError:
        return transform  # not ours to judge: Spark reads the pre-stage
    try:
        if is_windowed(statement):
            return _lift_window(transform, statement, aggregators, sql)
        tables = {t.name for t in statement.find_all(exp.Table) if t.name}  # not TABLE(...)
        streams = not transform.get("lookups") and tables <= set(sources)
        if is_join(statement) and streams:
            joined = join_query(statement)
            lifted = {k: v for k, v in transform.items() if k != "sql"}
            lifted[joined.stage] = _beside(joined.stage, joined.keys, transform.get(joined.stage))
            return lifted
    except SqlError as e:
        raise e.locate(sql) from None
    return transform


def _beside(stage: str, keys: dict[str, Any], given: Any) -> dict[str, Any]:
    given = dict(given or {}) if isinstance(given, dict | None) else {}
    both = [k for k in keys if k in given]
    if both:
        raise SqlError(f"transform.{stage}.{both[0]} is also given by [transform].sql; keep one")
    return {**keys, **given}


def _lift_window(
    transform: dict[str, Any], statement: exp.Expr, aggregators: Collection[str], sql: str
) -> dict[str, Any]:
    query = windowed_query(statement, aggregators, sql)
    given = dict(transform.get("window") or {})
    options = given.pop("aggregations", None)
    window = query.with_options(ordered(_beside("window", query.window, given)), options)
    lifted = {k: v for k, v in transform.items() if k != "sql"}
    if query.sql:
        lifted["sql"] = query.sql
    lifted["window"] = window
    return lifted
