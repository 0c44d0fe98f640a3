"""Joins written in SQL, as the keys they equal:

* an interval join, ``SELECT o.a, p.b AS c FROM orders AS o [LEFT|RIGHT|FULL] JOIN
  payments AS p ON o.k = p.k AND p.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts +
  INTERVAL '30' MINUTE``, is ``[transform.join]`` (``right time - left time`` within
  ``[lower_bound_ms, upper_bound_ms]``);
* an event-time temporal join, ``SELECT o.a, r.rate FROM orders AS o [LEFT] JOIN rates
  FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency``, is
  ``[transform.temporal_join]``;
* a window join (both sides a window function's rows) is ``[transform.window_join]``
  (``flow_jobs.sql.window_joins``).

The SELECT list is the output: the left (stream) side's columns first, each qualified
by its table; ``join_row_id`` follows, as with the keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from flow_jobs.sql.durations import duration_ms
from flow_jobs.sql.errors import SqlError, clause
from flow_jobs.sql.window_joins import is_window_join, window_join_query


@dataclass
class JoinQuery:
    """``stage`` (``join``, ``temporal_join`` or ``window_join``) and its keys;
    ``times``: each source's time column the query names (its watermark's)."""

    stage: str
    keys: dict[str, Any]
    times: dict[str, str] = field(default_factory=dict)


def is_join(select: exp.Expr) -> bool:
    if is_window_join(select):
        return True
    return isinstance(select, exp.Select) and bool(select.args.get("joins"))


def _side(table: exp.Expr) -> tuple[str, str]:
    """(source, the name the query calls it by)."""
    if not isinstance(table, exp.Table) or not table.name or table.args.get("db"):
        raise SqlError(f"{clause(table)}: a join reads two source tables", table)
    return table.name, table.alias_or_name


def _qualified(column: exp.Expr, names: dict[str, str]) -> tuple[str, str]:
    """(side, column) of ``t.column``; ``names``: the name each side goes by -> side."""
    if not isinstance(column, exp.Column) or column.table not in names:
        raise SqlError(
            f"{clause(column)}: name each column of a join by its table "
            f"({' or '.join(f'{n}.col' for n in names)})",
            column,
        )
    return names[column.table], column.name


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    return [condition]


def _time_point(node: exp.Expr, names: dict[str, str]) -> tuple[str, str, int]:
    """``t.ts [+|- INTERVAL ...]`` as (side, column, offset in ms)."""
    offset = 0
    if isinstance(node, (exp.Add, exp.Sub)):
        ms = duration_ms(node.expression, zero=True)
        offset = ms if isinstance(node, exp.Add) else -ms
        node = node.this
    side, column = _qualified(node, names)
    return side, column, offset


def _output(select: exp.Select, names: dict[str, str], sides: tuple[str, str]) -> dict[str, Any]:
    """``output_<side>_columns`` from the SELECT list: a list, or a table where a column
    is renamed."""
    chosen: dict[str, list[tuple[str, str]]] = {s: [] for s in sides}
    seen_second = False
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
            raise SqlError(
                f"{clause(item)}: name the output columns, each by its table (a join's "
                "rows carry the columns selected, then join_row_id)",
                item,
            )
        side, column = _qualified(node, names)
        if side == sides[1]:
            seen_second = True
        elif seen_second:
            raise SqlError(
                f"{clause(item)}: select the {sides[0]} side's columns first, then the "
                f"{sides[1]} side's (the output's order)",
                item,
            )
        chosen[side].append((column, item.alias_or_name))
    out: dict[str, Any] = {}
    for side, pairs in chosen.items():
        renamed = any(c != n for c, n in pairs)
        out[f"output_{side}_columns"] = dict(pairs) if renamed else [c for c, _ in pairs]
    return out


def _refuse(select: exp.Select) -> None:
    for key in ("where", "group", "having", "order", "limit", "qualify", "distinct", "with_"):
        node = select.args.get(key)
        if node:
            raise SqlError(
                f"{clause(node)}: a join's query has a SELECT list, FROM, one JOIN and ON; "
                "filter or aggregate its output downstream",
                node,
            )
    if len(select.args["joins"]) != 1:
        raise SqlError("a join query joins two sources: one JOIN", select.args["joins"][1])


def join_query(select: exp.Select) -> JoinQuery:
    """The keys the join ``select`` equals: a window join (its sides window functions),
    a temporal join (``FOR SYSTEM_TIME AS OF``), else an interval join."""
    if is_window_join(select):
        keys, times = window_join_query(select)
        return JoinQuery("window_join", keys, times)
    _refuse(select)
    join = select.args["joins"][0]
    left, left_name = _side(select.args["from_"].this)
    right_table = join.this
    right, right_name = _side(right_table)
    if left_name == right_name:
        raise SqlError(f"{clause(join)}: give the two sides different names", join)
    version = right_table.args.get("version")
    temporal = version is not None
    sides = ("stream", "version") if temporal else ("left", "right")
    names = {left_name: sides[0], right_name: sides[1]}
    kind = (join.args.get("kind") or "").upper()
    how = (join.args.get("side") or "").lower() or "inner"
    if kind in ("CROSS", "SEMI", "ANTI") or join.args.get("using"):
        raise SqlError(f"{clause(join)}: {kind or 'USING'}: join ON key equalities", join)
    on = join.args.get("on")
    if on is None:
        raise SqlError(f"{clause(join)}: join ON key equalities (and a time bound)", join)
    keys: dict[str, list[str]] = {s: [] for s in sides}
    bounds: list[exp.Expr] = []
    for condition in _conjuncts(on):
        if (
            isinstance(condition, exp.EQ)
            and isinstance(condition.this, exp.Column)
            and isinstance(condition.expression, exp.Column)
        ):
            a = _qualified(condition.this, names)
            b = _qualified(condition.expression, names)
            if a[0] == b[0]:
                raise SqlError(f"{clause(condition)}: a key pairs a column of each side", condition)
            for side, column in (a, b):
                keys[side].append(column)
        elif not temporal and isinstance(condition, (exp.Between, exp.GTE, exp.LTE)):
            bounds.append(condition)
        else:
            raise SqlError(
                f"{clause(condition)}: a join condition without a twin; ON takes key "
                "equalities (a.k = b.k)"
                + ("" if temporal else " and one time bound (b.ts BETWEEN a.ts - INTERVAL "
                   "... AND a.ts + INTERVAL ...)"),
                condition,
            )  # fmt: skip
    if temporal:
        return _temporal(select, version, left, right, how, keys, names, join)
    return _interval(select, left, right, how, keys, names, bounds, on)


def _temporal(
    select: exp.Select,
    version: exp.Expr,
    stream: str,
    versions: str,
    how: str,
    keys: dict[str, list[str]],
    names: dict[str, str],
    join: exp.Expr,
) -> JoinQuery:
    if version.name.upper() not in ("TIMESTAMP", "SYSTEM_TIME") or version.text("kind") != "AS OF":
        raise SqlError(f"{clause(version)}: FOR SYSTEM_TIME AS OF stream.time", version)
    side, column = _qualified(version.expression, names)
    if side != "stream":
        raise SqlError(
            f"AS OF {clause(version.expression)}: the stream's time column", version.expression
        )
    if how not in ("inner", "left"):
        raise SqlError(f"{clause(join)}: a temporal join is inner or LEFT", join)
    out: dict[str, Any] = {
        "stream_source": stream,
        "versions_source": versions,
        "stream_keys": keys["stream"],
        "version_keys": keys["version"],
        **({"how": how} if how != "inner" else {}),
        "stream_event_time_column": column,
        **_output(select, names, ("stream", "version")),
    }
    return JoinQuery("temporal_join", out, {stream: column})


def _interval(
    select: exp.Select,
    left: str,
    right: str,
    how: str,
    keys: dict[str, list[str]],
    names: dict[str, str],
    bounds: list[exp.Expr],
    on: exp.Expr,
) -> JoinQuery:
    if len(bounds) == 1 and isinstance(bounds[0], exp.Between):
        b = bounds[0]
        pairs = [(b.this, b.args["low"], "low"), (b.this, b.args["high"], "high")]
    elif len(bounds) == 2 and all(isinstance(b, (exp.GTE, exp.LTE)) for b in bounds):
        pairs = []
        for b in bounds:
            low = isinstance(b, exp.GTE)
            pairs.append((b.this, b.expression, "low" if low else "high"))
    else:
        raise SqlError(
            f"ON {clause(on)}: an interval join needs one time bound: b.ts BETWEEN a.ts - "
            "INTERVAL ... AND a.ts + INTERVAL ... (inclusive)",
            on,
        )
    limits: dict[str, int] = {}
    times: dict[str, str] = {}
    for subject, other, end in pairs:
        s_side, s_col, s_off = _time_point(subject, names)
        o_side, o_col, o_off = _time_point(other, names)
        if s_side == o_side or s_off:
            raise SqlError(
                f"{clause(subject)}: bound one side's time by the other's: b.ts BETWEEN "
                "a.ts - INTERVAL ... AND a.ts + INTERVAL ...",
                subject,
            )
        times[s_side], times[o_side] = s_col, o_col
        # subject - other within [o_off ...]: as right - left
        if s_side == "right":
            limits[end] = o_off
        else:  # left - right >= o_off  <=>  right - left <= -o_off
            limits["high" if end == "low" else "low"] = -o_off
    if limits.get("low", 0) > limits.get("high", 0) or len(limits) != 2:
        raise SqlError(f"ON {clause(on)}: the time bound's low end is above its high end", on)
    time_keys: dict[str, Any] = (
        {"event_time_column": times["left"]}
        if times["left"] == times["right"]
        else {"left_event_time_column": times["left"], "right_event_time_column": times["right"]}
    )
    out: dict[str, Any] = {
        "kind": "stream_stream_join",
        "left_source": left,
        "right_source": right,
        "left_keys": keys["left"],
        "right_keys": keys["right"],
        **({"how": how} if how != "inner" else {}),
        "lower_bound_ms": limits["low"],
        "upper_bound_ms": limits["high"],
        **time_keys,
        **_output(select, names, ("left", "right")),
    }
    return JoinQuery("join", out, {left: times["left"], right: times["right"]})
