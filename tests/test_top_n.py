"""``[transform.window.top_n]``: only the top N rows of each window (and partition).

The reference ranks by the rule in docs/spec-reference.md ("Top N"), written here on its
own with Python's sort: within (window_start, window_end, partition_by), ``order_by``
in its directions, then the group keys ascending; NULL after every value in either
direction, NaN above every number.
"""

from __future__ import annotations

import functools
import math
import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.types.json import Jsonb
from pyspark.sql import SparkSession

from assets.check_rules import check_top_n_bounded
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.top_n.ranking import Ranking, rank
from flow_jobs_dev.broker import EmbeddedBroker
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    iceberg_table,
    iceberg_target,
    random_clicks,
    read_iceberg,
    read_windows,
    send,
    to_records,
)
from tests.test_state_store import read_postgres


def _compare(a: Any, b: Any, descending: bool) -> int:
    """One key: NULL last in either direction, NaN above every number."""
    if a is None or b is None:
        return (a is None) - (b is None)
    a_nan = isinstance(a, float) and math.isnan(a)
    b_nan = isinstance(b, float) and math.isnan(b)
    order = a_nan - b_nan if a_nan or b_nan else (a > b) - (a < b)
    return -order if descending else order


def reference_top(
    rows: list[dict[str, Any]],
    n: int,
    order: list[tuple[str, bool]],  # (column, descending)
    partition: list[str],
    groups: list[str],
    with_ties: bool = False,
) -> list[dict[str, Any]]:
    """The first n rows of each partition; ``with_ties``: the rows whose RANK() (one
    plus the rows strictly ahead on ``order``) is at most n."""
    by_partition: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        key = tuple(
            ("NaN",) if isinstance(r[c], float) and math.isnan(r[c]) else r[c]
            for c in ("window_start", "window_end", *partition)
        )
        by_partition.setdefault(key, []).append(r)

    def cmp(a: dict[str, Any], b: dict[str, Any]) -> int:
        for column, descending in [*order, *((g, False) for g in groups)]:
            c = _compare(a[column], b[column], descending)
            if c:
                return c
        return 0

    def ahead(a: dict[str, Any], b: dict[str, Any]) -> bool:
        for column, descending in order:
            c = _compare(a[column], b[column], descending)
            if c:
                return c < 0
        return False

    if with_ties:
        return [
            r
            for members in by_partition.values()
            for r in members
            if 1 + sum(ahead(o, r) for o in members) <= n
        ]
    return [
        r
        for members in by_partition.values()
        for r in sorted(members, key=functools.cmp_to_key(cmp))[:n]
    ]


values = st.one_of(st.none(), st.integers(-3, 3).map(float), st.just(math.nan), st.just(math.inf))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2), st.sampled_from(["a", "b", None]), st.integers(0, 3), values,
            st.integers(0, 2),
        ),
        max_size=40,
        unique_by=lambda r: (r[0], r[1], r[2]),  # the natural key: window, groups
    ),
    st.integers(1, 3),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)  # fmt: skip
def test_rank_keeps_the_reference_top_n(
    rows: list[tuple], n: int, descending: bool, partitioned: bool, with_ties: bool
) -> None:
    table = pa.table(
        {
            "window_start": pa.array([r[0] for r in rows], pa.int64()),
            "window_end": pa.array([r[0] + 10 for r in rows], pa.int64()),
            "page": pa.array([r[1] for r in rows], pa.string()),
            "user": pa.array([r[2] for r in rows], pa.int64()),
            "score": pa.array([r[3] for r in rows], pa.float64()),
            "n": pa.array([r[4] for r in rows], pa.int64()),
        }
    )
    direction = "descending" if descending else "ascending"
    partition = ("page",) if partitioned else ()
    ranking = Ranking(
        n, "window_start", "window_end", partition, (("score", direction), ("n", "ascending")),
        ("page", "user"), with_ties,
    )  # fmt: skip
    got = rank(table, ranking).to_pylist()
    want = reference_top(
        table.to_pylist(), n, [("score", descending), ("n", False)], list(partition),
        ["page", "user"], with_ties,
    )  # fmt: skip
    assert sorted(map(repr, got)) == sorted(map(repr, want))


# -- end to end --------------------------------------------------------------------------

LATENESS = 3_000
N = 2
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum")]
ORDER = [("n", True), ("amount_sum", True)]


def _spec(workdir: Path, bootstrap: str, topic: str, emit: str, target: dict, tiny: bool):
    return PipelineSpec.model_validate(
        {
            "name": f"top-n-{workdir.name}",
            "sources": [
                {
                    "name": "clicks",
                    "kind": "kafka",
                    "topic": topic,
                    "bootstrap_servers": bootstrap,
                    "format": "json",
                    "schema": "user_id STRING, page STRING, amount DOUBLE, qty INT, ts BIGINT",
                    **({"max_offsets_per_trigger": 40} if tiny else {}),
                }
            ],
            "transform": {
                "window": {
                    "kind": "hopping",
                    "duration_ms": 6_000,
                    "hop_ms": 3_000,
                    "event_time_column": "ts",
                    "lateness_ms": LATENESS,
                    "emit": emit,
                    "group_by": ["page", "user_id"],
                    "aggregations": [
                        {"agg": a, **({"column": c} if c else {}), "as": name}
                        for a, c, name in AGGREGATIONS
                    ],
                    "top_n": {
                        "n": N,
                        "order_by": ["n DESC", "amount_sum DESC"],
                        "partition_by": ["page"],
                    },
                }
            },
            "target": target,
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


def _events(seed: str) -> list[dict[str, Any]]:
    """NULL keys and values, equal counts (ties broken by the sum, then the keys),
    equal event times, disorder within the lateness."""
    rng = random.Random(seed)
    events = random_clicks(
        rng, 360, keys=("a", "b", "c", "d", None), step_ms=100, disorder_ms=1_500
    )
    for i, e in enumerate(events):
        e["page"] = rng.choice(["/x", "/y", None])
        if rng.random() < 0.3:
            e["amount"] = 1.0  # equal sums too
        if i % 7 == 6:
            e["ts"] = events[i - 1]["ts"]  # an equal event time
    return events


@pytest.mark.parametrize(
    ("emit", "kind"),
    [("final", "delta"), ("current", "delta"), ("current", "postgres"), ("current", "iceberg")],
)
def test_the_target_holds_the_top_n_of_each_window_under_any_cut(
    emit: str, kind: str, spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Three partitions; tiny micro-batches with a restart halfway, and one micro-batch
    per half: both targets hold the reference's top N of every window (emit = "final":
    the closed ones; "current": every one, as it stands), nothing else."""
    topic = f"top-n-{emit}-{kind}-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=3)
    events = _events(f"{emit}-{kind}")
    half = len(events) // 2
    # late rows in the second half: far behind the first half's watermark, so late
    # under either cut, counted and kept out of every window
    late = [{**e, "amount": 1_000.0} for e in events[:30:5]]
    second = list(events[half:])
    for row in late:
        second.insert(random.Random(len(second)).randrange(len(second) + 1), row)
    schema = os.environ["FLOW_STATE_STORE_SCHEMA"]
    targets = {
        tag: {
            "delta": {"kind": "delta", "path": str(workdir / tag / "target")},
            "postgres": {"kind": "postgres", "table": f"top_{tag}_{schema}"},
            "iceberg": iceberg_target(workdir / tag, f"top_{tag}"),
        }[kind]
        for tag in ("tiny", "one")
    }
    specs = {
        tag: _spec(workdir / tag, broker.bootstrap_servers, topic, emit, t, tag == "tiny")
        for tag, t in targets.items()
    }
    send(broker.bootstrap_servers, topic, to_records(events[:half], partitions=3))
    for spec in specs.values():
        PipelineRunner(spec, spark).run(available_now=True)
    send(broker.bootstrap_servers, topic, to_records(second, partitions=3))
    deleted = {}
    for tag, spec in specs.items():  # a new runner on the same checkpoint: a restart
        summary = PipelineRunner(spec, spark).run(available_now=True)
        assert summary.late_rows == len(late), tag
        deleted[tag] = summary.windows_superseded

    current = emit == "current"
    windows = reference_windows(
        events,
        kind="hopping",
        time_key="ts",
        duration_ms=6_000,
        hop_ms=3_000,
        group_by=["page", "user_id"],
        aggregations=AGGREGATIONS,
        # current: every window as it stands, open ones too
        watermark_ms=2**62 if current else max(e["ts"] for e in events) - LATENESS,
        current=current,
    )
    rows = [
        {"window_start": k[0], "window_end": k[1], "page": k[2], "user_id": k[3], **v}
        for k, v in windows.items()
    ]
    top = reference_top(rows, N, ORDER, ["page"], ["page", "user_id"])
    expected = {(r["window_start"], r["window_end"], r["page"], r["user_id"]): r for r in top}
    assert len(expected) < len(rows), "the top N must leave rows out"
    for tag, spec in specs.items():
        key = spec.natural_key()
        if kind == "delta":
            got = read_windows(spec.target.path, key)
        elif kind == "postgres":
            got = read_postgres(targets[tag]["table"], key)
        else:
            got = read_iceberg(targets[tag], key)
        assert_same_windows(got, {k: {a: v[a] for _, _, a in AGGREGATIONS} for k, v in
                                  expected.items()})  # fmt: skip
        # the Dagster check: no window over n rows; a row too many makes it fail
        ledger = LedgerStore.for_spec(spec)
        assert check_top_n_bounded(spec, ledger).passed
    if kind in ("postgres", "iceberg"):
        sizes: dict[tuple, int] = {}
        for k in expected:
            sizes[k[:3]] = sizes.get(k[:3], 0) + 1
        full = next(k for k in expected if sizes[k[:3]] == N)  # a window at its n rows
        extra = dict(expected[full], user_id="zz")
    if kind == "iceberg":
        table = iceberg_table(targets["one"])
        columns = table.schema().as_arrow()
        table.append(pa.Table.from_pylist([{c: extra.get(c) for c in columns.names}], columns))
        assert not check_top_n_bounded(specs["one"], ledger).passed
    if kind == "postgres":
        with ledger.connect() as conn:
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT * FROM jsonb_populate_record(NULL::{}, %s)").format(
                    sql.Identifier(targets["one"]["table"]), sql.Identifier(targets["one"]["table"])
                ),
                (Jsonb({k: str(v) if hasattr(v, "isoformat") else v for k, v in extra.items()}),),
            )
        assert not check_top_n_bounded(specs["one"], ledger).passed
    if current:
        assert deleted["tiny"] > 0, "rows must have left the top N"


# -- spec rules --------------------------------------------------------------------------


def _window(**keys: Any) -> dict[str, Any]:
    return {
        "kind": "tumbling",
        "duration_ms": 1_000,
        "group_by": ["page", "user_id"],
        "aggregations": [{"agg": "count", "as": "n"}, {"agg": "collect", "column": "qty",
                                                        "as": "qtys"}],
        "top_n": {"n": 3, "order_by": ["n DESC"]},
        **keys,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("window", "target", "message"),
    [
        (_window(kind="session", gap_ms=5, duration_ms=None), "delta", 'kind = "session"'),
        (_window(top_n={"n": 1, "order_by": ["n"]}), "delta", "give an aggregation alias"),
        (_window(top_n={"n": 1, "order_by": ["x DESC"]}), "delta", "'x' is not an aggregation"),
        (_window(top_n={"n": 1, "order_by": ["qtys ASC"]}), "delta", "is a collect"),
        (
            _window(top_n={"n": 1, "order_by": ["n DESC"], "partition_by": ["ts"]}),
            "delta",
            "'ts' is not a group_by column",
        ),
        (_window(emit="current"), "kafka", "cannot take top_n with emit"),
    ],
)
def test_top_n_rules(window: dict[str, Any], target: str, message: str) -> None:
    targets = {
        "delta": {"kind": "delta", "path": "/tmp/x"},
        "kafka": {"kind": "kafka", "topic": "out", "bootstrap_servers": "127.0.0.1:9092"},
    }
    doc = {
        "name": "top-rules",
        "sources": [{"name": "clicks", "topic": "clicks", "bootstrap_servers": "127.0.0.1:9092",
                     "schema": "user_id STRING, page STRING, qty INT"}],
        "transform": {"window": {k: v for k, v in window.items() if v is not None}},
        "target": targets[target],
    }  # fmt: skip
    with pytest.raises(ValueError, match=message):
        PipelineSpec.model_validate(doc)
