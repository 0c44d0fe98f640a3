"""A pipeline as one ``.sql`` file, as Flink SQL and Arroyo users write one: a
``CREATE TABLE`` per source and for the target, ``SET`` for the other keys, and one
``INSERT INTO target SELECT ...``; read into the TOML-shaped document the spec
validates (docs/spec-reference.md, "A pipeline in SQL").

* A source: ``CREATE TABLE clicks (user_id STRING, ..., ts BIGINT, WATERMARK FOR ts AS
  ts - INTERVAL '5' SECOND) WITH ('topic' = 'clicks', 'bootstrap_servers' = '...')``:
  the columns are its ``schema``, the ``WITH`` its other keys, the watermark's delay
  the window's ``lateness_ms``. Flink's own connector keys are read too
  (``'connector' = 'kafka'``, ``'properties.bootstrap.servers'``, ``'scan.startup.mode'``,
  ``'value.format'``).
* The target: the table ``INSERT INTO`` names; ``WITH`` holds its keys (``kind`` or
  Flink's ``connector``). Its columns, when given, must be the query's output.
* ``SET 'key' = 'value'``: any other key by its dotted TOML path
  (``SET 'transform.window.emit' = 'current'``); ``pipeline.name`` (Flink's) is ``name``.
  Without one, the name is the file's.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from flow_jobs.sql.dialect import FlowSQL
from flow_jobs.sql.durations import duration_ms
from flow_jobs.sql.errors import SqlError, clause
from flow_jobs.sql.windowed import BOUNDS, is_windowed, ordered, windowed_query

#: Flink's Kafka connector keys, as ours.
_FLINK_KEYS = {
    "properties.bootstrap.servers": "bootstrap_servers",
    "scan.startup.mode": "starting_offsets",
    "value.format": "format",
}
_STARTUP_MODES = {"earliest-offset": "earliest", "latest-offset": "latest"}


def _value(node: exp.Expr) -> Any:
    """A ``WITH`` or ``SET`` value as written: a string stays a string (the spec's
    models read ``'5000'`` as the number where a key is one)."""
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.name
        text = node.name
        return int(text) if re.fullmatch(r"-?\d+", text) else float(text)
    if isinstance(node, exp.Boolean):
        return node.this
    raise SqlError(f"{clause(node)}: give the value as a literal, e.g. '5000'", node)


def _properties(create: exp.Create) -> dict[str, Any]:
    props = create.args.get("properties")
    out: dict[str, Any] = {}
    for prop in props.expressions if props else []:
        if not isinstance(prop, exp.Property):
            raise SqlError(f"{clause(prop)}: WITH takes 'key' = 'value' pairs", prop)
        key = prop.name if isinstance(prop.this, exp.Literal) else prop.this.sql()
        out[key] = _value(prop.args["value"])
    return out


def _set_path(document: dict[str, Any], path: str, value: Any, node: exp.Expr) -> None:
    parts = path.split(".")
    if path == "pipeline.name":
        parts = ["name"]
    here = document
    for part in parts[:-1]:
        nested = here.setdefault(part, {})
        if not isinstance(nested, dict):
            raise SqlError(f"SET {path!r}: {part} is not a table of keys", node)
        here = nested
    if parts[-1] in here and here[parts[-1]] != value:
        raise SqlError(f"SET {path!r}: set twice, or also given by the query", node)
    here[parts[-1]] = value


class _Table:
    def __init__(self, create: exp.Create) -> None:
        schema = create.this
        self.node = create
        self.name = schema.this.name if isinstance(schema, exp.Schema) else schema.name
        self.with_ = _properties(create)
        self.columns: list[tuple[str, str]] = []
        self.watermark: tuple[str, int] | None = None
        for item in schema.expressions if isinstance(schema, exp.Schema) else []:
            if isinstance(item, exp.ColumnDef):
                self.columns.append((item.name, _spark_type(item.args["kind"])))
            elif isinstance(item, exp.WatermarkColumnConstraint):
                self.watermark = _watermark(item)
            else:
                raise SqlError(f"{clause(item)}: a table holds columns and a WATERMARK", item)


def _spark_type(kind: exp.DataType) -> str:
    """A column's type in Spark's DDL (the spec's ``schema``): Flink's TIMESTAMP(3) and
    TIMESTAMP_LTZ(3) are Spark's TIMESTAMP, VARCHAR(n) its STRING."""
    if kind.is_type(*exp.DataType.TEMPORAL_TYPES) and kind.this != exp.DataType.Type.DATE:
        return "TIMESTAMP"
    return kind.sql(dialect="spark")


def _watermark(item: exp.WatermarkColumnConstraint) -> tuple[str, int]:
    column, expression = item.this.name, item.expression
    if isinstance(expression, exp.Column) and expression.name == column:
        return column, 0
    if (
        isinstance(expression, exp.Sub)
        and isinstance(expression.this, exp.Column)
        and expression.this.name == column
    ):
        return column, duration_ms(expression.expression, zero=True)
    raise SqlError(
        f"WATERMARK FOR {column} AS {clause(expression)}: write {column} - INTERVAL 'n' UNIT "
        "(the most an event may come after a later one)",
        item,
    )


def _source(table: _Table) -> dict[str, Any]:
    source: dict[str, Any] = {"name": table.name}
    for key, value in table.with_.items():
        if key == "connector":
            if value != "kafka":
                raise SqlError(
                    f"CREATE TABLE {table.name}: 'connector' = {value!r}: a source is a Kafka "
                    "topic ('connector' = 'kafka', or leave it out)",
                    table.node,
                )
            continue
        key = _FLINK_KEYS.get(key, key)
        if key == "starting_offsets":
            value = _STARTUP_MODES.get(value, value)
        source[key] = value
    if table.columns:
        source["schema"] = ", ".join(f"{name} {kind}" for name, kind in table.columns)
    return source


def _target(table: _Table) -> dict[str, Any]:
    target = dict(table.with_)
    if "connector" in target:
        target["kind"] = target.pop("connector")
    return target


def read_pipeline(text: str, name: str, aggregators: Collection[str]) -> dict[str, Any]:
    """The TOML-shaped document the ``.sql`` file ``text`` is (``name``: the file's, for
    a pipeline with no ``SET 'pipeline.name'``)."""
    try:
        statements = [s for s in sqlglot.parse(text, read=FlowSQL) if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        raise SqlError(
            f"SQL syntax error: {first.get('description', e)} near "
            f"{first.get('highlight', '')!r} (line {first.get('line')}, column "
            f"{first.get('col')})"
        ) from None
    settings: dict[str, Any] = {}
    tables: dict[str, _Table] = {}
    inserts: list[exp.Insert] = []
    for statement in statements:
        if isinstance(statement, exp.Set):
            for item in statement.expressions:
                pair = item.this
                if not (isinstance(pair, exp.EQ) and isinstance(pair.this, exp.Literal)):
                    raise SqlError(f"{clause(item)}: write SET 'key' = 'value'", item)
                _set_path(settings, pair.this.name, _value(pair.expression), item)
        elif isinstance(statement, exp.Create) and statement.kind == "TABLE":
            table = _Table(statement)
            if table.name in tables:
                raise SqlError(f"CREATE TABLE {table.name}: declared twice", statement)
            tables[table.name] = table
        elif isinstance(statement, exp.Insert):
            inserts.append(statement)
        else:
            raise SqlError(
                f"{clause(statement)}: a pipeline file holds CREATE TABLE, SET and one "
                "INSERT INTO ... SELECT",
                statement,
            )
    if len(inserts) != 1:
        raise SqlError(
            "a pipeline file has one INSERT INTO target SELECT ...", inserts[1] if inserts else None
        )
    insert = inserts[0]
    target_name = insert.this.name if isinstance(insert.this, exp.Table) else insert.this.this.name
    if target_name not in tables:
        raise SqlError(f"INSERT INTO {target_name}: declare it with CREATE TABLE", insert.this)
    query = insert.expression
    if not is_windowed(query):
        raise SqlError(
            "INSERT INTO ... SELECT: the query must group by a window (window(...), "
            "session_window(...) or a TUMBLE / HOP / CUMULATE / SESSION table function)",
            query,
        )
    windowed = windowed_query(query, aggregators, text)
    source = tables.get(windowed.source)
    if source is None or windowed.source == target_name:
        raise SqlError(f"FROM {windowed.source}: declare it with CREATE TABLE", query.args["from_"])
    unread = [t for t in tables if t not in (target_name, windowed.source)]
    if unread:
        raise SqlError(f"CREATE TABLE {unread[0]}: declared but not read", tables[unread[0]].node)
    if source.watermark is None:
        raise SqlError(
            f"CREATE TABLE {source.name}: the window's time column {windowed.time_column} "
            f"needs a WATERMARK FOR {windowed.time_column} AS {windowed.time_column} - "
            "INTERVAL 'n' SECOND (n: how late an event may come)",
            source.node,
        )
    column, lateness = source.watermark
    if column != windowed.time_column:
        raise SqlError(
            f"the window's time column is {windowed.time_column}, the watermark's "
            f"{column}: they are one column",
            query,
        )
    window = ordered({**windowed.window, "lateness_ms": lateness})
    set_window = settings.get("transform", {}).get("window", {})
    try:
        windowed.with_options(window, set_window.pop("aggregations", None))
    except SqlError as e:
        raise e.locate(text) from None
    _check_target_columns(tables[target_name], window)
    document: dict[str, Any] = {"name": settings.pop("name", _pipeline_name(name))}
    document["sources"] = [_source(source)]
    transform: dict[str, Any] = {"sql": windowed.sql} if windowed.sql else {}
    transform["window"] = window
    for key, value, node in (
        ("transform", transform, query),
        ("target", _target(tables[target_name]), insert),
    ):
        document[key] = value
        _merge(document, key, settings.pop(key, {}), node)
    return {**document, **settings}


def _merge(document: dict[str, Any], key: str, value: dict[str, Any], node: exp.Expr) -> None:
    """``value`` under ``key``, beside what SET gave there."""
    given = document.get(key, {})
    for k, v in value.items():
        if isinstance(v, dict) and isinstance(given.get(k), dict):
            sub = {"_": given[k]}
            _merge(sub, "_", v, node)
            given[k] = sub["_"]
        elif k in given and given[k] != v:
            raise SqlError(f"SET '{key}.{k}': also given by the query; keep one", node)
        else:
            given[k] = v
    document[key] = given


def _check_target_columns(target: _Table, window: dict[str, Any]) -> None:
    if not target.columns:
        return
    expected = (
        [window.get(f"{b}_column", b) for b in BOUNDS]
        + window["group_by"]
        + [a["as"] for a in window["aggregations"]]
    )
    names = [name for name, _ in target.columns]
    if names != expected:
        raise SqlError(
            f"CREATE TABLE {target.name} ({', '.join(names)}): the query writes "
            f"({', '.join(expected)}); list those columns, in that order, or none",
            target.node,
        )


def _pipeline_name(stem: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", stem.lower()).strip("-") or "pipeline"
