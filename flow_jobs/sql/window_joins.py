"""Flink SQL's window join, as ``[transform.window_join]``'s keys.

Each side is a window table-valued function over a source, ``(SELECT * FROM
TABLE(TUMBLE(TABLE persons, DESCRIPTOR(ts), INTERVAL '10' SECOND))) AS p`` (or ``HOP``,
``CUMULATE``), both the same windows:

* ``SELECT p.window_start, p.window_end, p.id, a.id AS auction FROM <side> p [LEFT |
  RIGHT | FULL] JOIN <side> a ON p.id = a.seller AND p.window_start = a.window_start AND
  p.window_end = a.window_end`` is an inner (outer) window join; an outer join's bounds
  may be written ``COALESCE(p.window_start, a.window_start)``;
* ``SELECT p.window_start, p.window_end, p.id FROM <side> p WHERE [NOT] EXISTS (SELECT *
  FROM <side> a WHERE p.id = a.seller AND <the same bounds>)`` is a semi (anti) window
  join, and so is ``WHERE p.id IN (SELECT a.seller FROM <side> a WHERE <the same
  bounds>)``; ``NOT IN`` is refused (a NULL among the right keys makes it filter every
  row: use ``NOT EXISTS``).

The SELECT list is the output: the window's bounds first, then the left side's columns,
then the right side's, each qualified by its table; ``join_row_id`` follows.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from flow_jobs.sql.dialect import WindowTVF
from flow_jobs.sql.errors import SqlError, clause
from flow_jobs.sql.window_functions import BOUNDS, flink_window

_SIZES = ("duration_ms", "hop_ms", "step_ms", "max_duration_ms")


def _tvf(node: exp.Expr) -> WindowTVF | None:
    """The window function a subquery reads directly (``FROM TABLE(TUMBLE(...))``)."""
    if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
        return None
    source = node.this.args.get("from_")
    if source is None or not isinstance(source.this, exp.Table):
        return None
    return source.this.find(WindowTVF)


def is_window_join(select: exp.Expr) -> bool:
    """Whether ``select`` reads a window table-valued function in a subquery: the form
    a window join's sides take."""
    if not isinstance(select, exp.Select) or select.args.get("group"):
        return False
    source = select.args.get("from_")
    return source is not None and _tvf(source.this) is not None


def _side(node: exp.Expr) -> tuple[str, str, dict[str, Any]]:
    """(source, the name the query calls it by, its window's keys)."""
    tvf = _tvf(node)
    if tvf is None:
        raise SqlError(
            f"{clause(node)}: a window join's side is (SELECT * FROM TABLE(TUMBLE(TABLE "
            "source, DESCRIPTOR(time), INTERVAL ...))) AS name",
            node,
        )
    inner = node.this
    star = len(inner.expressions) == 1 and isinstance(inner.expressions[0], exp.Star)
    extra = [k for k in ("where", "group", "joins", "having", "order") if inner.args.get(k)]
    if not star or extra:
        raise SqlError(
            f"{clause(inner)}: a window join's side selects * of its window function, nothing else",
            inner,
        )
    if tvf.name.upper() == "SESSION":
        raise SqlError(
            f"{clause(tvf)}: a window join joins windows both sides share (TUMBLE, HOP or "
            "CUMULATE); sessions are each key's own",
            tvf,
        )
    bounds = [exp.column(b) for b in BOUNDS]
    query, _ = flink_window(tvf, bounds)  # type: ignore[arg-type]
    name = node.alias_or_name
    if not name:
        raise SqlError(f"{clause(node)}: name each side (... ) AS name", node)
    return query.source, name, query.window


def _conjuncts(condition: exp.Expr) -> list[exp.Expr]:
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    return [condition]


def _qualified(column: exp.Expr, names: dict[str, str]) -> tuple[str, str]:
    if not isinstance(column, exp.Column) or column.table not in names:
        raise SqlError(
            f"{clause(column)}: name each column of a window join by its table "
            f"({' or '.join(f'{n}.col' for n in names)})",
            column,
        )
    return names[column.table], column.name


def _condition(condition: exp.Expr, names: dict[str, str], keys: dict[str, list[str]]) -> set[str]:
    """The key pairs of ``condition`` into ``keys``; returns the window bounds it equates."""
    equated: set[str] = set()
    for part in _conjuncts(condition):
        if not (
            isinstance(part, exp.EQ)
            and isinstance(part.this, exp.Column)
            and isinstance(part.expression, exp.Column)
        ):
            raise SqlError(
                f"{clause(part)}: a window join's condition has key equalities (a.k = b.k) "
                "and the windows' (a.window_start = b.window_start AND a.window_end = "
                "b.window_end)",
                part,
            )
        a, b = _qualified(part.this, names), _qualified(part.expression, names)
        if a[0] == b[0]:
            raise SqlError(f"{clause(part)}: a key pairs a column of each side", part)
        if a[1] in BOUNDS or b[1] in BOUNDS:
            if a[1] != b[1]:
                raise SqlError(f"{clause(part)}: equate a bound with the same bound", part)
            equated.add(a[1])
            continue
        for side, column in (a, b):
            keys[side].append(column)
    return equated


def _bound(node: exp.Expr, names: dict[str, str]) -> str | None:
    """The bound a SELECT item is (``p.window_start``, ``COALESCE(p.window_start,
    a.window_start)``), or None."""
    if isinstance(node, exp.Coalesce):
        parts = [node.this, *node.expressions]
        bounds = {_qualified(p, names)[1] for p in parts}
        if len(bounds) == 1 and bounds <= set(BOUNDS) and len(parts) == 2:
            return bounds.pop()
        raise SqlError(f"{clause(node)}: COALESCE(a.window_start, b.window_start)", node)
    if isinstance(node, exp.Column) and node.name in BOUNDS:
        _qualified(node, names)
        return node.name
    return None


def _output(select: exp.Select, names: dict[str, str], sides: tuple[str, ...]) -> dict[str, Any]:
    chosen: dict[str, list[tuple[str, str]]] = {s: [] for s in sides}
    out: dict[str, Any] = {}
    order = ["bounds", *sides]
    place = 0
    for item in select.expressions:
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
            raise SqlError(
                f"{clause(item)}: name the output columns: the window's bounds, then each "
                "side's columns by its table",
                item,
            )
        bound = _bound(node, names)
        part = "bounds" if bound else _qualified(node, names)[0]
        if part not in order:
            raise SqlError(
                f"{clause(item)}: a semi or anti join writes the left side's columns only",
                item,
            )
        if order.index(part) < place:
            raise SqlError(
                f"{clause(item)}: select the window's bounds first, then the left side's "
                "columns, then the right side's (the output's order)",
                item,
            )
        place = order.index(part)
        if bound is not None:
            key = f"{bound}_column"
            if key in out:
                raise SqlError(f"{clause(item)}: {bound} is selected twice", item)
            if item.alias_or_name != bound:
                out[key] = item.alias_or_name
            else:
                out[key] = bound
            continue
        chosen[part].append((_qualified(node, names)[1], item.alias_or_name))
    for bound in BOUNDS:
        if f"{bound}_column" not in out:
            raise SqlError(
                f"SELECT: a window join writes the window's bounds; select {bound} first "
                "(a.window_start, a.window_end)",
                select,
            )
        if out[f"{bound}_column"] == bound:
            del out[f"{bound}_column"]
    for side, pairs in chosen.items():
        if not pairs:
            raise SqlError(f"SELECT: select at least one column of the {side} side", select)
        renamed = any(c != n for c, n in pairs)
        out[f"output_{side}_columns"] = dict(pairs) if renamed else [c for c, _ in pairs]
    return out


def window_join_query(select: exp.Select) -> tuple[dict[str, Any], dict[str, str]]:
    """The keys ``select`` equals, and the time column it reads of each source."""
    for key in ("group", "having", "order", "limit", "qualify", "distinct", "with_"):
        if select.args.get(key):
            raise SqlError(
                f"{clause(select.args[key])}: a window join's query has a SELECT list, FROM, "
                "and a JOIN ... ON or a WHERE [NOT] EXISTS; aggregate its output downstream",
                select.args[key],
            )
    left, left_name, window = _side(select.args["from_"].this)
    joins = select.args.get("joins") or []
    where = select.args.get("where")
    keys: dict[str, list[str]] = {"left": [], "right": []}
    if joins:
        if len(joins) != 1 or where is not None:
            node = joins[1] if len(joins) > 1 else where
            raise SqlError(f"{clause(node)}: a window join joins two sides: one JOIN", node)
        join = joins[0]
        right, right_name, right_window = _side(join.this)
        kind = (join.args.get("kind") or "").upper()
        if kind in ("CROSS", "SEMI", "ANTI") or join.args.get("using"):
            raise SqlError(f"{clause(join)}: {kind or 'USING'}: join ON key equalities", join)
        how = (join.args.get("side") or "").lower() or "inner"
        condition = join.args.get("on")
        if condition is None:
            raise SqlError(f"{clause(join)}: join ON key equalities and the windows'", join)
        names = {left_name: "left", right_name: "right"}
        sides: tuple[str, ...] = ("left", "right")
    else:
        how, right, right_name, right_window, condition = _filtered(where, select)
        names = {left_name: "left", right_name: "right"}
        sides = ("left",)
        if isinstance(condition, tuple):  # IN: the key pair, then the bounds' condition
            (outer, inner), condition = condition
            keys["left"].append(_qualified(outer, names)[1])
            keys["right"].append(_qualified(inner, names)[1])
    if left_name == right_name:
        raise SqlError("give the two sides different names", select)
    equated = _condition(condition, names, keys)
    if equated != set(BOUNDS):
        missing = " AND ".join(
            f"{left_name}.{b} = {right_name}.{b}" for b in BOUNDS if b not in equated
        )
        raise SqlError(f"the window join also needs {missing}: both sides' same window", select)
    if not keys["left"]:
        raise SqlError("a window join pairs keys: add l.k = r.k (a window join is not a "
                       "cross join)", select)  # fmt: skip
    times = {left: window["event_time_column"], right: right_window["event_time_column"]}
    sizes = {k: window[k] for k in ("kind", *_SIZES) if k in window}
    if sizes != {k: right_window[k] for k in ("kind", *_SIZES) if k in right_window}:
        raise SqlError(
            "the two sides' windows differ: a window join joins the same windows", select
        )
    time_keys: dict[str, Any] = (
        {"event_time_column": times[left]}
        if times[left] == times[right]
        else {"left_event_time_column": times[left], "right_event_time_column": times[right]}
    )
    out: dict[str, Any] = {
        "left_source": left,
        "right_source": right,
        "left_keys": keys["left"],
        "right_keys": keys["right"],
        **({"how": how} if how != "inner" else {}),
        **sizes,
        **time_keys,
        **_output(select, names, sides),
    }
    return out, times


def _filtered(
    where: exp.Where | None, select: exp.Select
) -> tuple[str, str, str, dict[str, Any], Any]:
    """A semi or anti join's WHERE: (how, right source, its name, its window, the
    condition; for ``IN``, ((outer key, inner key), the condition))."""
    condition = where.this if where is not None else None
    negated = isinstance(condition, exp.Not)
    test = condition.this if negated else condition
    if isinstance(test, exp.Exists) and isinstance(test.this, exp.Select):
        inner = test.this
        right, right_name, window = _side(inner.args["from_"].this)
        if inner.args.get("where") is None:
            raise SqlError(f"{clause(inner)}: WHERE the keys and the windows are equal", inner)
        return ("anti" if negated else "semi"), right, right_name, window, inner.args["where"].this
    if isinstance(test, exp.In) and isinstance(test.args.get("query"), exp.Subquery):
        if negated:
            raise SqlError(
                f"{clause(condition)}: NOT IN filters every row once a right key is NULL; "
                "write the anti join as NOT EXISTS (SELECT * FROM ... WHERE l.k = r.k AND "
                "the windows' bounds equal)",
                condition,
            )
        inner = test.args["query"].this
        if len(inner.expressions) != 1 or inner.args.get("where") is None:
            raise SqlError(
                f"{clause(inner)}: SELECT r.k FROM <side> r WHERE the windows' bounds equal",
                inner,
            )
        right, right_name, window = _side(inner.args["from_"].this)
        pair = (test.this, inner.expressions[0])
        return "semi", right, right_name, window, (pair, inner.args["where"].this)
    raise SqlError(
        "a query over a window function's rows is a window join: JOIN the other side ON the "
        "keys and the windows' bounds, or WHERE [NOT] EXISTS (SELECT * FROM <side> WHERE ...)",
        condition if condition is not None else select,
    )
