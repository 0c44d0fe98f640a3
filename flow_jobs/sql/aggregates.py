"""A window's aggregates as SQL writes them, as ``[[transform.window.aggregations]]``
tables: ``count(*)``, ``sum(x)``, Spark's ``min_by(x, ts)`` and Flink's
``FIRST_VALUE(x)`` (first), ... and, by name, any aggregator a plug-in registered
(``variance(x)`` is ``agg = "variance"``)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlglot import exp

from flow_jobs.sql.errors import SqlError, clause

_ACCEPTED = (
    "count(*), count(col), count(DISTINCT col), approx_count_distinct(col), sum, min, "
    "max, avg, FIRST_VALUE(col) / min_by(col, time) FILTER (WHERE col IS NOT NULL), "
    "LAST_VALUE(col) / max_by(col, time) FILTER (WHERE col IS NOT NULL), "
    "collect_list(col) / ARRAY_AGG(col)"
)


def _column_argument(node: exp.Expr, call: exp.Expr) -> str:
    if isinstance(node, exp.Column):
        return node.name
    raise SqlError(
        f"{clause(call)}: aggregate a column; compute {clause(node)} in [transform].sql or "
        "a CREATE VIEW, under a name",
        node,
    )


def _positional(node: exp.Expr, time_column: str) -> dict[str, Any] | None:
    """first / last: the first / last non-NULL value in event time. Flink's
    ``FIRST_VALUE`` / ``LAST_VALUE`` skip NULLs (in arrival order); in Spark,
    ``min_by(x, ts) FILTER (WHERE x IS NOT NULL)`` and ``first(x, true)`` do."""
    inner = node.this if isinstance(node, (exp.IgnoreNulls, exp.Filter)) else node
    if isinstance(node, exp.Filter) and isinstance(inner, (exp.ArgMin, exp.ArgMax)):
        order, condition = inner.expression, node.expression.this
        column = inner.this
        if not (isinstance(order, exp.Column) and order.name == time_column):
            raise SqlError(
                f"{clause(node)}: min_by / max_by are first / last in event time: order by "
                f"the window's time column, {time_column}",
                node,
            )
        if not (
            isinstance(condition, exp.Not)
            and isinstance(condition.this, exp.Is)
            and condition.this.this == column
            and isinstance(condition.this.expression, exp.Null)
        ):
            raise SqlError(
                f"{clause(node)}: FILTER (WHERE {clause(column)} IS NOT NULL), only", node
            )
        first = isinstance(inner, exp.ArgMin)
    elif isinstance(inner, (exp.FirstValue, exp.LastValue)) or (
        isinstance(node, exp.IgnoreNulls) and isinstance(inner, (exp.First, exp.Last))
    ):
        column = inner.this
        first = isinstance(inner, (exp.FirstValue, exp.First))
    else:
        return None
    return {"agg": "first" if first else "last", "column": _column_argument(column, node)}


def aggregation(
    node: exp.Expr, alias: str | None, time_column: str, aggregators: Collection[str]
) -> dict[str, Any]:
    if alias is None:
        raise SqlError(f"{clause(node)}: name the aggregate, e.g. {clause(node)} AS total", node)
    positional = _positional(node, time_column)
    if positional is not None:
        return {**positional, "as": alias}
    if isinstance(node, exp.Filter):
        raise SqlError(f"{clause(node)}: FILTER has no twin; filter the rows in WHERE", node)
    out: dict[str, Any] = {}
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star) or (isinstance(arg, exp.Literal) and arg.name == "1"):
            out = {"agg": "count"}
        elif isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                raise SqlError(f"{clause(node)}: count distinct values of one column", node)
            out = {
                "agg": "count_distinct",
                "column": _column_argument(arg.expressions[0], node),
                "mode": "exact",
            }
        else:
            out = {"agg": "count", "column": _column_argument(arg, node)}
    elif isinstance(node, exp.ApproxDistinct) and not node.args.get("accuracy"):
        out = {"agg": "count_distinct", "column": _column_argument(node.this, node)}
    elif isinstance(node, (exp.ArgMin, exp.ArgMax, exp.First, exp.Last)):
        earliest = isinstance(node, (exp.ArgMin, exp.First))
        column = clause(node.this)
        better = (
            f"{'min_by' if earliest else 'max_by'}({column}, {time_column}) FILTER (WHERE "
            f"{column} IS NOT NULL)"
        )
        raise SqlError(
            f"{clause(node)} may be NULL (the {'earliest' if earliest else 'latest'} row's "
            f"value, NULL or not); flow-jobs' first / last skip NULLs in event time: write "
            f"{better}",
            node,
        )
    elif isinstance(node, exp.ArrayAgg):
        out = {"agg": "collect", "column": _column_argument(node.this, node)}
    elif isinstance(node, (exp.Sum, exp.Min, exp.Max, exp.Avg)) and not node.expressions:
        out = {"agg": node.sql_name().lower(), "column": _column_argument(node.this, node)}
    else:
        name = (
            node.name
            if isinstance(node, exp.Anonymous)
            else (node.sql_name() if isinstance(node, exp.Func) else "")
        )
        args = node.expressions if isinstance(node, exp.Anonymous) else [node.this]
        if name.lower() in aggregators and len(args) == 1 and not isinstance(node, exp.Count):
            out = {"agg": name.lower(), "column": _column_argument(args[0], node)}
        elif isinstance(node, exp.AggFunc) or name.lower() in aggregators:
            raise SqlError(
                f"{clause(node)}: no aggregator takes this; flow-jobs has {_ACCEPTED}", node
            )
        else:
            raise SqlError(
                f"{clause(node)}: select window bounds, group keys and aggregates; compute "
                "other values in [transform].sql or downstream",
                node,
            )
    return {**out, "as": alias}
