"""Pipelines written in SQL (docs/spec-reference.md, "Pipelines in SQL"), as pure logic:
each accepted query is the spec of the TOML the reference gives as its twin (the same
spec, so the same plan and fingerprint), and each clause with no twin is refused
naming the clause and its place. End to end: tests/test_sql_pipelines.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flow_jobs.cli import main
from flow_jobs.spec import SpecError, load_spec, parse_spec, toml_twin
from flow_jobs.spec.fingerprint import fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.sql import render_pipeline

EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "clicks_per_minute.sql"
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"

#: Each window kind's TVF (Flink) and window function (Spark), and its TOML keys, as the
#: spec reference's table of twins gives them: (kind, sizes in ms) -> spellings.
UNITS = {1_000: "SECOND", 60_000: "MINUTE", 3_600_000: "HOUR"}


def _interval(ms: int) -> str:
    unit = max(u for u in UNITS if ms % u == 0)
    return f"INTERVAL '{ms // unit}' {UNITS[unit]}"


def _spark_duration(ms: int) -> str:
    unit = max(u for u in UNITS if ms % u == 0)
    return f"'{ms // unit} {UNITS[unit].lower()}s'"


def _twin(kind: str, a: int, b: int) -> dict[str, Any]:
    return {
        "tumbling": {"kind": "tumbling", "duration_ms": a},
        "hopping": {"kind": "hopping", "duration_ms": a * b, "hop_ms": a},
        "cumulate": {"kind": "cumulate", "step_ms": a, "max_duration_ms": a * b},
        "session": {"kind": "session", "gap_ms": a},
    }[kind]


def _flink_from(kind: str, a: int, b: int, keys: list[str]) -> str:
    if kind == "tumbling":
        return f"TUMBLE(TABLE clicks, DESCRIPTOR(ts), {_interval(a)})"
    if kind == "hopping":
        return f"HOP(TABLE clicks, DESCRIPTOR(ts), {_interval(a)}, {_interval(a * b)})"
    if kind == "cumulate":
        return f"CUMULATE(TABLE clicks, DESCRIPTOR(ts), {_interval(a)}, {_interval(a * b)})"
    partition = keys[0] if len(keys) == 1 else f"({', '.join(keys)})"
    return f"SESSION(TABLE clicks PARTITION BY {partition}, DESCRIPTOR(ts), {_interval(a)})"


def _spark_group(kind: str, a: int, b: int) -> str:
    if kind == "tumbling":
        return f"window(ts, {_spark_duration(a)})"
    if kind == "hopping":
        return f"window(ts, {_spark_duration(a * b)}, {_spark_duration(a)})"
    return f"session_window(ts, {_spark_duration(a)})"


#: (SQL in Flink's spelling, in Spark's, the aggregation's TOML)
AGGREGATES = [
    ("COUNT(*)", "count(*)", {"agg": "count"}),
    ("COUNT(qty)", "count(qty)", {"agg": "count", "column": "qty"}),
    ("SUM(amount)", "sum(amount)", {"agg": "sum", "column": "amount"}),
    ("MIN(page)", "min(page)", {"agg": "min", "column": "page"}),
    ("MAX(qty)", "max(qty)", {"agg": "max", "column": "qty"}),
    ("AVG(amount)", "avg(amount)", {"agg": "avg", "column": "amount"}),
    (
        "FIRST_VALUE(page)",
        "min_by(page, ts) FILTER (WHERE page IS NOT NULL)",
        {"agg": "first", "column": "page"},
    ),
    (
        "LAST_VALUE(page)",
        "max_by(page, ts) FILTER (WHERE page IS NOT NULL)",
        {"agg": "last", "column": "page"},
    ),
    (
        "COUNT(DISTINCT page)",
        "count(DISTINCT page)",
        {"agg": "count_distinct", "column": "page", "mode": "exact"},
    ),
    (
        "APPROX_COUNT_DISTINCT(page)",
        "approx_count_distinct(page)",
        {"agg": "count_distinct", "column": "page"},
    ),
    ("ARRAY_AGG(qty)", "collect_list(qty)", {"agg": "collect", "column": "qty"}),
]


def _document(window: dict[str, Any], sql: str | None = None) -> dict[str, Any]:
    return {
        "name": "p",
        "sources": [
            {"name": "clicks", "topic": "t", "bootstrap_servers": "b:9092", "schema": SCHEMA}
        ],
        "transform": {**({"sql": sql} if sql else {}), "window": window},
        "target": {"kind": "delta", "path": "/tmp/t"},
    }


def _pipeline_file(select: str, lateness_ms: int, sets: str = "") -> str:
    return f"""
SET 'pipeline.name' = 'p';{sets}
CREATE TABLE clicks (user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '{lateness_ms}' MILLISECOND
) WITH ('topic' = 't', 'bootstrap_servers' = 'b:9092');
CREATE TABLE out WITH ('kind' = 'delta', 'path' = '/tmp/t');
INSERT INTO out {select};
"""


def _same(a: PipelineSpec, b: PipelineSpec) -> None:
    assert a == b
    assert fingerprint_of(fingerprint_fields(a)) == fingerprint_of(fingerprint_fields(b))


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["tumbling", "hopping", "cumulate", "session"]),
    a=st.sampled_from([1_000, 5_000, 60_000, 120_000, 3_600_000]),
    b=st.integers(2, 4),
    keys=st.lists(st.sampled_from(["user_id", "page"]), min_size=1, max_size=2, unique=True),
    picks=st.lists(st.integers(0, len(AGGREGATES) - 1), min_size=1, max_size=4, unique=True),
    where=st.sampled_from([None, "user_id IS NOT NULL", "amount > 0 AND (qty < 5 OR qty IS NULL)"]),
    spark=st.booleans(),
    lateness=st.integers(0, 10_000),
    top=st.one_of(
        st.none(), st.tuples(st.integers(1, 5), st.booleans(), st.booleans(), st.booleans())
    ),
)
def test_a_generated_query_is_the_spec_of_its_twin(
    kind: str,
    a: int,
    b: int,
    keys: list[str],
    picks: list[int],
    where: str | None,
    spark: bool,
    lateness: int,
    top: tuple[int, bool, bool, bool] | None,
) -> None:
    spark = spark and kind != "cumulate"  # Spark has no cumulating window
    top = top if kind != "session" and not spark else None  # Flink's window top-N
    aggs = [AGGREGATES[i] for i in picks]
    names = [f"a{i}" for i in range(len(aggs))]
    selected = ", ".join(
        f"{s if spark else f} AS {n}" for (f, s, _), n in zip(aggs, names, strict=True)
    )
    filtered = f" WHERE {where}" if where else ""
    if spark:
        struct = "session_window" if kind == "session" else "window"
        select = (
            f"SELECT {struct}.start AS window_start, {struct}.end AS window_end, "
            f"{', '.join(keys)}, {selected} FROM clicks{filtered} "
            f"GROUP BY {_spark_group(kind, a, b)}, {', '.join(keys)}"
        )
    else:
        select = (
            f"SELECT window_start, window_end, {', '.join(keys)}, {selected} "
            f"FROM TABLE({_flink_from(kind, a, b, keys)}){filtered} "
            f"GROUP BY window_start, window_end, {', '.join(keys)}"
        )
    ranked_by = next(
        (n for (_, _, t), n in zip(aggs, names, strict=True) if t["agg"] != "collect"), None
    )
    if top is not None and ranked_by is not None:
        n, descending, partitioned, ties = top
        partition = ", ".join(
            ["window_start", "window_end", *keys[:1]]
            if partitioned
            else ["window_start", "window_end"]
        )
        columns = ", ".join(["window_start", "window_end", *keys, *names])
        select = (
            f"SELECT {columns} FROM (SELECT *, {'RANK' if ties else 'ROW_NUMBER'}() OVER "
            f"(PARTITION BY {partition} "
            f"ORDER BY {ranked_by} {'DESC' if descending else 'ASC'}) AS rownum FROM ({select})) "
            f"WHERE rownum <= {n}"
        )
    else:
        top = None
    # an exact distinct count asks for its bound: SET in a file, a table in TOML
    bounded = {n: 1000 for (_, _, t), n in zip(aggs, names, strict=True) if t.get("mode")}
    window = {
        **_twin(kind, a, b),
        "event_time_column": "ts",
        "lateness_ms": lateness,
        "group_by": keys,
        "aggregations": [
            {**t, "as": n, **({"max_distinct_values_per_group": 1000} if n in bounded else {})}
            for (_, _, t), n in zip(aggs, names, strict=True)
        ],
    }
    if top is not None:
        window["top_n"] = {
            "n": top[0],
            "order_by": [f"{ranked_by} {'DESC' if top[1] else 'ASC'}"],
            **({"partition_by": keys[:1]} if top[2] else {}),
            **({"with_ties": True} if top[3] else {}),
        }
    expected = PipelineSpec.model_validate(
        _document(window, f"SELECT * FROM clicks WHERE {where}" if where else None)
    )
    # a whole .sql pipeline file
    sets = "".join(
        f"\nSET 'transform.window.aggregations.{n}.max_distinct_values_per_group' = '1000';"
        for n in bounded
    )
    _same(parse_spec(_pipeline_file(select, lateness, sets), "p.sql", sql=True), expected)
    # and the same query as a TOML spec's [transform].sql
    toml_window: dict[str, Any] = {"lateness_ms": lateness}
    if bounded:
        toml_window["aggregations"] = [
            {"as": n, "max_distinct_values_per_group": m} for n, m in bounded.items()
        ]
    document = _document(toml_window, select)
    import tomli_w

    _same(parse_spec(tomli_w.dumps(document), "p.toml"), expected)
    # and back: the TOML written as a .sql file (toml-to-sql) is the same spec
    rendered = render_pipeline(
        _document(window, f"SELECT * FROM clicks WHERE {where}" if where else None)
    )
    _same(parse_spec(rendered, "p.sql", sql=True), expected)


def _refused(select: str, *, lateness: int = 0) -> str:
    text = _pipeline_file(select, lateness)
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "p.sql", sql=True)
    return str(caught.value)


FLINK = "FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))"
BOUNDS = "SELECT window_start, window_end, user_id"
GROUPED = "GROUP BY window_start, window_end, user_id"


@pytest.mark.parametrize(
    ("select", "words"),
    [
        (
            f"{BOUNDS}, STDDEV(amount) AS s {FLINK} {GROUPED}",
            "line 7, column 59: STDDEV(amount): no aggregator takes this; flow-jobs has count(*)",
        ),
        (
            f"{BOUNDS}, COUNT(*) AS n {FLINK} {GROUPED} ORDER BY n",
            "ORDER BY outside a top-N pattern",
        ),
        (f"{BOUNDS}, COUNT(*) AS n {FLINK} {GROUPED} HAVING COUNT(*) > 1", "HAVING: the window"),
        (f"{BOUNDS}, COUNT(*) AS n {FLINK} {GROUPED} LIMIT 3", "LIMIT: a stream has no end"),
        (f"{BOUNDS}, COUNT(*) {FLINK} {GROUPED}", "COUNT(*): name the aggregate"),
        (
            f"{BOUNDS}, SUM(amount * 2) AS s {FLINK} {GROUPED}",
            "aggregate a column; compute amount * 2",
        ),
        (
            f"{BOUNDS}, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), "
            f"INTERVAL '1' MINUTE, INTERVAL '10' SECOND)) {GROUPED}",
            "a window with an offset has no built-in twin",
        ),
        (
            "SELECT window.start AS window_start, window.end AS window_end, user_id, "
            "COUNT(*) AS n FROM clicks GROUP BY window(ts, '1 month'), user_id",
            "'1 month': month has no fixed length",
        ),
        (
            f"{BOUNDS}, COUNT(*) AS n FROM TABLE(SESSION(TABLE clicks PARTITION BY page, "
            f"DESCRIPTOR(ts), INTERVAL '1' MINUTE)) {GROUPED}",
            "partition by exactly the grouped keys",
        ),
        (
            f"SELECT window_start, window_end, COUNT(*) AS n {FLINK} {GROUPED}",
            "user_id is grouped but not selected",
        ),
        (
            f"{BOUNDS}, page, COUNT(*) AS n {FLINK} {GROUPED}",
            "page is neither grouped nor aggregated",
        ),
        (
            f"{BOUNDS}, COUNT(*) AS n {FLINK} WHERE window_start > 0 {GROUPED}",
            "cannot read a window's bounds",
        ),
        (
            f"{BOUNDS}, max_by(page, qty) FILTER (WHERE page IS NOT NULL) AS p {FLINK} {GROUPED}",
            "order by the window's time column, ts",
        ),
        (
            f"{BOUNDS}, min_by(page, ts) AS p {FLINK} {GROUPED}",
            "MIN_BY(page, ts) may be NULL (the earliest row's value, NULL or not); flow-jobs' "
            "first / last skip NULLs in event time: write min_by(page, ts) FILTER (WHERE page "
            "IS NOT NULL)",
        ),
        (
            f"{BOUNDS}, last(page) AS p {FLINK} {GROUPED}",
            "write max_by(page, ts) FILTER (WHERE page IS NOT NULL)",
        ),
        (
            f"{BOUNDS}, COUNT(*) AS n {FLINK} GROUP BY window_start, window_end, lower(user_id)",
            "GROUP BY LOWER(user_id): group by a column",
        ),
        (
            f"SELECT window_start, window_end, o.user_id, COUNT(*) AS n {FLINK} "
            f"JOIN payments AS o ON o.user_id = user_id {GROUPED}",
            "a join and a window in one query",
        ),
        (
            "SELECT user_id, COUNT(*) AS n FROM clicks GROUP BY user_id",
            "groups by a window (window(...)",
        ),
        (
            "SELECT window.start AS window_start, window.end AS window_end, COUNT(*) AS n "
            "FROM clicks GROUP BY window(ts, '1 minute'), window(ts, '2 minutes')",
            "GROUP BY one window(...) or session_window(...), not two",
        ),
        (
            f"{BOUNDS}, COUNT(*) AS n {FLINK} GROUP BY window_start, window_end, user_id, "
            "window(ts, '1 minute')",
            "group by a column",
        ),
        (
            f"{BOUNDS}, COUNT(DISTINCT page) AS pages {FLINK} {GROUPED}",
            "COUNT(DISTINCT page) AS pages keeps every distinct value in state: bound it with "
            "SET 'transform.window.aggregations.pages.max_distinct_values_per_group'",
        ),
    ],
)
def test_a_clause_without_a_twin_is_refused_naming_it(select: str, words: str) -> None:
    message = _refused(select)
    assert message.startswith("p.sql: line ")
    assert words in message


def test_a_pipeline_file_is_refused_naming_its_statement() -> None:
    no_watermark = """CREATE TABLE clicks (user_id STRING, ts BIGINT) WITH ('topic' = 't',
    'bootstrap_servers' = 'b:9092');
CREATE TABLE out WITH ('kind' = 'delta', 'path' = '/tmp/t');
INSERT INTO out SELECT window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
GROUP BY window_start, window_end;"""
    with pytest.raises(
        SpecError,
        match=r"p.sql: line 1, column 14: CREATE TABLE clicks: the "
        r"query's time column ts needs a WATERMARK FOR ts AS ts - INTERVAL",
    ):
        parse_spec(no_watermark, "p.sql", sql=True)
    two = no_watermark.replace(
        "GROUP BY window_start, window_end;",
        "GROUP BY window_start, window_end; INSERT INTO out SELECT 1;",
    )
    with pytest.raises(SpecError, match="one INSERT INTO target SELECT"):
        parse_spec(two, "p.sql", sql=True)
    columns = _pipeline_file(f"{BOUNDS}, COUNT(*) AS n {FLINK} {GROUPED}", 0).replace(
        "CREATE TABLE out WITH", "CREATE TABLE out (window_start TIMESTAMP, n BIGINT) WITH"
    )
    with pytest.raises(
        SpecError, match=r"the query writes \(window_start, window_end, user_id, n\)"
    ):
        parse_spec(columns, "p.sql", sql=True)
    with pytest.raises(SpecError, match="SQL syntax error"):
        parse_spec("CREATE TABLE (", "p.sql", sql=True)


def test_a_window_key_given_twice_is_refused() -> None:
    select = f"{BOUNDS}, COUNT(*) AS n {FLINK} {GROUPED}"
    import tomli_w

    text = tomli_w.dumps(_document({"kind": "tumbling", "duration_ms": 1000}, select))
    with pytest.raises(SpecError, match=r"transform\.window\.kind is also given by"):
        parse_spec(text, "p.toml")


def test_other_sql_stays_a_prestage() -> None:
    document = _document(
        {
            "kind": "tumbling",
            "duration_ms": 1000,
            "event_time_column": "ts",
            "aggregations": [{"agg": "count", "as": "n"}],
        },
        "SELECT *, upper(page) AS p FROM clicks WHERE qty > 1",
    )
    import tomli_w

    spec = parse_spec(tomli_w.dumps(document), "p.toml")
    assert spec.transform.sql == "SELECT *, upper(page) AS p FROM clicks WHERE qty > 1"


def test_the_example_and_its_toml_twin_are_one_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/examples/clicks_per_minute.sql: ``sql-to-toml`` prints a TOML file that is the
    same spec, ``${ENV}`` references kept as written."""
    assert main(["sql-to-toml", str(EXAMPLE)]) == 0
    twin = capsys.readouterr().out
    assert 'bootstrap_servers = "${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}"' in twin
    assert (
        'sql = "SELECT user_id, page, amount, ts, _kafka FROM clicks WHERE user_id IS NOT NULL"'
        in twin
    )
    assert "lateness_ms = 5000" in twin
    (tmp_path / "twin.toml").write_text(twin)
    _same(load_spec(EXAMPLE), load_spec(tmp_path / "twin.toml"))
    assert toml_twin(tmp_path / "twin.toml") == toml_twin(EXAMPLE)
    assert main(["validate", str(EXAMPLE)]) == 0
    assert (
        "valid — pipeline 'clicks-per-minute': tumbling window 60000 ms" in capsys.readouterr().out
    )


def test_dagster_takes_a_sql_pipeline(tmp_path: Path) -> None:
    from assets.factory import folder_definitions, spec_files

    (tmp_path / "clicks.sql").write_text(EXAMPLE.read_text())
    assert spec_files(tmp_path) == [tmp_path / "clicks.sql"]
    defs = folder_definitions(tmp_path)
    keys = {k.to_user_string() for a in defs.assets or () for k in a.keys}
    assert any("clicks_per_minute" in k for k in keys), keys


TWO_SOURCES = """SET 'pipeline.name' = 'p';
CREATE TABLE orders (order_id STRING, currency STRING, amount DOUBLE, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH ('topic' = 'o', 'bootstrap_servers' = 'b:1');
CREATE TABLE other (order_id STRING, currency STRING, paid DOUBLE, rate DOUBLE, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '{delay}' SECOND)
  WITH ('topic' = 'p', 'bootstrap_servers' = 'b:1');
CREATE TABLE out WITH ('kind' = 'delta', 'path' = '/tmp/t');
{query};"""
BETWEEN = "p.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts + INTERVAL '30' MINUTE"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        (
            "INSERT INTO out SELECT o.order_id, p.paid FROM orders AS o JOIN other AS p "
            f"ON o.order_id = p.order_id AND o.amount > p.paid AND {BETWEEN}",
            "o.amount > p.paid: a join condition without a twin; ON takes key equalities",
        ),
        (
            "INSERT INTO out SELECT o.order_id, p.paid FROM orders AS o JOIN other AS p "
            "ON o.order_id = p.order_id",
            "an interval join needs one time bound",
        ),
        (
            "INSERT INTO out SELECT o.order_id, p.paid FROM orders AS o JOIN other AS p "
            "ON o.order_id = p.order_id AND p.ts > o.ts AND p.ts < o.ts + INTERVAL '1' MINUTE",
            "a join condition without a twin",
        ),
        (
            "INSERT INTO out SELECT p.paid, o.order_id FROM orders AS o JOIN other AS p "
            f"ON o.order_id = p.order_id AND {BETWEEN}",
            "select the left side's columns first",
        ),
        (
            "INSERT INTO out SELECT order_id FROM orders AS o JOIN other AS p "
            f"ON o.order_id = p.order_id AND {BETWEEN}",
            "order_id: name each column of a join by its table",
        ),
        (
            "INSERT INTO out SELECT * FROM orders AS o JOIN other AS p "
            f"ON o.order_id = p.order_id AND {BETWEEN}",
            "*: name the output columns",
        ),
        (
            "INSERT INTO out SELECT o.order_id, p.paid FROM orders AS o JOIN other AS p "
            f"ON o.order_id = p.order_id AND {BETWEEN} WHERE o.amount > 1",
            "a join's query has a SELECT list, FROM, one JOIN and ON",
        ),
        (
            "INSERT INTO out SELECT o.order_id, r.rate FROM orders AS o FULL JOIN other "
            "FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency",
            "a temporal join is inner or LEFT",
        ),
        (
            "INSERT INTO out SELECT o.order_id, r.rate FROM orders AS o JOIN other "
            "FOR SYSTEM_TIME AS OF r.ts AS r ON o.currency = r.currency",
            "AS OF r.ts: the stream's time column",
        ),
    ],
)
def test_a_join_without_a_twin_is_refused_naming_the_clause(query: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(TWO_SOURCES.format(delay=5, query=query), "p.sql", sql=True)
    assert str(caught.value).startswith("p.sql: line 8, column ")
    assert words in str(caught.value)


def test_two_watermark_delays_for_one_join_are_refused() -> None:
    query = (
        "INSERT INTO out SELECT o.order_id, p.paid FROM orders AS o JOIN other AS p "
        f"ON o.order_id = p.order_id AND {BETWEEN}"
    )
    with pytest.raises(SpecError, match="wait 5000 and 9000 ms: flow-jobs has one lateness_ms"):
        parse_spec(TWO_SOURCES.format(delay=9, query=query), "p.sql", sql=True)


DEDUP = (
    "CREATE VIEW once AS SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY user_id "
    "ORDER BY {order}) AS rn FROM clicks) WHERE rn {bound};\n"
)


@pytest.mark.parametrize(
    ("order", "bound", "sets", "words"),
    [
        ("ts ASC", "= 1", "", "Flink's deduplication keeps every key for ever"),
        ("ts DESC", "= 1", "", "keeping the last row would retract rows"),
        ("ts ASC", "<= 2", "", "a deduplication keeps = 1"),
        ("amount ASC", "= 1", "SET 'transform.dedup.once.within_ms' = '1000';", "ORDER BY amount"),
    ],
)
def test_a_dedup_without_a_twin_is_refused(order: str, bound: str, sets: str, words: str) -> None:
    select = (
        f"{BOUNDS}, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE once, DESCRIPTOR(ts), INTERVAL "
        f"'1' MINUTE)) {GROUPED}"
    )
    text = _pipeline_file(select, 0, sets).replace(
        "CREATE TABLE out", DEDUP.format(order=order, bound=bound) + "CREATE TABLE out"
    )
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "p.sql", sql=True)
    assert words in str(caught.value)
    assert str(caught.value).startswith("p.sql: line ")


WINDOWED = f"SELECT window_start, window_end, user_id, COUNT(*) AS n {FLINK} {GROUPED}"


@pytest.mark.parametrize(
    ("select", "words"),
    [
        (
            f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, "
            f"window_end ORDER BY n DESC) AS rownum FROM ({WINDOWED})) WHERE rownum <= 3",
            "SELECT *: the rows written carry no rownum",
        ),
        (
            f"SELECT window_start, window_end, user_id, n FROM (SELECT *, ROW_NUMBER() OVER "
            f"(PARTITION BY user_id ORDER BY n DESC) AS rownum FROM ({WINDOWED})) "
            "WHERE rownum <= 3",
            "a window top-N ranks the rows of each window",
        ),
        (
            f"SELECT window_start, window_end, user_id, n FROM (SELECT *, ROW_NUMBER() OVER "
            f"(PARTITION BY window_start, window_end ORDER BY n DESC) AS rownum FROM "
            f"({WINDOWED})) WHERE rownum > 3",
            "keeps the first rows: WHERE rownum <= N",
        ),
        (
            f"SELECT window_start, window_end, user_id, n FROM (SELECT *, DENSE_RANK() OVER "
            f"(PARTITION BY window_start, window_end ORDER BY n DESC) AS r FROM ({WINDOWED})) "
            "WHERE r <= 3",
            "a query over a windowed query is a window top-N",
        ),
    ],
)
def test_a_top_n_without_a_twin_is_refused(select: str, words: str) -> None:
    message = _refused(select)
    assert message.startswith("p.sql: line ")
    assert words in message


SHIPPED = Path(__file__).parent.parent / "pipelines"


@pytest.mark.parametrize(
    ("pipeline", "refusal"),
    [
        ("clicks_per_minute", None),
        ("visits", None),
        ("orders_with_rates", None),
        ("orders_payments_join", "transform.join.how = '${JOIN_HOW:-left}'"),
        ("purchase_batches", 'transform.window.kind = "count_sliding" has no SQL form'),
        ("spend_last_hour", 'transform.window.kind = "sliding" has no SQL form'),
    ],
)
def test_toml_to_sql_writes_the_same_spec_or_names_what_has_no_sql_form(
    pipeline: str, refusal: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``toml-to-sql`` of each shipped pipeline: a .sql file that reads back into the
    same spec and fingerprint (so sql-to-toml of it is the shipped TOML's twin), or one
    line naming the key with no SQL form."""
    path = SHIPPED / f"{pipeline}.toml"
    code = main(["toml-to-sql", str(path)])
    out, err = capsys.readouterr()
    if refusal is not None:
        assert code == 1 and refusal in err and err.count("\n") == 1, err
        return
    assert code == 0, err
    (tmp_path / f"{pipeline}.sql").write_text(out)
    _same(load_spec(tmp_path / f"{pipeline}.sql"), load_spec(path))
    assert "${KAFKA_BOOTSTRAP_SERVERS:-127.0.0.1:9092}" in out  # references as written


def test_the_example_is_the_shipped_demo_pipeline() -> None:
    """docs/examples/clicks_per_minute.sql is pipelines/clicks_per_minute.toml: the same
    spec and fingerprint, so a running demo can move to the SQL file."""
    _same(load_spec(EXAMPLE), load_spec(SHIPPED / "clicks_per_minute.toml"))


@pytest.mark.parametrize(
    ("views", "select", "words"),
    [
        (
            "CREATE VIEW v AS SELECT * FROM clicks WHERE qty > 1;",
            f"{BOUNDS}, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE v, DESCRIPTOR(ts), INTERVAL "
            f"'1' MINUTE)) WHERE amount > 0 {GROUPED}",
            "put the WHERE in the view",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM clicks WHERE qty > 1;\n"
            "CREATE VIEW w AS SELECT * FROM v;",
            f"{BOUNDS}, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE w, DESCRIPTOR(ts), INTERVAL "
            f"'1' MINUTE)) {GROUPED}",
            "CREATE VIEW w: a view over a view",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM clicks WHERE qty > 1;",
            f"{BOUNDS}, COUNT(*) AS n {FLINK} {GROUPED}",
            "CREATE VIEW v: declared but not read",
        ),
    ],
)
def test_a_prestage_view_is_read_once_as_it_is(views: str, select: str, words: str) -> None:
    text = _pipeline_file(select, 0).replace("CREATE TABLE out", views + "\nCREATE TABLE out")
    with pytest.raises(SpecError) as caught:
        parse_spec(text, "p.sql", sql=True)
    assert words in str(caught.value)


def test_a_prestage_view_is_the_prestage_as_written() -> None:
    view = "CREATE VIEW v AS SELECT user_id, ts, amount * 2 AS amount FROM clicks WHERE qty > 1;"
    select = (
        f"{BOUNDS}, SUM(amount) AS s FROM TABLE(TUMBLE(TABLE v, DESCRIPTOR(ts), INTERVAL "
        f"'1' MINUTE)) {GROUPED}"
    )
    text = _pipeline_file(select, 0).replace("CREATE TABLE out", view + "\nCREATE TABLE out")
    spec = parse_spec(text, "p.sql", sql=True)
    assert (
        spec.transform.sql == "SELECT user_id, ts, amount * 2 AS amount FROM clicks WHERE qty > 1"
    )
    assert spec.window.aggregations[0].column == "amount"


def test_a_join_with_a_lookup_stays_in_the_prestage() -> None:
    """A JOIN in [transform].sql is a stream join only between two declared sources;
    with a lookup it is the pre-stage's, as before (tests/test_lookups.py runs one)."""
    import tomli_w

    sql = "SELECT c.*, u.tier FROM clicks c LEFT JOIN users u ON c.user_id = u.user_id"
    document = _document(
        {
            "kind": "tumbling",
            "duration_ms": 1000,
            "event_time_column": "ts",
            "aggregations": [{"agg": "count", "as": "n"}],
        },
        sql,
    )
    document["transform"]["lookups"] = [{"name": "users", "kind": "csv", "path": "/tmp/u.csv"}]
    spec = parse_spec(tomli_w.dumps(document), "p.toml")
    assert spec.transform.sql == sql and spec.transform.join is None


@pytest.mark.parametrize(
    ("select", "sql"),
    [
        ("SELECT * FROM clicks", None),
        (
            "SELECT user_id, amount * 0.908 AS euros FROM clicks WHERE page = '/x'",
            "SELECT user_id, amount * 0.908 AS euros FROM clicks WHERE page = '/x'",
        ),
    ],
)
def test_a_select_without_window_or_join_appends_each_row(select: str, sql: str | None) -> None:
    """``INSERT INTO out SELECT ... FROM src`` with no window, join or GROUP BY is
    ``[transform.append]``, its SELECT as written the ``[transform].sql``; and back."""
    twin = {
        "name": "p",
        "sources": [
            {"name": "clicks", "topic": "t", "bootstrap_servers": "b:9092", "schema": SCHEMA}
        ],
        "transform": {**({"sql": sql} if sql else {}), "append": {}},
        "target": {"kind": "delta", "path": "/tmp/t"},
    }
    expected = PipelineSpec.model_validate(twin)
    _same(parse_spec(_pipeline_file(select, 0), "p.sql", sql=True), expected)
    _same(parse_spec(render_pipeline(twin), "p.sql", sql=True), expected)


def test_a_group_by_without_a_window_is_refused_naming_what_runs() -> None:
    message = _refused("SELECT user_id, count(*) AS n FROM clicks GROUP BY user_id")
    assert "groups by a window" in message and "[transform.append]" in message
