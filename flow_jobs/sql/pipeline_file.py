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
* ``CREATE VIEW v AS`` a ``ROW_NUMBER() ... = 1`` deduplication of a source: the query
  reads the source, deduplicated (``[[transform.dedup]]``; its ``within_ms`` is asked
  for: ``SET 'transform.dedup.v.within_ms' = '...'``).
* ``SET 'key' = 'value'``: any other key by its dotted TOML path
  (``SET 'transform.window.emit' = 'current'``); ``pipeline.name`` (Flink's) is ``name``.
  Without one, the name is the file's.
* One ``INSERT INTO target SELECT ...``: a windowed query (a window top-N around one
  among them), an interval join or a temporal join.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError
from sqlglot.tokens import TokenType

from flow_jobs.sql.dialect import FlowSQL
from flow_jobs.sql.errors import SqlError, clause, start
from flow_jobs.sql.joins import is_join, join_query
from flow_jobs.sql.tables import PreStage, Table, View, source_keys, target_keys, value, view
from flow_jobs.sql.window_functions import BOUNDS
from flow_jobs.sql.windowed import is_windowed, ordered, windowed_query


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


def _statements(text: str) -> list[exp.Expr]:
    try:
        return [s for s in sqlglot.parse(text, read=FlowSQL) if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        raise SqlError(
            f"SQL syntax error: {first.get('description', e)} near "
            f"{first.get('highlight', '')!r} (line {first.get('line')}, column "
            f"{first.get('col')})"
        ) from None


def read_pipeline(text: str, name: str, aggregators: Collection[str]) -> dict[str, Any]:
    """The TOML-shaped document the ``.sql`` file ``text`` is (``name``: the file's, for
    a pipeline with no ``SET 'pipeline.name'``)."""
    settings: dict[str, Any] = {}
    tables: dict[str, Table] = {}
    views: dict[str, View | PreStage] = {}
    inserts: list[exp.Insert] = []
    for statement in _statements(text):
        if isinstance(statement, exp.Set):
            for item in statement.expressions:
                pair = item.this
                if not (isinstance(pair, exp.EQ) and isinstance(pair.this, exp.Literal)):
                    raise SqlError(f"{clause(item)}: write SET 'key' = 'value'", item)
                _set_path(settings, pair.this.name, value(pair.expression), item)
        elif isinstance(statement, exp.Create) and statement.kind in ("TABLE", "VIEW"):
            made: Table | View | PreStage = (
                Table(statement) if statement.kind == "TABLE" else view(statement, text)
            )
            if made.name in tables or made.name in views:
                raise SqlError(f"CREATE {statement.kind} {made.name}: declared twice", statement)
            if isinstance(made, Table):
                tables[made.name] = made
            else:
                views[made.name] = made
        elif isinstance(statement, exp.Insert):
            inserts.append(statement)
        else:
            raise SqlError(
                f"{clause(statement)}: a pipeline file holds CREATE TABLE, CREATE VIEW, SET "
                "and one INSERT INTO ... SELECT",
                statement,
            )
    if len(inserts) != 1:
        raise SqlError(
            "a pipeline file has one INSERT INTO target SELECT ...", inserts[1] if inserts else None
        )
    insert = inserts[0]
    target_name = insert.this.name if isinstance(insert.this, exp.Table) else insert.this.this.name
    target = tables.pop(target_name, None)
    if target is None:
        raise SqlError(f"INSERT INTO {target_name}: declare it with CREATE TABLE", insert.this)
    query = insert.expression
    used = _read_views(query, {k: v for k, v in views.items() if isinstance(v, View)})
    prestages = {k: v for k, v in views.items() if isinstance(v, PreStage)}
    transform, reads, outputs = _transform(query, aggregators, text, settings, prestages)
    stages = ("window", "join", "temporal_join", "window_join", "append")
    stage = next(k for k in stages if k in transform)
    if stage == "temporal_join":
        reads.update(_version_time(transform[stage], tables))
    if stage == "append":  # no time is read: none is late, a WATERMARK is not needed
        for source in reads:
            if source not in tables:
                raise SqlError(f"{source}: declare it with CREATE TABLE", query)
    else:
        transform[stage]["lateness_ms"] = _watermarks(reads, tables, query)
    if stage == "window":
        transform["window"] = ordered(transform["window"])
    dedup = _dedup(used, reads, settings)
    if dedup:
        transform["dedup"] = dedup
    _check_target_columns(target, outputs, stage)
    unread = [t for t in tables if t not in reads]
    if unread:
        raise SqlError(f"CREATE TABLE {unread[0]}: declared but not read", tables[unread[0]].node)
    document: dict[str, Any] = {"name": settings.pop("name", _pipeline_name(name))}
    document["sources"] = [source_keys(tables[s]) for s in tables]
    for key, keys, node in (
        ("transform", transform, query),
        ("target", target_keys(target), insert),
    ):
        document[key] = keys
        _merge(document, key, settings.pop(key, {}), node)
    return {**document, **settings}


def _transform(
    query: exp.Expr,
    aggregators: Collection[str],
    text: str,
    settings: dict[str, Any],
    prestages: dict[str, PreStage],
) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """``[transform]``'s keys, the time column read of each source, the output columns."""
    if is_windowed(query):
        windowed = windowed_query(query, aggregators, text)
        reads = {windowed.source: windowed.time_column}
        prestage = prestages.pop(windowed.source, None)
        if prestage is not None:
            if windowed.sql:
                raise SqlError(
                    f"the query reads the view {prestage.name} and filters it: put the "
                    f"WHERE in the view (it is the pre-stage, [transform].sql)",
                    query.args["where"],
                )
            nested = [t for t in prestage.sources if t in prestages]
            if nested:
                raise SqlError(f"CREATE VIEW {prestage.name}: a view over a view", prestage.node)
            windowed.sql = prestage.sql
            reads = {source: windowed.time_column for source in prestage.sources}
        given = settings.get("transform", {}).get("window", {})
        try:
            window = windowed.with_options(windowed.window, given.pop("aggregations", None))
        except SqlError as e:
            raise e.locate(text) from None
        transform = {"sql": windowed.sql} if windowed.sql else {}
        transform["window"] = window
        outputs = [
            window.get("window_start_column", "window_start"),
            window.get("window_end_column", "window_end"),
            *window["group_by"],
            *(a["as"] for a in window["aggregations"]),
        ]
        _unread(prestages)
        return transform, reads, outputs
    if is_join(query):
        _unread(prestages)
        joined = join_query(query)
        keys = joined.keys
        outputs = []
        if joined.stage == "window_join":
            outputs += [keys.get(f"{b}_column", b) for b in BOUNDS]
        for side in ("left", "right", "stream", "version"):
            chosen = keys.get(f"output_{side}_columns", [])
            outputs += list(chosen.values()) if isinstance(chosen, dict) else chosen
        return {joined.stage: keys}, joined.times, [*outputs, "join_row_id"]
    appended = _appended(query, text)
    if appended is not None:
        _unread(prestages)
        return appended
    raise SqlError(
        "INSERT INTO ... SELECT: the query groups by a window (window(...), "
        "session_window(...) or a TUMBLE / HOP / CUMULATE / SESSION table function), "
        "joins two sources (an interval, temporal or window join), or selects from one "
        "source without GROUP BY (each row appended: [transform.append])",
        query,
    )


def _appended(
    query: exp.Expr, text: str
) -> tuple[dict[str, Any], dict[str, str], list[str]] | None:
    """A SELECT from one table with no GROUP BY, join or union: ``[transform.append]``
    over that source, the query (as written) its ``[transform].sql``; ``SELECT * FROM
    source`` has no SQL."""
    if not isinstance(query, exp.Select) or query.args.get("group") or query.args.get("joins"):
        return None
    source = query.args.get("from_")
    table = source.this if source is not None else None
    if (
        not isinstance(table, exp.Table)
        or not table.name
        or not isinstance(table.this, exp.Identifier)
    ):
        return None
    selected = [e.alias_or_name for e in query.expressions]
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star)
               for e in query.expressions)  # fmt: skip
    whole = star and len(query.expressions) == 1 and not query.args.get("where")
    written = _written(query, text) or query.sql(dialect="spark")
    transform: dict[str, Any] = {"append": {}} if whole else {"sql": written, "append": {}}
    return transform, {table.name: ""}, ([] if star else [*selected, "row_id"])


def _written(query: exp.Expr, text: str) -> str | None:
    """The SELECT ``query`` as it stands in ``text``: from its SELECT keyword to the end
    of its statement."""
    begin = start(query)
    if begin is None:
        return None
    first, end, depth = None, len(text), 0
    for token in FlowSQL().tokenize(text):
        if token.start < begin:
            if token.token_type == TokenType.SELECT:
                first = token.start
            continue
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif token.token_type == TokenType.SEMICOLON and depth <= 0:
            end = token.start
            break
    return None if first is None else text[first:end].strip()


def _unread(prestages: dict[str, PreStage]) -> None:
    for prestage in prestages.values():
        raise SqlError(
            f"CREATE VIEW {prestage.name}: declared but not read (a window reads one view, "
            "its pre-stage; a join reads the sources themselves)",
            prestage.node,
        )


def _read_views(query: exp.Expr, views: dict[str, View]) -> dict[str, View]:
    """The views ``query`` reads, each replaced by its source (the dedup runs on it)."""
    used: dict[str, View] = {}
    for table in query.find_all(exp.Table):
        made = views.get(table.name)
        if made is None:
            continue
        used[made.source] = made
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(made.name)))
        table.set("this", exp.to_identifier(made.source))
    unread = [v for v in views.values() if v not in used.values()]
    if unread:
        raise SqlError(f"CREATE VIEW {unread[0].name}: declared but not read", unread[0].node)
    return used


def _watermarks(reads: dict[str, str], tables: dict[str, Table], query: exp.Expr) -> int:
    """The sources' one watermark delay: each source the query reads is declared and
    has a watermark on the time column read."""
    delays = set()
    for source, column in reads.items():
        table = tables.get(source)
        if table is None:
            raise SqlError(f"{source}: declare it with CREATE TABLE", query)
        if table.watermark is None:
            raise SqlError(
                f"CREATE TABLE {source}: the query's time column {column} needs a WATERMARK "
                f"FOR {column} AS {column} - INTERVAL 'n' SECOND (n: how late an event may "
                "come)",
                table.node,
            )
        if table.watermark[0] != column:
            raise SqlError(
                f"the query reads {source}'s time as {column}, its watermark is on "
                f"{table.watermark[0]}: they are one column",
                table.node,
            )
        delays.add(table.watermark[1])
    if len(delays) > 1:
        raise SqlError(
            f"the sources' watermarks wait {' and '.join(str(d) for d in sorted(delays))} ms: "
            "flow-jobs has one lateness_ms for both sides; give both the same delay",
            query,
        )
    return delays.pop()


def _version_time(keys: dict[str, Any], tables: dict[str, Table]) -> dict[str, str]:
    """A temporal join's versions are timed by their table's watermark column (the
    time column read of that source)."""
    versions = tables.get(keys["versions_source"])
    if versions is None:
        raise SqlError(f"{keys['versions_source']}: declare it with CREATE TABLE")
    if versions.watermark is None:
        raise SqlError(
            f"CREATE TABLE {versions.name}: a versioned table's time column needs a "
            "WATERMARK FOR col AS col - INTERVAL 'n' SECOND",
            versions.node,
        )
    stream, version = keys.pop("stream_event_time_column"), versions.watermark[0]
    if stream == version:
        keys["event_time_column"] = stream
    else:
        keys["stream_event_time_column"] = stream
        keys["version_event_time_column"] = version
    return {versions.name: version}


def _dedup(
    used: dict[str, View], reads: dict[str, str], settings: dict[str, Any]
) -> list[dict[str, Any]]:
    given = settings.get("transform", {}).pop("dedup", {})
    out = []
    for source, made in used.items():
        if made.order != reads.get(source):
            raise SqlError(
                f"CREATE VIEW {made.name}: ORDER BY {made.order}, the time column the "
                f"query reads of {source} ({reads.get(source)})",
                made.node,
            )
        keys = dict(given.pop(made.name, {}))
        if "within_ms" not in keys:
            raise SqlError(
                f"CREATE VIEW {made.name}: Flink's deduplication keeps every key for ever; "
                "flow-jobs forgets a key within_ms after the last row that passed: SET "
                f"'transform.dedup.{made.name}.within_ms' = '3600000' (an hour, say)",
                made.node,
            )
        out.append({"source": source, "keys": made.keys, **keys})
    if given:
        raise SqlError(f"SET 'transform.dedup.{next(iter(given))}': no such view")
    return out


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


def _check_target_columns(target: Table, outputs: list[str], stage: str) -> None:
    names = [name for name, _ in target.columns]
    if (
        not names
        or not outputs
        or names == outputs
        or (stage != "window" and names == outputs[:-1])
    ):
        return
    raise SqlError(
        f"CREATE TABLE {target.name} ({', '.join(names)}): the query writes "
        f"({', '.join(outputs)}); list those columns, in that order, or none",
        target.node,
    )


def _pipeline_name(stem: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", stem.lower()).strip("-") or "pipeline"
