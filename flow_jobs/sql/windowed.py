"""A windowed aggregation written in SQL, as the ``[transform.window]`` keys it equals.

Two spellings of one query:

* Spark's: ``SELECT window.start AS window_start, window.end AS window_end, k,
  count(*) AS n FROM src [WHERE ...] GROUP BY window(ts, '1 minute'[, '10 seconds']), k``
  (``session_window(ts, '5 minutes')`` for sessions);
* Flink's window table-valued functions: ``SELECT window_start, window_end, k,
  COUNT(*) AS n FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
  [WHERE ...] GROUP BY window_start, window_end, k`` (``HOP``, ``CUMULATE``, ``SESSION``
  with ``PARTITION BY``).

The query's WHERE becomes the pre-stage (``[transform].sql = SELECT * FROM src WHERE
...``), so the reader still folds behind it. Whatever has no twin among the keys is
refused, naming the clause and what to write instead (docs/spec-reference.md, "SQL").
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from flow_jobs.sql.aggregates import aggregation
from flow_jobs.sql.dialect import FlowSQL, WindowTVF
from flow_jobs.sql.errors import SqlError, clause, start
from flow_jobs.sql.ranking import Ranked, ranked, top_n
from flow_jobs.sql.window_functions import (
    BOUNDS,
    WindowedQuery,
    flink_window,
    spark_window,
    spark_window_call,
)
from flow_jobs.sql.window_joins import is_window_join

#: The order a window's keys are written in (the rest follow as given).
KEY_ORDER = (
    "kind",
    "duration_ms",
    "hop_ms",
    "step_ms",
    "max_duration_ms",
    "gap_ms",
    "event_time_column",
    "lateness_ms",
    "window_start_column",
    "window_end_column",
    "group_by",
)


def ordered(window: dict[str, Any]) -> dict[str, Any]:
    """``window``'s keys in the order a person writes them: the kind and size first."""
    first = {k: window[k] for k in KEY_ORDER if k in window}
    return {**first, **{k: v for k, v in window.items() if k not in first}}


def is_windowed(select: exp.Expr) -> bool:
    """Whether ``select`` groups by a window (either spelling): the query a window
    stage takes; any other SELECT stays a pre-stage."""
    if not isinstance(select, exp.Select) or is_window_join(select):
        return False
    rank = _ranked_window(select)
    if rank is not None:
        return True
    if select.find(WindowTVF) is not None:
        return True
    group = select.args.get("group")
    return bool(group) and any(spark_window_call(e) for e in group.expressions)


def _ranked_window(select: exp.Select) -> Ranked | None:
    """``select`` as a window top-N: a ROW_NUMBER() pattern over a windowed query (one
    that reads a windowed query but breaks the pattern is refused, naming how)."""
    outer = select.args.get("from_")
    ranking = outer.this if outer is not None else None
    inner = ranking.this.args.get("from_") if isinstance(ranking, exp.Subquery) else None
    if not (
        inner is not None and isinstance(inner.this, exp.Subquery) and is_windowed(inner.this.this)
    ):
        return None
    rank = ranked(select)
    if rank is None:
        raise SqlError(
            "a query over a windowed query is a window top-N: SELECT cols FROM (SELECT *, "
            "ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY ...) AS "
            "rownum FROM (...)) WHERE rownum <= N",
            select,
        )
    return rank


def windowed_query(
    select: exp.Select, aggregators: Collection[str], text: str | None = None
) -> WindowedQuery:
    """The keys ``select`` (a windowed aggregation) equals; ``aggregators``: the names
    ``agg`` takes (plug-ins among them: ``variance(x)`` is ``agg = "variance"``);
    ``text``: what ``select`` was parsed from, so the pre-stage keeps the WHERE as the
    user wrote it."""
    rank = _ranked_window(select)
    if rank is not None:  # a window top-N around the windowed query
        assert isinstance(rank.inner, exp.Subquery)
        query = windowed_query(rank.inner.this, aggregators, text)
        w = query.window
        bounds = (w.get("window_start_column", BOUNDS[0]), w.get("window_end_column", BOUNDS[1]))
        outputs = [*bounds, *w["group_by"], *(a["as"] for a in w["aggregations"])]
        w["top_n"] = top_n(rank, bounds, outputs)
        return query
    _refuse_clauses(select)
    source_node = select.args["from_"].this
    tvf = next(iter(source_node.find_all(WindowTVF)), None)
    group = select.args.get("group")
    if group is None:
        raise SqlError("a windowed query needs GROUP BY", select)
    if tvf is not None:
        query, keys = flink_window(tvf, group.expressions)
        bounds = {"window_start": "window_start", "window_end": "window_end"}
    else:
        query, keys = spark_window(source_node, group.expressions)
        name = query.window.pop("_struct")
        bounds = {f"{name}.start": "window_start", f"{name}.end": "window_end"}
    where = select.args.get("where")
    if where is not None:
        for column in where.find_all(exp.Column):
            if column.sql(dialect="spark") in bounds or column.name in BOUNDS:
                raise SqlError(
                    f"WHERE {clause(where.this)}: the WHERE runs on the events before they "
                    "are windowed, so it cannot read a window's bounds",
                    column,
                )
        condition = written_where(select, text) or where.this.sql(dialect="spark")
        query.sql = f"SELECT * FROM {query.source} WHERE {condition}"
    _select_list(select, query, keys, bounds, aggregators)
    return query


def written_where(select: exp.Select, text: str | None) -> str | None:
    """``select``'s WHERE condition as it stands in ``text``: its tokens up to the next
    clause at the same depth (None without the text)."""
    begin = start(select)
    if text is None or begin is None:
        return None
    ends = {
        TokenType.GROUP_BY,
        TokenType.HAVING,
        TokenType.ORDER_BY,
        TokenType.LIMIT,
        TokenType.QUALIFY,
        TokenType.SEMICOLON,
    }
    depth, first, last = 0, None, None
    for token in FlowSQL().tokenize(text):
        if token.start < begin:
            continue
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
            if depth < 0:
                break
        if depth == 0 and first is None and token.token_type == TokenType.WHERE:
            first = token
            continue
        if first is not None and depth == 0 and token.token_type in ends:
            break
        if first is not None:
            last = token
    if first is None or last is None:
        return None
    return text[first.end + 1 : last.end + 1].strip()


def _refuse_clauses(select: exp.Select) -> None:
    refusals = {
        "joins": "a join and a window in one query: write the join as [transform.join] "
        'with chain = ["join", "window"]',
        "having": "HAVING: the window writes every group; filter its rows downstream",
        "order": "ORDER BY outside a top-N pattern: a window's rows have no order; rank "
        "them with ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY ...) "
        "<= N",
        "limit": "LIMIT: a stream has no end to count to; for the top rows of each window "
        "use ROW_NUMBER() ... <= N",
        "qualify": "QUALIFY: write the top-N pattern as a subquery with WHERE rownum <= N",
        "with_": "WITH: write each common table as a CREATE VIEW, or inline it",
        "distinct": "SELECT DISTINCT: group by the columns instead",
    }
    for key, why in refusals.items():
        node = select.args.get(key)
        if node:
            raise SqlError(why, node[0] if isinstance(node, list) else node)
    source = select.args.get("from_")
    if source is None:
        raise SqlError("a windowed query reads one source: add FROM", select)
    if isinstance(source.this, exp.Subquery):
        raise SqlError(
            "FROM a subquery: a window reads a source table (its WHERE becomes the "
            "pre-stage); put other SQL in [transform].sql",
            source.this,
        )


def _select_list(
    select: exp.Select,
    query: WindowedQuery,
    keys: list[str],
    bounds: dict[str, str],
    aggregators: Collection[str],
) -> None:
    window = query.window
    seen_keys: list[str] = []
    seen_bounds: dict[str, str] = {}
    aggregations: list[dict[str, Any]] = []
    for item in select.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star):
            raise SqlError(
                "SELECT *: name the columns (window_start, window_end, the keys and the "
                "aggregates)",
                node,
            )
        if isinstance(node, exp.Column):
            text = node.sql(dialect="spark")
            if text in bounds:
                bound = bounds[text]
                name = alias or (bound if text == bound else None)
                if name is None:
                    raise SqlError(f"{text}: name it, e.g. {text} AS {bound}", node)
                seen_bounds[bound] = name
                continue
            if node.name in keys:
                if alias and alias != node.name:
                    raise SqlError(
                        f"{clause(item)}: a group key keeps its name in the output", item
                    )
                seen_keys.append(node.name)
                continue
            raise SqlError(
                f"{text} is neither grouped nor aggregated: add it to GROUP BY or aggregate it",
                node,
            )
        aggregations.append(aggregation(node, alias, query.time_column, aggregators))
        query.clauses[aggregations[-1]["as"]] = node
    missing = [b for b in BOUNDS if b not in seen_bounds]
    if missing:
        spark = next(iter(bounds)).split(".")[0] if "." in next(iter(bounds)) else None
        hint = f"{spark}.{missing[0][7:]} AS {missing[0]}" if spark else missing[0]
        raise SqlError(f"select {hint}: a window's rows carry both its bounds", select)
    unselected = [k for k in keys if k not in seen_keys]
    if unselected:
        raise SqlError(
            f"{unselected[0]} is grouped but not selected: a window's rows carry every key",
            select.args["group"],
        )
    for bound, name in seen_bounds.items():
        if name != bound:
            window[f"{bound}_column"] = name
    window["group_by"] = seen_keys
    if not aggregations:
        raise SqlError("a windowed query needs at least one aggregate", select)
    window["aggregations"] = aggregations
