"""The window a query groups by, in either spelling, as its kind and size keys:
Flink's table-valued functions (``TUMBLE``, ``HOP``, ``CUMULATE``, ``SESSION``) and
Spark's ``window(...)`` / ``session_window(...)`` in GROUP BY."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from flow_jobs.sql.dialect import WindowTVF
from flow_jobs.sql.durations import duration_ms
from flow_jobs.sql.errors import SqlError, clause

#: What every window writes first: the names its bounds take by default.
BOUNDS = ("window_start", "window_end")


_SPARK_WINDOWS = {"window": "window", "session_window": "session_window"}


#: Each TVF's positional arguments after the table, by Flink's names.
_TVF_ARGS = {
    "TUMBLE": ("TIMECOL", "SIZE", "OFFSET"),
    "HOP": ("TIMECOL", "SLIDE", "SIZE", "OFFSET"),
    "CUMULATE": ("TIMECOL", "STEP", "SIZE", "OFFSET"),
    "SESSION": ("TIMECOL", "GAP"),
}


@dataclass
class WindowedQuery:
    """The keys a windowed query equals: ``source`` (the table it reads), ``window``
    (``[transform.window]``) and ``sql`` (the pre-stage, from its WHERE; None without)."""

    source: str
    time_column: str
    window: dict[str, Any] = field(default_factory=dict)
    sql: str | None = None
    #: each aggregate's clause, by its name (for the errors about it)
    clauses: dict[str, exp.Expr] = field(default_factory=dict)

    def with_options(self, window: dict[str, Any], options: Any) -> dict[str, Any]:
        """``window`` (the query's keys and the given ones) with ``options``, the
        aggregations' keys SQL has no words for, merged by name (``as``): a list of
        tables (TOML) or a table by name (a ``.sql`` file's ``SET
        'transform.window.aggregations.NAME.KEY'``); then each exact distinct count
        must have its bound."""
        by_name = {a["as"]: a for a in window["aggregations"]}
        if isinstance(options, list):
            options = {o.get("as"): o for o in options if isinstance(o, dict)}
        for name, keys in (options or {}).items():
            if name not in by_name:
                raise SqlError(
                    f"transform.window.aggregations: {name!r} is none of the query's "
                    f"aggregates ({', '.join(by_name)})"
                )
            for key, value in keys.items():
                if key != "as" and by_name[name].get(key, value) != value:
                    raise SqlError(
                        f"transform.window.aggregations.{name}.{key}: also given by the "
                        "query; keep one",
                        self.clauses[name],
                    )
                by_name[name][key] = value
        for name, aggregation in by_name.items():
            exact = aggregation.get("mode") == "exact"
            if exact and "max_distinct_values_per_group" not in aggregation:
                column = aggregation["column"]
                raise SqlError(
                    f"{clause(self.clauses[name])} AS {name} keeps every distinct value in "
                    "state: bound it with SET 'transform.window.aggregations."
                    f"{name}.max_distinct_values_per_group' = '100000' (in TOML, an "
                    f'[[transform.window.aggregations]] with as = "{name}" and that key), '
                    f"or count approximately with approx_count_distinct({column})",
                    self.clauses[name],
                )
        return window


def spark_window_call(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Anonymous) and node.name.lower() in _SPARK_WINDOWS:
        return node.name.lower()
    return None


def _arguments(tvf: WindowTVF) -> dict[str, exp.Expr]:
    name = tvf.name.upper()
    names = _TVF_ARGS[name]
    out: dict[str, exp.Expr] = {}
    for i, arg in enumerate(tvf.expressions):
        if isinstance(arg, exp.Kwarg):
            key = arg.this.name.upper()
            if key not in names:
                raise SqlError(f"{name} has no argument {key} (it takes {', '.join(names)})", arg)
            out[key] = arg.expression
        elif i < len(names):
            out[names[i]] = arg
        else:
            raise SqlError(f"{name} takes at most {len(names) + 1} arguments", arg)
    required = [n for n in names if n != "OFFSET"]
    missing = [n for n in required if n not in out]
    if missing:
        raise SqlError(f"{name} needs {', '.join(missing)}", tvf)
    if "OFFSET" in out:
        raise SqlError(
            f"{clause(out['OFFSET'])}: a window with an offset has no built-in twin; its "
            "windows start at multiples of the size from the epoch",
            out["OFFSET"],
        )
    return out


def flink_window(tvf: WindowTVF, grouping: list[exp.Expr]) -> tuple[WindowedQuery, list[str]]:
    name = tvf.name.upper()
    args = _arguments(tvf)
    descriptor = args["TIMECOL"]
    if not (
        isinstance(descriptor, exp.Anonymous)
        and descriptor.name.upper() == "DESCRIPTOR"
        and len(descriptor.expressions) == 1
        and isinstance(descriptor.expressions[0], exp.Column)
    ):
        raise SqlError(
            f"{clause(descriptor)}: name the time column as DESCRIPTOR(column)", descriptor
        )
    time_column = descriptor.expressions[0].name
    table = tvf.args["table"]
    if not isinstance(table, exp.Table) or not table.name:
        raise SqlError(f"{name}'s data is a source table: TABLE name", tvf)
    window: dict[str, Any] = {"event_time_column": time_column}
    if name == "TUMBLE":
        window.update(kind="tumbling", duration_ms=duration_ms(args["SIZE"]))
    elif name == "HOP":
        size, slide = duration_ms(args["SIZE"]), duration_ms(args["SLIDE"])
        window.update(kind="hopping", duration_ms=size, hop_ms=slide)
    elif name == "CUMULATE":
        step, size = duration_ms(args["STEP"]), duration_ms(args["SIZE"])
        window.update(kind="cumulate", step_ms=step, max_duration_ms=size)
    else:
        window.update(kind="session", gap_ms=duration_ms(args["GAP"]))
    bounds = {c.name for c in grouping if isinstance(c, exp.Column) and c.name in BOUNDS}
    if bounds != set(BOUNDS):
        raise SqlError(
            f"GROUP BY: a window TVF's rows are grouped by window_start, window_end and the "
            f"keys; add {' and '.join(b for b in BOUNDS if b not in bounds)}",
            grouping[0],
        )
    keys = _plain_keys(grouping, skip=set(BOUNDS))
    partition = [c.name for c in tvf.args.get("partition") or []]
    if name == "SESSION" and sorted(partition) != sorted(keys):
        raise SqlError(
            f"SESSION(... PARTITION BY {', '.join(partition) or '(nothing)'}) and GROUP BY "
            f"{', '.join(keys) or '(no key)'}: a session is per group key, so partition by "
            "exactly the grouped keys",
            tvf,
        )
    if partition and name != "SESSION":
        raise SqlError(
            f"PARTITION BY is for SESSION; {name}'s windows are the same for every key", tvf
        )
    return WindowedQuery(source=table.name, time_column=time_column, window=window), keys


def spark_window(source: exp.Expr, grouping: list[exp.Expr]) -> tuple[WindowedQuery, list[str]]:
    if not isinstance(source, exp.Table) or not source.name or source.args.get("joins"):
        raise SqlError("a windowed query reads one source table", source)
    windows = [g for g in grouping if spark_window_call(g)]
    if len(windows) != 1:
        raise SqlError("GROUP BY one window(...) or session_window(...), not two", windows[1])
    call = windows[0]
    kind = spark_window_call(call)
    args = call.expressions
    if not args or not isinstance(args[0], exp.Column):
        raise SqlError(f"{clause(call)}: the first argument is the time column", call)
    time_column = args[0].name
    window: dict[str, Any] = {"event_time_column": time_column, "_struct": kind}
    if kind == "session_window":
        if len(args) != 2:
            raise SqlError(f"{clause(call)}: session_window(time, gap)", call)
        window.update(kind="session", gap_ms=duration_ms(args[1]))
    elif len(args) == 2:
        window.update(kind="tumbling", duration_ms=duration_ms(args[1]))
    elif len(args) == 3:
        size, slide = duration_ms(args[1]), duration_ms(args[2])
        if slide == size:
            window.update(kind="tumbling", duration_ms=size)
        else:
            window.update(kind="hopping", duration_ms=size, hop_ms=slide)
    else:
        raise SqlError(
            f"{clause(args[3]) if len(args) > 3 else clause(call)}: a window with a start "
            "time has no built-in twin; its windows start at multiples of the size from "
            "the epoch",
            args[3] if len(args) > 3 else call,
        )
    keys = _plain_keys([g for g in grouping if g is not call], skip=set())
    return WindowedQuery(source=source.name, time_column=time_column, window=window), keys


def _plain_keys(grouping: list[exp.Expr], skip: set[str]) -> list[str]:
    keys = []
    for g in grouping:
        if isinstance(g, exp.Column) and g.name in skip:
            continue
        if not isinstance(g, exp.Column):
            raise SqlError(
                f"GROUP BY {clause(g)}: group by a column; compute {clause(g)} in "
                "[transform].sql or a CREATE VIEW, under a name",
                g,
            )
        keys.append(g.name)
    return keys
