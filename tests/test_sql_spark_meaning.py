"""Spark's spelling means what Spark means (issue 49): each windowed query we accept
in Spark's spelling, run by Spark itself as a batch query over the same events, gives
the windows that the keys we read it as give by the spec reference's rules
(tests/reference.py). So our reading of ``window(ts, size, slide)``,
``session_window``, ``min_by`` / ``max_by``, ``count(col)``, ``count(DISTINCT)``,
``approx_count_distinct`` and ``collect_list`` is pinned to the Spark we ship, at the
boundaries: events exactly a window's size, a slide or a session's gap apart, NULL
keys and values, negative and large amounts."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.spec.aggregation import AGGREGATOR_RULES
from flow_jobs.sql import lift_transform
from tests.reference import reference_windows
from tests.support import BASE_MS

SELECTS = {
    "count(*)": ("n", ("count", None, "n")),
    "count(amount)": ("n_amount", ("count", "amount", "n_amount")),
    "sum(amount)": ("total", ("sum", "amount", "total")),
    "min(page)": ("page_min", ("min", "page", "page_min")),
    "max(amount)": ("amount_max", ("max", "amount", "amount_max")),
    "avg(amount)": ("amount_avg", ("avg", "amount", "amount_avg")),
    "min_by(page, ts) FILTER (WHERE page IS NOT NULL)": (
        "first_page",
        ("first", "page", "first_page"),
    ),
    "max_by(amount, ts) FILTER (WHERE amount IS NOT NULL)": (
        "last_amount",
        ("last", "amount", "last_amount"),
    ),
    "count(DISTINCT page)": ("pages", ("count_distinct", "page", "pages", {"mode": "exact"})),
    "approx_count_distinct(page)": ("pages_hll", ("count_distinct", "page", "pages_hll")),
    "collect_list(page)": ("trail", ("collect", "page", "trail")),
}
GROUPS = {
    "tumbling": "window(ts, '10 seconds')",
    "hopping": "window(ts, '10 seconds', '4 seconds')",
    "session": "session_window(ts, '3 seconds')",
}


def _events() -> list[dict[str, Any]]:
    """Distinct times (min_by / max_by have no tie to break), some exactly a size, a
    slide or a gap after the one before; NULL keys, pages and amounts."""
    rng = random.Random("spark-meaning")
    t, events = BASE_MS, []
    for i in range(160):
        t += rng.choice([1, 250, 999, 1_000, 2_999, 3_000, 3_001, 4_000, 10_000])
        events.append(
            {
                "user_id": rng.choice(["a", "b", None]),
                "page": rng.choice(["/home", "/cart", "/pay", None]),
                "amount": rng.choice([None, -3.5, 0.0, 12.25, 1e15, round(rng.uniform(0, 99), 2)]),
                "ts": t,
                "_arrival": (0, i),
            }
        )
    return events


def _ms(t: datetime) -> int:
    return (
        round(t.replace(tzinfo=UTC).timestamp() * 1000)
        if t.tzinfo is None
        else round(t.timestamp() * 1000)
    )


@pytest.mark.parametrize("kind", list(GROUPS))
def test_spark_runs_a_spark_spelled_query_as_we_read_it(kind: str, spark: SparkSession) -> None:
    struct = "session_window" if kind == "session" else "window"
    query = (
        f"SELECT {struct}.start AS window_start, {struct}.end AS window_end, user_id, "
        + ", ".join(f"{expr} AS {alias}" for expr, (alias, _) in SELECTS.items())
        + f" FROM clicks GROUP BY {GROUPS[kind]}, user_id"
    )
    # our reading: the keys the query is lifted into
    bound = {"as": "pages", "max_distinct_values_per_group": 1000}
    transform = lift_transform(
        {"sql": query, "window": {"aggregations": [bound]}}, AGGREGATOR_RULES
    )
    window = transform["window"]
    aggregations = [
        (a["agg"], a.get("column"), a["as"], {k: v for k, v in a.items() if k == "mode"})
        for a in window["aggregations"]
    ]
    assert [a[2] for a in aggregations] == [alias for alias, _ in SELECTS.values()]
    assert [(a[0], a[1]) for a in aggregations] == [spec[:2] for _, spec in SELECTS.values()]
    events = _events()
    expected = reference_windows(
        events,
        kind=window["kind"],
        time_key="ts",
        duration_ms=window.get("duration_ms"),
        hop_ms=window.get("hop_ms"),
        gap_ms=window.get("gap_ms"),
        group_by=window["group_by"],
        aggregations=aggregations,
        watermark_ms=max(e["ts"] for e in events) + 86_400_000,  # every window closed
    )
    # Spark's meaning: the same query over the same events, as a batch
    rows = [{k: v for k, v in e.items() if not k.startswith("_")} for e in events]
    frame = spark.createDataFrame(rows, "user_id STRING, page STRING, amount DOUBLE, ts BIGINT")
    frame.selectExpr(
        "user_id", "page", "amount", "timestamp_millis(ts) AS ts"
    ).createOrReplaceTempView("clicks")
    actual = {}
    for row in spark.sql(query).collect():
        values = row.asDict()
        key = (
            _ms(values.pop("window_start")),
            _ms(values.pop("window_end")),
            values.pop("user_id"),
        )
        values["trail"] = sorted(values["trail"])  # collect_list's order is Spark's choice
        actual[key] = values
    reference = {}
    for (start, end, user), values in expected.items():
        values = dict(values)
        values["trail"] = sorted(values["trail"])
        reference[(_ms(start), _ms(end), user)] = values
    assert reference, "the reference closed no window: the test would prove nothing"
    assert actual.keys() == reference.keys()
    for key, want in reference.items():
        got = actual[key]
        for column, value in want.items():
            if isinstance(value, float) and got[column] is not None:
                assert got[column] == pytest.approx(value, rel=1e-12), (key, column)
            else:
                assert got[column] == value, (key, column, got[column], value)
