"""A TOML spec written as a ``.sql`` pipeline file in Flink SQL's spelling
(``flow-jobs toml-to-sql``): the file ``read_pipeline`` reads back into the same spec,
so the same plan and fingerprint. A key with no SQL form (a count or sliding window, a
lookup, a chain, a join without named output columns, ...) is refused, naming it:
the file written must be the spec, or nothing."""

from __future__ import annotations

from typing import Any

from flow_jobs.sql.durations import UNIT_MS
from flow_jobs.sql.errors import SqlError
from flow_jobs.sql.windowed import KEY_ORDER

_TVF_SIZES = {
    "tumbling": ("TUMBLE", ("duration_ms",)),
    "hopping": ("HOP", ("hop_ms", "duration_ms")),
    "cumulate": ("CUMULATE", ("step_ms", "max_duration_ms")),
    "session": ("SESSION", ("gap_ms",)),
}
#: The window keys the query itself says; every other one is a SET.
_WINDOW_QUERY_KEYS = {*KEY_ORDER, "aggregations", "top_n"}
_AGG_SQL = {"count": "COUNT", "sum": "SUM", "min": "MIN", "max": "MAX", "avg": "AVG"}
_AGG_QUERY_KEYS = {"agg", "column", "as", "mode"}


def _literal(value: Any, key: str) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise SqlError(f"{key}: a {type(value).__name__} has no SQL form; keep this spec in TOML")


def _sets(prefix: str, table: dict[str, Any], skip: set[str] = frozenset()) -> list[str]:
    out = []
    for key, value in table.items():
        if key in skip:
            continue
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out += _sets(path, value)
        else:
            out.append(f"SET '{path}' = {_literal(value, path)};")
    return out


def _with(table: dict[str, Any], key: str) -> str:
    pairs = []
    for k, v in table.items():
        if isinstance(v, dict | list):
            raise SqlError(f"{key}.{k}: a table or list has no SQL form; keep this spec in TOML")
        pairs.append(f"  '{k}' = {_literal(v, f'{key}.{k}')}")
    return "WITH (\n" + ",\n".join(pairs) + "\n)"


#: The units an interval is written in, the largest first (``durations``'s own).
_UNITS = sorted(((ms, unit) for unit, ms in UNIT_MS.items() if ms > 1), reverse=True)


def _ms(value: int) -> str:
    """``value`` ms in the largest unit that holds it whole."""
    for size, unit in _UNITS:
        if value and value % size == 0:
            return f"INTERVAL '{value // size}' {unit}"
    return f"INTERVAL '{value}' MILLISECOND"


def _source(source: dict[str, Any], time: str | None, lateness: int) -> str:
    name = source["name"]
    schema = source.get("schema")
    if not schema:
        raise SqlError(
            f"sources: {name} has no schema (its registry's): a SQL table lists its columns"
        )
    rest = {k: v for k, v in source.items() if k not in ("name", "schema", "kind")}
    watermark = f",\n  WATERMARK FOR {time} AS {time} - {_ms(lateness)}" if time else ""
    return f"CREATE TABLE {name} (\n  {schema}{watermark}\n) {_with(rest, 'sources')};"


def _aggregate(a: dict[str, Any], sets: list[str]) -> str:
    agg, column, name = a["agg"], a.get("column"), a["as"]
    if agg == "count":
        text = f"COUNT({column or '*'})"
    elif agg in _AGG_SQL:
        text = f"{_AGG_SQL[agg]}({column})"
    elif agg == "first":
        text = f"FIRST_VALUE({column})"
    elif agg == "last":
        text = f"LAST_VALUE({column})"
    elif agg == "collect":
        text = f"ARRAY_AGG({column})"
    elif agg == "count_distinct":
        exact = a.get("mode") == "exact"
        text = f"COUNT(DISTINCT {column})" if exact else f"APPROX_COUNT_DISTINCT({column})"
    else:
        raise SqlError(f'transform.window.aggregations: agg = "{agg}" has no SQL form')
    sets += _sets(f"transform.window.aggregations.{name}", a, _AGG_QUERY_KEYS)
    return f"{text} AS {name}"


def _window_query(window: dict[str, Any], table: str, sets: list[str]) -> str:
    kind = window["kind"]
    if kind not in _TVF_SIZES:
        raise SqlError(f'transform.window.kind = "{kind}" has no SQL form; keep it in TOML')
    function, sizes = _TVF_SIZES[kind]
    keys = window.get("group_by", [])
    data = f"TABLE {table}"
    if kind == "session" and keys:
        data += (
            f" PARTITION BY {keys[0]}" if len(keys) == 1 else f" PARTITION BY ({', '.join(keys)})"
        )
    time = window.get("event_time_column", "_event_ts")
    args = ", ".join([data, f"DESCRIPTOR({time})", *(_ms(window[s]) for s in sizes)])
    start = window.get("window_start_column", "window_start")
    end = window.get("window_end_column", "window_end")
    bounds = [
        "window_start" + (f" AS {start}" if start != "window_start" else ""),
        "window_end" + (f" AS {end}" if end != "window_end" else ""),
    ]
    aggregates = [_aggregate(a, sets) for a in window["aggregations"]]
    query = (
        "SELECT " + ",\n       ".join([*bounds, *keys, *aggregates]) + "\n"
        f"FROM TABLE({function}({args}))\n"
        f"GROUP BY {', '.join(['window_start', 'window_end', *keys])}"
    )
    top = window.get("top_n")
    if top is None:
        return query
    partition = ", ".join(["window_start", "window_end", *top.get("partition_by", [])])
    columns = ", ".join([start, end, *keys, *(a["as"] for a in window["aggregations"])])
    if start != "window_start" or end != "window_end":
        partition = ", ".join([start, end, *top.get("partition_by", [])])
    order = ", ".join(top["order_by"])
    numbering = "RANK()" if top.get("with_ties") else "ROW_NUMBER()"
    return (
        f"SELECT {columns} FROM (\n  SELECT *, {numbering} OVER (PARTITION BY {partition} "
        f"ORDER BY {order}) AS rownum\n  FROM (\n{query}\n  )\n) WHERE rownum <= {top['n']}"
    )


def _columns(side: str, chosen: Any, alias: str, key: str) -> list[str]:
    if chosen is None:
        raise SqlError(
            f"transform.{key}.output_{side}_columns is unset (every column, prefixed): a SQL "
            "join names its output columns; set both sides' output columns first"
        )
    pairs = chosen.items() if isinstance(chosen, dict) else ((c, c) for c in chosen)
    return [f"{alias}.{c}" + (f" AS {n}" if n != c else "") for c, n in pairs]


def _join(join: dict[str, Any], tables: dict[str, str], sets: list[str]) -> tuple[str, dict]:
    """The interval join's query, and each source's time column."""
    if "time_window_ms" in join:
        raise SqlError(
            "transform.join.time_window_ms has no SQL form of its own: write lower_bound_ms "
            "= -t and upper_bound_ms = t (the same join, another fingerprint)"
        )
    if join.get("time_mode") == "processing":
        raise SqlError('transform.join.time_mode = "processing" has no SQL form')
    left, right = join["left_source"], join["right_source"]
    time = join.get("event_time_column", "_event_ts")
    lt, rt = join.get("left_event_time_column", time), join.get("right_event_time_column", time)
    pairs = zip(join["left_keys"], join["right_keys"], strict=True)
    on = [f"l.{a} = r.{b}" for a, b in pairs]
    lo, hi = join["lower_bound_ms"], join["upper_bound_ms"]
    low = f"l.{lt} - {_ms(-lo)}" if lo < 0 else f"l.{lt} + {_ms(lo)}"
    high = f"l.{lt} - {_ms(-hi)}" if hi < 0 else f"l.{lt} + {_ms(hi)}"
    on.append(f"r.{rt} BETWEEN {low} AND {high}")
    sides = {"inner": "", "left": "LEFT ", "right": "RIGHT ", "full": "FULL "}
    if join.get("how", "inner") not in sides:
        raise SqlError(f"transform.join.how = {join['how']!r}: SQL spells the join's kind itself")
    how = sides[join.get("how", "inner")]
    columns = _columns("left", join.get("output_left_columns"), "l", "join")
    columns += _columns("right", join.get("output_right_columns"), "r", "join")
    query_keys = {
        "kind", "left_source", "right_source", "left_keys", "right_keys", "how",
        "lower_bound_ms", "upper_bound_ms", "event_time_column", "left_event_time_column",
        "right_event_time_column", "lateness_ms", "output_left_columns", "output_right_columns",
    }  # fmt: skip
    sets += _sets("transform.join", join, query_keys)
    query = (
        f"SELECT {', '.join(columns)}\nFROM {tables[left]} AS l {how}JOIN {tables[right]} AS r\n"
        f"  ON {' AND '.join(on)}"
    )
    return query, {left: lt, right: rt}


def _temporal(join: dict[str, Any], tables: dict[str, str], sets: list[str]) -> tuple[str, dict]:
    stream, versions = join["stream_source"], join["versions_source"]
    time = join.get("event_time_column", "_event_ts")
    st = join.get("stream_event_time_column", time)
    vt = join.get("version_event_time_column", time)
    pairs = zip(join["stream_keys"], join["version_keys"], strict=True)
    if join.get("how", "inner") not in ("inner", "left"):
        raise SqlError(f"transform.temporal_join.how = {join['how']!r}: SQL spells it itself")
    how = "LEFT " if join.get("how") == "left" else ""
    columns = _columns("stream", join.get("output_stream_columns"), "s", "temporal_join")
    columns += _columns("version", join.get("output_version_columns"), "v", "temporal_join")
    query_keys = {
        "stream_source", "versions_source", "stream_keys", "version_keys", "how",
        "event_time_column", "stream_event_time_column", "version_event_time_column",
        "lateness_ms", "output_stream_columns", "output_version_columns",
    }  # fmt: skip
    sets += _sets("transform.temporal_join", join, query_keys)
    query = (
        f"SELECT {', '.join(columns)}\nFROM {tables[stream]} AS s {how}JOIN {tables[versions]} "
        f"FOR SYSTEM_TIME AS OF s.{st} AS v\n  ON "
        + " AND ".join(f"s.{a} = v.{b}" for a, b in pairs)
    )
    return query, {stream: st, versions: vt}


def _window_join(join: dict[str, Any], tables: dict[str, str], sets: list[str]) -> tuple[str, dict]:
    """The window join's query (``flow_jobs.sql.window_joins``), and each source's time
    column."""
    left, right = join["left_source"], join["right_source"]
    time = join.get("event_time_column", "_event_ts")
    lt, rt = join.get("left_event_time_column", time), join.get("right_event_time_column", time)
    kind = join["kind"]
    if kind == "tumbling":
        name, sizes = "TUMBLE", [join["duration_ms"]]
    elif kind == "hopping":
        name, sizes = "HOP", [join["hop_ms"], join["duration_ms"]]
    else:
        name, sizes = "CUMULATE", [join["step_ms"], join["max_duration_ms"]]

    def side(source: str, column: str) -> str:
        args = ", ".join([f"TABLE {tables[source]}", f"DESCRIPTOR({column})", *map(_ms, sizes)])
        return f"(SELECT * FROM TABLE({name}({args})))"

    how = join.get("how", "inner")
    bounds = []
    for bound in ("window_start", "window_end"):
        named = join.get(f"{bound}_column", bound)
        value = f"COALESCE(l.{bound}, r.{bound})" if how in ("right", "full") else f"l.{bound}"
        bounds.append(value + (f" AS {named}" if named != bound or "(" in value else ""))
    columns = bounds + _columns("left", join.get("output_left_columns"), "l", "window_join")
    if how not in ("semi", "anti"):
        columns += _columns("right", join.get("output_right_columns"), "r", "window_join")
    pairs = zip(join["left_keys"], join["right_keys"], strict=True)
    on = [f"l.{a} = r.{b}" for a, b in pairs]
    on += ["l.window_start = r.window_start", "l.window_end = r.window_end"]
    query_keys = {
        "left_source", "right_source", "left_keys", "right_keys", "how", "kind",
        "duration_ms", "hop_ms", "step_ms", "max_duration_ms", "event_time_column",
        "left_event_time_column", "right_event_time_column", "lateness_ms",
        "window_start_column", "window_end_column", "output_left_columns",
        "output_right_columns",
    }  # fmt: skip
    sets += _sets("transform.window_join", join, query_keys)
    head = f"SELECT {', '.join(columns)}\nFROM {side(left, lt)} l\n"
    if how in ("semi", "anti"):
        exists = "EXISTS" if how == "semi" else "NOT EXISTS"
        query = (
            f"{head}WHERE {exists} (\n  SELECT * FROM {side(right, rt)} r\n  WHERE "
            f"{' AND '.join(on)}\n)"
        )
    else:
        sides = {"inner": "", "left": "LEFT ", "right": "RIGHT ", "full": "FULL "}
        query = f"{head}{sides[how]}JOIN {side(right, rt)} r\n  ON {' AND '.join(on)}"
    return query, {left: lt, right: rt}


def render_pipeline(document: dict[str, Any]) -> str:
    """The ``.sql`` file of the TOML-shaped ``document`` (a window's ``[transform].sql``
    already lifted: ``flow_jobs.spec.loader.read_document``)."""
    transform = dict(document.get("transform") or {})
    for key in ("lookups", "chain"):
        if transform.get(key):
            raise SqlError(f"transform.{key} has no SQL form yet; keep this spec in TOML")
    operators = transform.get("operators") or []
    if operators:
        raise SqlError("transform.operators have no SQL form; keep this spec in TOML")
    sets = _sets(
        "",
        {
            k: v
            for k, v in document.items()
            if k not in ("name", "sources", "transform", "target", "plugins")
        },
    )
    if document.get("plugins"):
        raise SqlError("plugins: a list has no SQL form; keep this spec in TOML")
    sources = {s["name"]: s for s in document["sources"]}
    tables = {name: name for name in sources}
    views: list[tuple[str, dict[str, Any], str]] = []  # (source, its dedup, the view)
    for dedup in transform.get("dedup") or []:
        source = dedup.get("source") or next(iter(sources))
        view = f"{source}_once"
        tables[source] = view
        views.append((source, dedup, view))
    body: list[str] = []
    sets_after: list[str] = []
    prestage = transform.get("sql")
    if prestage is not None and views:
        raise SqlError(
            "transform.dedup with transform.sql has no SQL form yet (the pre-stage would read "
            "the deduplicated view); keep this spec in TOML"
        )
    if "window" in transform:
        window = transform["window"]
        table = next(iter(sources))
        if prestage is not None:
            body.append(f"CREATE VIEW {table}_rows AS\n{prestage};")
            table = f"{table}_rows"
        elif len(sources) > 1:
            raise SqlError("sources: a window over several sources needs [transform].sql")
        else:
            table = tables[table]
        query = _window_query(window, table, sets_after)
        sets_after += _sets("transform.window", window, _WINDOW_QUERY_KEYS)
        time = window.get("event_time_column", "_event_ts")
        times = {name: time for name in sources}
        lateness = window.get("lateness_ms", 0)
    elif "join" in transform:
        query, times = _join(transform["join"], tables, sets_after)
        lateness = transform["join"].get("lateness_ms", 0)
    elif "append" in transform:
        sets_after += _sets("transform.append", transform["append"], set())
        query = prestage if prestage is not None else f"SELECT * FROM {next(iter(sources))}"
        times, lateness = {}, 0
    elif "window_join" in transform:
        query, times = _window_join(transform["window_join"], tables, sets_after)
        lateness = transform["window_join"].get("lateness_ms", 0)
    else:
        query, times = _temporal(transform["temporal_join"], tables, sets_after)
        lateness = transform["temporal_join"].get("lateness_ms", 0)
    creates = [_source(s, times.get(n), lateness) for n, s in sources.items()]
    for source, dedup, view in views:
        keys = ", ".join(dedup["keys"])
        body.insert(
            0,
            f"CREATE VIEW {view} AS SELECT * FROM (\n  SELECT *, ROW_NUMBER() OVER (PARTITION "
            f"BY {keys} ORDER BY {times[source]} ASC) AS rn FROM {source}\n) WHERE rn = 1;",
        )
        sets_after += _sets(f"transform.dedup.{view}", dedup, {"kind", "source", "keys"})
    target = document["target"]
    out = "out" if "out" not in sources else "out_"
    lines = [
        f"SET 'pipeline.name' = {_literal(document['name'], 'name')};",
        *sets,
        *sets_after,
        "",
        *(c + "\n" for c in creates),
        *(b + "\n" for b in body),
        f"CREATE TABLE {out} {_with(target, 'target')};",
        "",
        f"INSERT INTO {out}\n{query};",
    ]
    return "\n".join(lines) + "\n"
