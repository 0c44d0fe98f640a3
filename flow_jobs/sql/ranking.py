"""Flink's ``ROW_NUMBER()`` patterns, as the keys they equal:

* window top-N: ``SELECT cols FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY
  window_start, window_end[, k] ORDER BY agg DESC) AS rownum FROM (<windowed query>))
  WHERE rownum <= N`` is ``[transform.window.top_n]``; with ``RANK()``, rows tied with
  the N-th are kept too (``with_ties``);
* deduplication: ``SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY
  ts ASC) AS rn FROM src) WHERE rn = 1`` (a ``CREATE VIEW``) is ``[[transform.dedup]]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from flow_jobs.sql.errors import SqlError, clause


@dataclass
class Ranked:
    """``SELECT outer FROM (SELECT *, ROW_NUMBER() OVER (...) AS alias FROM inner)
    WHERE alias <= n``."""

    outer: exp.Select
    inner: exp.Expr  # what the ranking subquery reads: a table or a subquery
    partition: list[exp.Expr]
    order: list[exp.Ordered]
    alias: str
    n: int
    node: exp.Expr  # the ROW_NUMBER() clause, for errors
    #: ``RANK()``: rows tied on the order count as one place
    with_ties: bool = False


def ranked(select: exp.Expr) -> Ranked | None:
    """``select`` as a ``ROW_NUMBER()`` pattern, or None if it is not one."""
    if not isinstance(select, exp.Select):
        return None
    source = select.args.get("from_")
    ranking = source.this if source is not None else None
    if not (isinstance(ranking, exp.Subquery) and isinstance(ranking.this, exp.Select)):
        return None
    rank = ranking.this
    numbered = [
        e for e in rank.expressions if isinstance(e, exp.Alias) and isinstance(e.this, exp.Window)
    ]
    if len(numbered) != 1 or not _numbering(numbered[0].this.this):
        return None
    window = numbered[0].this
    others = [e for e in rank.expressions if e is not numbered[0]]
    if not (len(others) == 1 and isinstance(others[0], exp.Star)):
        raise SqlError(
            f"{clause(rank)}: the ranking subquery selects *, ROW_NUMBER() OVER (...) AS "
            "rownum, nothing else",
            others[0] if others else rank,
        )
    if rank.args.get("where") or rank.args.get("group") or rank.args.get("joins"):
        raise SqlError(
            "the ranking subquery reads its input as it is: filter or group it inside", rank
        )
    alias = numbered[0].alias
    order = window.args.get("order")
    return Ranked(
        outer=select,
        inner=rank.args["from_"].this,
        partition=list(window.args.get("partition_by") or []),
        order=list(order.expressions) if order else [],
        alias=alias,
        n=_bound(select.args.get("where"), alias, select),
        node=window,
        with_ties=not isinstance(window.this, exp.RowNumber),
    )


def _numbering(function: exp.Expr) -> bool:
    """``ROW_NUMBER()``, or ``RANK()`` (places shared by ties)."""
    if isinstance(function, exp.RowNumber):
        return True
    return isinstance(function, exp.Rank) and not function.expressions


def _bound(where: exp.Where | None, alias: str, select: exp.Select) -> int:
    """N of ``WHERE alias <= N`` (or ``< N + 1``, ``= 1``)."""
    condition = where.this if where is not None else None
    if isinstance(condition, (exp.LTE, exp.LT, exp.EQ)):
        column, limit = condition.this, condition.expression
        if (
            isinstance(column, exp.Column)
            and column.name == alias
            and isinstance(limit, exp.Literal)
            and not limit.is_string
            and limit.name.isdigit()
        ):
            n = int(limit.name) - (1 if isinstance(condition, exp.LT) else 0)
            if isinstance(condition, exp.EQ) and n != 1:
                raise SqlError(f"WHERE {clause(condition)}: keep the first rows: <= N", condition)
            if n >= 1:
                return n
    raise SqlError(
        f"WHERE {clause(condition) if condition is not None else '(none)'}: a ROW_NUMBER() "
        f"pattern keeps the first rows: WHERE {alias} <= N (N >= 1), nothing else",
        condition if condition is not None else select,
    )


def top_n(rank: Ranked, bounds: tuple[str, str], outputs: list[str]) -> dict[str, object]:
    """``[transform.window.top_n]`` of a window top-N over a windowed query whose bounds
    are ``bounds`` and whose output columns are ``outputs``."""
    names = [c.name for c in rank.partition if isinstance(c, exp.Column)]
    if len(names) != len(rank.partition) or not set(bounds) <= set(names):
        raise SqlError(
            f"{clause(rank.node)}: a window top-N ranks the rows of each window: PARTITION BY "
            f"{', '.join(bounds)} (and keys)",
            rank.node,
        )
    if not rank.order:
        raise SqlError(f"{clause(rank.node)}: ORDER BY the aggregates to rank by", rank.node)
    order_by = []
    for ordered in rank.order:
        column = ordered.this
        if not isinstance(column, exp.Column):
            raise SqlError(f"ORDER BY {clause(column)}: rank by an aggregate's name", column)
        order_by.append(f"{column.name} {'DESC' if ordered.args.get('desc') else 'ASC'}")
    selected = rank.outer.expressions
    if len(selected) == 1 and isinstance(selected[0], exp.Star):
        raise SqlError(
            f"SELECT *: the rows written carry no {rank.alias}; select the windowed query's "
            f"columns ({', '.join(outputs)})",
            selected[0],
        )
    listed = [e.alias_or_name for e in selected]
    plain = all(isinstance(e, exp.Column) for e in selected)
    if listed != outputs or not plain:
        raise SqlError(
            f"SELECT {', '.join(listed)}: a top-N writes the windowed query's columns as "
            f"they are, in order ({', '.join(outputs)})",
            selected[0],
        )
    partition_by = [n for n in names if n not in bounds]
    out: dict[str, object] = {"n": rank.n, "order_by": order_by}
    if partition_by:
        out["partition_by"] = partition_by
    if rank.with_ties:
        out["with_ties"] = True
    return out


def dedup(rank: Ranked, time_column: str | None) -> tuple[str, list[str]]:
    """The source and keys of a deduplication: the first row per key in event time."""
    if not isinstance(rank.inner, exp.Table) or not rank.inner.name:
        raise SqlError("a deduplication reads one source table", rank.inner)
    keys = [c.name for c in rank.partition if isinstance(c, exp.Column)]
    if not keys or len(keys) != len(rank.partition):
        raise SqlError(f"{clause(rank.node)}: PARTITION BY the key columns", rank.node)
    first = rank.order[0] if len(rank.order) == 1 else None
    if (
        first is None
        or not isinstance(first.this, exp.Column)
        or first.args.get("desc")
        or (time_column is not None and first.this.name != time_column)
    ):
        raise SqlError(
            f"{clause(rank.node)}: flow-jobs keeps each key's first row in event time: ORDER "
            f"BY {time_column or 'the time column'} ASC (keeping the last row would retract "
            "rows already written)",
            rank.node,
        )
    if rank.n != 1:
        raise SqlError(f"WHERE {rank.alias} <= {rank.n}: a deduplication keeps = 1", rank.outer)
    if rank.with_ties:
        raise SqlError(
            f"{clause(rank.node)}: a deduplication keeps one row per key: ROW_NUMBER()",
            rank.node,
        )
    selected = rank.outer.expressions
    if not (len(selected) == 1 and isinstance(selected[0], exp.Star)):
        raise SqlError("a deduplication view selects *", selected[0])
    return rank.inner.name, keys
