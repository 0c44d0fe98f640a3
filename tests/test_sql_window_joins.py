"""Flink SQL's window join spelled in a ``.sql`` pipeline (and in a TOML spec's
``[transform].sql``) is ``[transform.window_join]``: one spec, one fingerprint
(docs/spec-reference.md, "Pipelines in SQL"). The twins are written here from the
spec reference's table, not from the reader."""

from __future__ import annotations

from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from flow_jobs.spec import SpecError, parse_spec
from flow_jobs.spec.fingerprint import fingerprint_fields, fingerprint_of
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.sql import render_pipeline

SCHEMAS = {
    "persons": "id BIGINT, name STRING, ts BIGINT, at BIGINT",
    "auctions": "id BIGINT, seller BIGINT, ts BIGINT, at BIGINT",
}
WINDOWS = {
    "tumbling": ("TUMBLE", {"duration_ms": 10_000}, ["INTERVAL '10' SECOND"]),
    "hopping": (
        "HOP", {"duration_ms": 10_000, "hop_ms": 2_000},
        ["INTERVAL '2' SECOND", "INTERVAL '10' SECOND"],
    ),
    "cumulate": (
        "CUMULATE", {"step_ms": 60_000, "max_duration_ms": 3_600_000},
        ["INTERVAL '1' MINUTE", "INTERVAL '1' HOUR"],
    ),
}  # fmt: skip


def _side(kind: str, table: str, time: str) -> str:
    function, _, sizes = WINDOWS[kind]
    return (
        f"(SELECT * FROM TABLE({function}(TABLE {table}, DESCRIPTOR({time}), {', '.join(sizes)})))"
    )


def _file(query: str, times: dict[str, str], lateness: int) -> str:
    creates = "\n".join(
        f"CREATE TABLE {t} ({SCHEMAS[t]},\n  WATERMARK FOR {times[t]} AS {times[t]} - "
        f"INTERVAL '{lateness}' MILLISECOND\n) WITH ('topic' = '{t}', 'bootstrap_servers' = "
        "'b:9092');"
        for t in ("persons", "auctions")
    )
    return (
        f"SET 'pipeline.name' = 'p';\n{creates}\n"
        "CREATE TABLE out WITH ('kind' = 'delta', 'path' = '/tmp/t');\n"
        f"INSERT INTO out {query};\n"
    )


def _document(join: dict[str, Any], sql: str | None = None) -> dict[str, Any]:
    return {
        "name": "p",
        "sources": [
            {"name": t, "topic": t, "bootstrap_servers": "b:9092", "schema": s}
            for t, s in SCHEMAS.items()
        ],
        "transform": {**({"sql": sql} if sql else {}), "window_join": join},
        "target": {"kind": "delta", "path": "/tmp/t"},
    }


def _same(a: PipelineSpec, b: PipelineSpec) -> None:
    assert a == b
    assert fingerprint_of(fingerprint_fields(a)) == fingerprint_of(fingerprint_fields(b))


@settings(max_examples=40, deadline=None)
@given(
    how=st.sampled_from(["inner", "left", "right", "full", "semi", "anti", "semi_in"]),
    kind=st.sampled_from(list(WINDOWS)),
    times=st.sampled_from([("ts", "ts"), ("ts", "at")]),
    renamed=st.booleans(),
    lateness=st.integers(0, 5_000),
)
def test_a_window_join_in_sql_is_the_spec_of_its_twin(
    how: str, kind: str, times: tuple[str, str], renamed: bool, lateness: int
) -> None:
    lt, rt = times
    left, right = _side(kind, "persons", lt), _side(kind, "auctions", rt)
    outer = how in ("right", "full")
    bounds = [
        f"COALESCE(p.{b}, a.{b})" if outer else f"p.{b}" for b in ("window_start", "window_end")
    ]
    if renamed or outer:
        bounds = [f"{bounds[0]} AS starttime", f"{bounds[1]} AS endtime"]
    columns = [*bounds, "p.id", "p.name AS person"]
    same_window = "p.window_start = a.window_start AND p.window_end = a.window_end"
    if how in ("semi", "anti"):
        exists = "EXISTS" if how == "semi" else "NOT EXISTS"
        query = (
            f"SELECT {', '.join(columns)} FROM {left} p WHERE {exists} (SELECT * FROM {right} a "
            f"WHERE p.id = a.seller AND {same_window})"
        )
    elif how == "semi_in":
        query = (
            f"SELECT {', '.join(columns)} FROM {left} p WHERE p.id IN (SELECT a.seller FROM "
            f"{right} a WHERE {same_window})"
        )
    else:
        columns.append("a.id AS auction")
        join = {"inner": "JOIN", "left": "LEFT JOIN", "right": "RIGHT JOIN", "full": "FULL JOIN"}
        query = (
            f"SELECT {', '.join(columns)} FROM {left} p {join[how]} {right} a "
            f"ON p.id = a.seller AND {same_window}"
        )
    twin: dict[str, Any] = {
        "left_source": "persons",
        "right_source": "auctions",
        "left_keys": ["id"],
        "right_keys": ["seller"],
        "how": "semi" if how == "semi_in" else how,
        "kind": kind,
        **WINDOWS[kind][1],
        "lateness_ms": lateness,
        "output_left_columns": {"id": "id", "name": "person"},
        **({"event_time_column": lt} if lt == rt else {}),
        **({"left_event_time_column": lt, "right_event_time_column": rt} if lt != rt else {}),
        **({"window_start_column": "starttime", "window_end_column": "endtime"}
           if renamed or outer else {}),
        **({"output_right_columns": {"id": "auction"}} if how in ("inner", "left", "right", "full")
           else {}),
    }  # fmt: skip
    expected = PipelineSpec.model_validate(_document(twin))
    _same(
        parse_spec(_file(query, {"persons": lt, "auctions": rt}, lateness), "p.sql", sql=True),
        expected,
    )
    # the same query as a TOML spec's [transform].sql, its lateness beside it
    document = _document({"lateness_ms": lateness}, query)
    _same(parse_spec(tomli_w.dumps(document), "p.toml"), expected)
    # and back: toml-to-sql's file reads as the same spec
    _same(parse_spec(render_pipeline(_document(twin)), "p.sql", sql=True), expected)


TUMBLE_P = _side("tumbling", "persons", "ts")
TUMBLE_A = _side("tumbling", "auctions", "ts")
SAME = "p.window_start = a.window_start AND p.window_end = a.window_end"


@pytest.mark.parametrize(
    ("query", "words"),
    [
        (
            f"SELECT p.window_start, p.window_end, p.id FROM {TUMBLE_P} p WHERE p.id NOT IN "
            f"(SELECT a.seller FROM {TUMBLE_A} a WHERE {SAME})",
            "write the anti join as NOT EXISTS",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id, a.id AS a_id FROM {TUMBLE_P} p JOIN "
            f"{TUMBLE_A} a ON p.id = a.seller AND p.window_start = a.window_start",
            "also needs p.window_end = a.window_end",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id, a.id AS a_id FROM {TUMBLE_P} p JOIN "
            f"{_side('hopping', 'auctions', 'ts')} a ON p.id = a.seller AND {SAME}",
            "the two sides' windows differ",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id, a.id AS a_id FROM {TUMBLE_P} p JOIN "
            f"{TUMBLE_A} a ON {SAME}",
            "a window join pairs keys",
        ),
        (
            f"SELECT p.id, p.window_start, p.window_end FROM {TUMBLE_P} p WHERE EXISTS "
            f"(SELECT * FROM {TUMBLE_A} a WHERE p.id = a.seller AND {SAME})",
            "select the window's bounds first",
        ),
        (
            f"SELECT p.id FROM {TUMBLE_P} p WHERE EXISTS "
            f"(SELECT * FROM {TUMBLE_A} a WHERE p.id = a.seller AND {SAME})",
            "select window_start first",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id, a.id AS a_id FROM {TUMBLE_P} p WHERE "
            f"EXISTS (SELECT * FROM {TUMBLE_A} a WHERE p.id = a.seller AND {SAME})",
            "writes the left side's columns only",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id, a.id AS a_id FROM {TUMBLE_P} p JOIN "
            "(SELECT * FROM TABLE(SESSION(TABLE auctions PARTITION BY seller, DESCRIPTOR(ts), "
            f"INTERVAL '5' SECOND))) a ON p.id = a.seller AND {SAME}",
            "sessions are each key's own",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id, a.id AS a_id FROM {TUMBLE_P} p JOIN "
            f"{TUMBLE_A} a ON p.id = a.seller AND {SAME} AND p.ts < a.ts",
            "a window join's condition has key equalities",
        ),
        (
            f"SELECT p.window_start, p.window_end, p.id FROM {TUMBLE_P} p WHERE p.id > 3",
            "is a window join",
        ),
    ],
)
def test_a_window_join_without_a_twin_is_refused_naming_why(query: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_file(query, {"persons": "ts", "auctions": "ts"}, 0), "p.sql", sql=True)
    assert words in str(caught.value)
