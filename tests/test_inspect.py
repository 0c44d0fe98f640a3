"""``flow-jobs inspect``: the open windows in a pipeline's state, with their partial
aggregates, equal a reference computed from the events and the documented close rules
(docs/spec-reference.md, Windows: a tumbling window closes when the watermark reaches
its end, a sliding window [t - duration, t] when the watermark passes t; the watermark
is the highest event time minus ``lateness_ms``)."""

from __future__ import annotations

import json
import math
import random
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.inspect import NO_STATE, inspect_state
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import make_spec, random_clicks, send, to_records

AGGREGATIONS = [{"agg": "count", "as": "n"}, {"agg": "sum", "column": "amount", "as": "spent"}]
LATENESS = 12_000


def _spec_file(spec: PipelineSpec, workdir: Path) -> Path:
    path = workdir / f"{spec.name}.toml"
    path.write_text(tomli_w.dumps(spec.to_document()))
    return path


def _run(
    broker: EmbeddedBroker, spark: SparkSession, workdir: Path, window: dict[str, Any]
) -> tuple[Path, list[dict[str, Any]]]:
    """Events of two users over three partitions, run with --available-now semantics."""
    topic = f"inspect-{window['kind']}-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=3)
    events = random_clicks(
        random.Random(window["kind"]), 240, keys=("a", "b"), step_ms=250, disorder_ms=1_000
    )
    send(broker.bootstrap_servers, topic, to_records(events, partitions=3))
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        {
            **window,
            "event_time_column": "ts",
            "lateness_ms": LATENESS,
            "group_by": ["user_id"],
            "aggregations": AGGREGATIONS,
        },
        name=f"inspect-{window['kind']}",
        source={"max_offsets_per_trigger": 100},
    )
    path = _spec_file(spec, workdir)
    summary = PipelineRunner(load_spec(path), spark).run(available_now=True)
    assert summary.late_rows == 0 and summary.input_rows == len(events)
    return path, events


def _partials(rows: list[dict[str, Any]]) -> dict[str, Any]:
    amounts = [r["amount"] for r in rows if r["amount"] is not None]
    return {"n": len(rows), "spent": sum(amounts) if amounts else None}


def _ms(value: datetime | str) -> int:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return round(value.timestamp() * 1000)


def _assert_same(actual: dict[tuple, dict], expected: dict[tuple, dict]) -> None:
    assert expected, "no open window in the reference: the test would prove nothing"
    assert actual.keys() == expected.keys()
    for key, want in expected.items():
        got = actual[key]
        assert got["n"] == want["n"], key
        assert (got["spent"] is None) == (want["spent"] is None), key
        if want["spent"] is not None:
            assert math.isclose(got["spent"], want["spent"], rel_tol=1e-9), key


def test_open_tumbling_windows_and_partials_equal_the_reference(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path, capsys: pytest.CaptureFixture
) -> None:
    duration = 10_000
    path, events = _run(broker, spark, workdir, {"kind": "tumbling", "duration_ms": duration})
    watermark = max(e["ts"] for e in events) - LATENESS
    windows: dict[tuple, list] = defaultdict(list)
    for e in events:
        start = e["ts"] - e["ts"] % duration
        if start + duration > watermark:  # closes when watermark >= end: still open
            windows[(start, start + duration, e["user_id"])].append(e)
    expected = {k: _partials(rows) for k, rows in windows.items()}
    assert len({k[0] for k in expected}) >= 2, "want several open windows per group"

    spec = load_spec(path)
    report = inspect_state(spark, spec, store=LedgerStore.for_spec(spec), limit=100)

    assert _ms(report.watermark) == watermark
    assert report.held_back_by == ("clicks",)
    assert report.open_windows == len(expected)
    actual = {(_ms(w.start), _ms(w.end), w.group["user_id"]): w.aggregates for w in report.windows}
    _assert_same(actual, expected)
    ends = [_ms(w.end) for w in report.windows]
    assert ends == sorted(ends), "the windows that close first come first"
    assert all(w.waiting_for == ("clicks",) for w in report.windows)

    # The CLI: --json, --group, --limit
    assert main(["inspect", str(path), "--json", "--group", "user_id=a", "--limit", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"pipeline", "batch_id", "watermark", "source_watermarks",
                        "held_back_by", "windows", "open_windows"}  # fmt: skip
    assert out["pipeline"] == spec.name and _ms(out["watermark"]) == watermark
    assert out["open_windows"] == sum(1 for k in expected if k[2] == "a")
    assert len(out["windows"]) == 2
    for w in out["windows"]:
        assert set(w) >= {"start", "end", "group", "aggregates", "closes_when", "waiting_for"}
        key = (_ms(w["start"]), _ms(w["end"]), "a")
        assert w["group"] == {"user_id": "a"} and key in expected
        _assert_same({key: w["aggregates"]}, {key: expected[key]})

    # The table: group column, the aggregates by their names, why each is open.
    assert main(["inspect", str(path)]) == 0
    table = capsys.readouterr().out
    assert "window start" in table and "user_id" in table and "spent" in table
    first = min(expected)
    end = datetime.fromtimestamp(first[1] / 1000, tz=UTC).strftime("%H:%M:%S")
    assert f">= end {end}; waiting for clicks" in table
    assert f"open windows: {len(expected)}" in table
    assert "\x1b[" not in table, "plain text when stdout is not a terminal"


def test_open_cumulate_windows_and_partials_equal_the_reference(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Cumulating windows on Spark's aggregation: every step's window of the
    cumulations still open, with its running partials (docs/spec-reference.md, Windows)."""
    step, most = 5_000, 20_000
    window = {"kind": "cumulate", "step_ms": step, "max_duration_ms": most}
    path, events = _run(broker, spark, workdir, window)
    watermark = max(e["ts"] for e in events) - LATENESS
    windows: dict[tuple, list] = defaultdict(list)
    for e in events:
        start = e["ts"] - e["ts"] % most
        for end in range(start + step, start + most + 1, step):
            if e["ts"] < end and end > watermark:  # holds the row, still open
                windows[(start, end, e["user_id"])].append(e)
    expected = {k: _partials(rows) for k, rows in windows.items()}
    assert len({k[1] for k in expected}) >= 3, "want several open steps per group"

    spec = load_spec(path)
    report = inspect_state(spark, spec, store=LedgerStore.for_spec(spec), limit=100)

    assert _ms(report.watermark) == watermark
    assert report.open_windows == len(expected)
    actual = {(_ms(w.start), _ms(w.end), w.group["user_id"]): w.aggregates for w in report.windows}
    _assert_same(actual, expected)


def test_open_sliding_windows_are_decoded_from_the_state_api(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    duration = 3_000
    path, events = _run(broker, spark, workdir, {"kind": "sliding", "duration_ms": duration})
    watermark = max(e["ts"] for e in events) - LATENESS
    by_group: dict[str, list] = defaultdict(list)
    for e in events:
        by_group[e["user_id"]].append(e)
    expected = {}
    for user, rows in by_group.items():
        for t in {r["ts"] for r in rows if r["ts"] >= watermark}:  # closes when watermark > t
            inside = [r for r in rows if t - duration <= r["ts"] <= t]
            expected[(t - duration, t, user)] = _partials(inside)

    spec = load_spec(path)
    report = inspect_state(spark, spec, store=LedgerStore.for_spec(spec), limit=1_000)

    assert _ms(report.watermark) == watermark
    assert report.open_windows == len(expected)
    actual = {(_ms(w.start), _ms(w.end), w.group["user_id"]): w.aggregates for w in report.windows}
    _assert_same(actual, expected)
    assert all("> end" in w.closes_when for w in report.windows)


@pytest.mark.parametrize("kind", ["sliding", "count_sliding"])
def test_open_state_windows_show_what_the_operator_emits(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path, kind: str
) -> None:
    """With ``emit = "current"`` the target holds every open window as the operator last
    emitted it; ``inspect`` computes the same windows from the state with the operator's
    own aggregators, so each open window's aggregates equal its row in the target, every
    aggregator but ``reduce`` (not run by inspect) and the sketch's bytes included."""
    topic = f"inspect-emitted-{kind}-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=3)
    events = random_clicks(
        random.Random(kind), 180, keys=("a", "b"), step_ms=250, disorder_ms=1_000
    )
    send(broker.bootstrap_servers, topic, to_records(events, partitions=3))
    size = {"duration_ms": 3_000} if kind == "sliding" else {"count": 5}
    aggregations = [
        {"agg": "count", "as": "n"},
        {"agg": "count", "column": "amount", "as": "amounts"},
        {"agg": "sum", "column": "amount", "as": "spent"},
        {"agg": "avg", "column": "qty", "as": "qty_avg"},
        {"agg": "min", "column": "page", "as": "least_page"},
        {"agg": "max", "column": "amount", "as": "most"},
        {"agg": "first", "column": "page", "as": "first_page"},
        {"agg": "last", "column": "amount", "as": "last_amount"},
        {"agg": "collect", "column": "qty", "as": "qtys"},
        {"agg": "count_distinct", "column": "page", "as": "pages"},
        {"agg": "count_distinct", "column": "qty", "as": "qty_kinds", "mode": "exact",
         "max_distinct_values_per_group": 100},
    ]  # fmt: skip
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        {
            "kind": kind,
            **size,
            "emit": "current",
            "event_time_column": "ts",
            "lateness_ms": LATENESS,
            "group_by": ["user_id"],
            "aggregations": aggregations,
        },
        name=f"inspect-emitted-{kind.replace('_', '-')}",
        source={"max_offsets_per_trigger": 40},
    )
    path = _spec_file(spec, workdir)
    PipelineRunner(load_spec(path), spark).run(available_now=True)

    report = inspect_state(spark, spec, store=LedgerStore.for_spec(spec), limit=10_000)
    assert report.open_windows and report.open_windows == len(report.windows)
    count = kind.startswith("count_")  # a count window is known by its index (ties)
    emitted = {
        (
            r["window_index"] if count else _ms(r["window_start"]),
            _ms(r["window_end"]),
            r["user_id"],
        ): r
        for r in read_delta(spec.target.path).to_pylist()
    }
    for w in report.windows:
        row = emitted[(w.index if count else _ms(w.start), _ms(w.end), w.group["user_id"])]
        for a in aggregations:
            got, want = w.aggregates[a["as"]], row[a["as"]]
            if isinstance(want, float):
                assert got is not None and math.isclose(got, want, rel_tol=1e-12), a
            else:
                assert got == want, (w, a["as"], got, want)


def test_a_pipeline_that_has_not_run_has_no_state_yet(
    workdir: Path, capsys: pytest.CaptureFixture
) -> None:
    window = {"kind": "tumbling", "duration_ms": 1_000, "aggregations": AGGREGATIONS[:1]}
    path = _spec_file(make_spec(workdir, "127.0.0.1:9", "never", window), workdir)

    assert main(["inspect", str(path)]) == 0
    assert NO_STATE in capsys.readouterr().out
    assert main(["inspect", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["note"] == NO_STATE and out["windows"] == [] and out["batch_id"] is None


def test_group_must_name_a_group_by_column(workdir: Path, capsys: pytest.CaptureFixture) -> None:
    window = {"kind": "tumbling", "duration_ms": 1_000, "group_by": ["user_id"],
              "aggregations": AGGREGATIONS[:1]}  # fmt: skip
    path = _spec_file(make_spec(workdir, "127.0.0.1:9", "never", window), workdir)

    assert main(["inspect", str(path), "--group", "page=/home"]) == 2
    assert "--group page=/home" in capsys.readouterr().err


def test_inspect_lists_a_joins_buffered_rows(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """A join's state is its buffered rows per side. Each listed row is one of that
    side's events (its key and event time), and every row that can still find a match
    (event time at or after the watermark: no other side's row can have passed it) is
    listed; an inner join keeps no row with a NULL key."""
    from tests.test_joins import _send, _spec, _streams

    broker.create_topic(topic + "-pay", partitions=2)
    topics = (topic, topic + "-pay")
    orders, payments = _streams(random.Random("inspect-join"), 120)
    _send(broker, topics[0], orders)
    _send(broker, topics[1], payments)
    spec = _spec(workdir, broker, topics, {"how": "inner", "time_window_ms": 4_000})
    assert PipelineRunner(spec, spark).run(available_now=True).input_rows > 0
    report = inspect_state(spark, spec, limit=100_000)
    assert report.has_state and report.watermark is not None
    assert report.buffered_join_rows == len(report.join_rows) > 0
    watermark = _ms(report.watermark)
    sent = {"left": orders, "right": payments}
    for side, rows in sent.items():
        listed = {
            (r.key["order_id"], _ms(r.event_time)) for r in report.join_rows if r.side == side
        }
        events = {(e["order_id"], e["ts"]) for e in rows if e["order_id"] is not None}
        assert listed <= events, (side, listed - events)
        still_matchable = {(k, ts) for k, ts in events if ts >= watermark}
        assert still_matchable <= listed, (side, still_matchable - listed)
    assert {r.side for r in report.join_rows} == {"left", "right"}
