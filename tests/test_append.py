"""``[transform.append]``'s rules (docs/spec-reference.md, "[transform.append]"); its end
to end runs are Nexmark's q0, q1, q2, q14, q21 and q22 (tests/test_nexmark_queries.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from flow_jobs.append.compile import with_position
from flow_jobs.errors import PlanError
from flow_jobs.spec.models import PipelineSpec


def test_the_row_id_is_the_record_s_position_added_to_the_select_list() -> None:
    sql, star = with_position("SELECT a, b * 2 AS c FROM s WHERE a > 1", "s")
    assert sql == (
        "SELECT a, b * 2 AS c, XXHASH64(s._kafka.topic, s._kafka.partition, s._kafka.offset) "
        "AS row_id FROM s WHERE a > 1"
    )
    assert not star
    # a raw source has its position as columns of its own; an alias names the table
    sql, star = with_position("SELECT * FROM s AS x", "s", in_kafka=False)
    assert "XXHASH64(x.topic, x.partition, x.offset) AS row_id" in sql and star


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("SELECT a, count(*) AS n FROM s GROUP BY a", "(GROUP)"),
        ("SELECT DISTINCT a FROM s", "(DISTINCT)"),
        ("SELECT a FROM s JOIN t ON s.a = t.a", "(JOINS)"),
        ("SELECT a FROM s ORDER BY a LIMIT 3", "(LIMIT)"),
        ("SELECT a FROM t", "SELECT ... FROM s [WHERE ...]; this SQL is not one:"),
        ("SELECT a, row_number() OVER (ORDER BY a) AS r FROM s", "this SQL is not one:"),
    ],
)
def test_sql_the_position_cannot_be_added_to_is_refused_naming_row_id(sql: str, why: str) -> None:
    with pytest.raises(PlanError, match=re.escape(why)) as caught:
        with_position(sql, "s")
    assert "set transform.append.row_id" in str(caught.value)


def _doc(sources: int = 1, **transform: Any) -> dict[str, Any]:
    return {
        "name": "append-rules",
        "sources": [
            {
                "name": f"s{i}",
                "topic": f"t{i}",
                "bootstrap_servers": "b:9092",
                "schema": "a BIGINT, b STRING",
            }
            for i in range(sources)
        ],
        "transform": {"append": {}, **transform},
        "target": {"kind": "delta", "path": "/tmp/x"},
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_doc(2, sql="SELECT * FROM s0 UNION ALL SELECT * FROM s1"), "reads one"),
        (
            _doc(
                window={
                    "kind": "tumbling",
                    "duration_ms": 1000,
                    "aggregations": [{"agg": "count", "as": "n"}],
                }
            ),
            "[transform.append] with window",
        ),
        (_doc(append={"row_id": []}), "row_id is empty"),
    ],
)
def test_an_append_reads_one_source_and_nothing_else_runs(
    doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PipelineSpec.model_validate(doc)
    assert PipelineSpec.model_validate(_doc()).transform.append is not None
