"""The tables of a pipeline file: ``CREATE TABLE`` (a source or the target: its
columns, its ``WATERMARK``, its ``WITH``) and ``CREATE VIEW`` (a deduplication), as the
spec's keys."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from flow_jobs.sql.dialect import FlowSQL
from flow_jobs.sql.durations import duration_ms
from flow_jobs.sql.errors import SqlError, clause, start
from flow_jobs.sql.ranking import dedup, ranked

#: Flink's Kafka connector keys, as ours.
_FLINK_KEYS = {
    "properties.bootstrap.servers": "bootstrap_servers",
    "scan.startup.mode": "starting_offsets",
    "value.format": "format",
}
_STARTUP_MODES = {"earliest-offset": "earliest", "latest-offset": "latest"}


def value(node: exp.Expr) -> Any:
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
        out[key] = value(prop.args["value"])
    return out


class Table:
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


def source_keys(table: Table) -> dict[str, Any]:
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


def target_keys(table: Table) -> dict[str, Any]:
    target = dict(table.with_)
    if "connector" in target:
        target["kind"] = target.pop("connector")
    return target


@dataclass
class View:
    """``CREATE VIEW name AS`` a deduplication of ``source`` by ``keys``, ordered by
    ``order`` (the source's time column)."""

    name: str
    source: str
    keys: list[str]
    order: str
    node: exp.Expr


@dataclass
class PreStage:
    """``CREATE VIEW name AS`` any other SELECT: the pre-stage (``[transform].sql``,
    its text as written) a window reads; ``sources``: the tables it reads."""

    name: str
    sql: str
    sources: list[str]
    node: exp.Expr


def view(create: exp.Create, text: str) -> View | PreStage:
    name = create.this.name
    rank = ranked(create.expression)
    if rank is None:
        body = _body(create, text)
        tables = sorted({t.name for t in create.expression.find_all(exp.Table)})
        return PreStage(name, body, tables, create)
    source, keys = dedup(rank, None)
    return View(name, source, keys, rank.order[0].this.name, create)


def _body(create: exp.Create, text: str) -> str:
    """The view's SELECT as it stands in ``text``: the tokens after ``AS`` up to the
    statement's end."""
    begin = start(create.this)
    if begin is None:
        return create.expression.sql(dialect="spark")
    body, depth = None, 0
    end = len(text)
    for token in FlowSQL().tokenize(text):
        if token.start <= begin:
            continue
        if body is None:
            if token.token_type == TokenType.ALIAS:
                body = -1
            continue
        if body == -1:
            body = token.start
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif token.token_type == TokenType.SEMICOLON and depth == 0:
            end = token.start
            break
    if body is None or body == -1:
        return create.expression.sql(dialect="spark")
    return text[body:end].strip()
