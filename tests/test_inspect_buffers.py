"""``flow-jobs inspect`` reads every open native window's aggregates from Spark's state,
whether the window merges the Kafka reader's partials or aggregates plainly (issue 47).

Each inspected value of every open window equals a reference computed from the produced
events by the aggregates' definitions (tests/reference.py: SQL's NULL rules, ``first`` /
``last`` in event time then Kafka position), on the demo's own pipeline and, for every
aggregator that pre-aggregates and every native window kind, on messy data (three
partitions, equal timestamps, NULL keys and values), pre-aggregated and not, in one
micro-batch and in tiny ones: the layout the compiled plan says the state holds reads
the same either way. A window is open while the watermark (the highest event time minus
``lateness_ms``) is below its end (docs/spec-reference.md, Windows).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.aggregations import NOT_DECODED
from flow_jobs.cli import main
from flow_jobs.combine.decide import MARKER
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.inspect import StateReport, inspect_state
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from flow_jobs_dev.sample_events import sample_clicks
from tests.reference import reference_windows
from tests.support import BASE_MS, assert_same_windows, make_spec, send

DEMO_SPEC = Path(__file__).parent.parent / "pipelines" / "clicks_per_minute.toml"
#: Every aggregator the reader pre-aggregates (``flow_jobs.combine.decide.foldable``), over
#: DOUBLE, BIGINT and STRING; ``count(amount)`` and the count in ``avg(amount)``, and the
#: two sums of ``amount``, are one buffer each in a merging window's state.
AGGREGATIONS = [
    ("count", None, "n"),
    ("count", "amount", "amounts"),
    ("sum", "amount", "spent"),
    ("sum", "qty", "qty_sum"),
    ("avg", "amount", "amount_avg"),
    ("avg", "qty", "qty_avg"),
    ("min", "amount", "amount_min"),
    ("max", "qty", "qty_max"),
    ("min", "page", "page_min"),
    ("max", "page", "page_max"),
    ("first", "page", "first_page"),
    ("last", "amount", "last_amount"),
    ("sum", "amount", "spent_again"),
]
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
LATENESS = 8_000
SIZES = {
    "tumbling": {"duration_ms": 5_000},
    "hopping": {"duration_ms": 6_000, "hop_ms": 2_000},
    "cumulate": {"step_ms": 2_000, "max_duration_ms": 8_000},
    "session": {"gap_ms": 1_500},
}


def _spec_file(spec: PipelineSpec, folder: Path) -> Path:
    path = folder / f"{spec.name}.toml"
    path.write_text(tomli_w.dumps(spec.to_document()))
    return path


def _positions(records: list[Record]) -> list[tuple[int, int]]:
    """Each record's (partition, offset): a partition's offsets in production order."""
    produced: dict[int, int] = defaultdict(int)
    out = []
    for r in records:
        out.append((r.partition, produced[r.partition]))
        produced[r.partition] += 1
    return out


def _events(records: list[Record]) -> list[dict[str, Any]]:
    """The records Spark aggregates (those that decode), each with its Kafka position as
    ``_arrival``: the order of equal event times."""
    events = []
    for record, position in zip(records, _positions(records), strict=True):
        try:
            doc = json.loads(record.value or b"")
        except ValueError:
            continue  # malformed: a dead letter
        events.append({**doc, "_arrival": position})
    return events


def _open(
    events: list[dict[str, Any]],
    kind: str,
    sizes: dict[str, int],
    aggregations: list[tuple],
    lateness_ms: int = LATENESS,
) -> tuple[int, dict[tuple, dict[str, Any]]]:
    """The watermark after every event, and the windows still open under it."""
    watermark = max(e["ts"] for e in events) - lateness_ms
    every = reference_windows(
        events,
        kind=kind,
        time_key="ts",
        **sizes,
        group_by=["user_id"],
        aggregations=aggregations,
        watermark_ms=2**62,  # every window, closed or not
        current=True,
    )
    return watermark, {k: v for k, v in every.items() if _ms(k[1]) > watermark}


def _ms(t: datetime) -> int:
    return round(t.timestamp() * 1000)


def _inspected(report: StateReport) -> dict[tuple, dict[str, Any]]:
    return {(w.start, w.end, w.group["user_id"]): w.aggregates for w in report.windows}


def _spark_rows(runner: PipelineRunner) -> int:
    """The rows Spark's aggregation read: partials count once."""
    assert runner.progress is not None
    return sum(int(p.get("numInputRows", 0)) for p in runner.progress.progress.values())


def test_the_demo_pipeline_shows_every_open_aggregate_pre_aggregated(
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pipelines/clicks_per_minute.toml over the demo's events (flow_jobs_dev.demo): the
    reader folds them, and inspect shows each open window's count, sum, avg, max, first
    and last page as the events give them, with no note."""
    topic = f"inspect-demo-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=2)
    records = list(
        sample_clicks(
            2_000, users=12, start_ms=BASE_MS, step_ms=180, partitions=2, seed=42,
            malformed_every=997,
        )
    )  # fmt: skip
    send(broker.bootstrap_servers, topic, records)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap_servers)
    monkeypatch.setenv("FLOW_DATA_DIR", str(workdir))
    doc = load_spec(DEMO_SPEC).to_document()
    doc["sources"][0]["topic"] = topic
    spec = PipelineSpec.model_validate(doc)
    runner = PipelineRunner(spec, spark)
    summary = runner.run(available_now=True)
    assert summary.late_rows == 0 and summary.input_rows == len(records)
    assert (Path(spec.checkpoint_location()) / MARKER).exists(), "the window merges partials"
    assert _spark_rows(runner) < len(records), "no partial reached Spark: nothing was folded"

    window = spec.window
    aggregations = [(a.agg, a.column, a.as_) for a in window.aggregations]
    events = [e for e in _events(records) if e["user_id"] is not None]  # the spec's SQL
    assert len(events) == len(records) - 2  # the demo's malformed records
    sizes = {"duration_ms": window.duration_ms}
    watermark, expected = _open(events, "tumbling", sizes, aggregations, window.lateness_ms)
    report = inspect_state(spark, spec, store=LedgerStore.for_spec(spec), limit=1_000)

    assert _ms(report.watermark) == watermark and report.note is None
    assert report.open_windows == len(expected) >= 12, "a window per user, at least"
    assert_same_windows(_inspected(report), expected)
    # The table the demo prints: every value shown, no note.
    assert main(["inspect", str(_spec_file(spec, workdir)), "--limit", "1000"]) == 0
    table = capsys.readouterr().out
    assert f"open windows: {len(expected)}" in table
    assert NOT_DECODED not in table and "note:" not in table


def _messy(rng: random.Random, n: int) -> list[Record]:
    """Three partitions, each event time three times (one per partition), disorder
    within the lateness, NULL keys and values, a 4 s pause every 150 records (sessions
    end there)."""
    records = []
    for i in range(n):
        ts = BASE_MS + (i // 3) * 200 + (i // 150) * 4_000 - rng.choice([0, 0, 0, 600])
        doc = {
            "user_id": rng.choice(["a", "b", "c", "d", None]),
            "page": rng.choice(["/home", "/cart", "/pay", None]),
            "amount": rng.choice([None, round(rng.uniform(-5, 100), 2)]),
            "qty": rng.choice([None, rng.randint(-3, 9)]),
            "ts": ts,
        }
        records.append(Record(json.dumps(doc).encode(), i % 3, timestamp_ms=ts))
    return records


def _cases() -> list[Any]:
    """Each kind in both layouts; each layout in one micro-batch and in tiny ones, each
    pairing on half the kinds (all sixteen cost minutes of the suite for no other path:
    the layout follows the plan, the cut only the state's contents)."""
    cases = []
    for i, kind in enumerate(SIZES):
        for pre_aggregate in (True, False):
            per_trigger = None if (i + pre_aggregate) % 2 else 45
            layout = "merging" if pre_aggregate else "plain"
            cut = "one-batch" if per_trigger is None else "tiny-batches"
            cases.append(
                pytest.param(kind, pre_aggregate, per_trigger, id=f"{kind}-{layout}-{cut}")
            )
    return cases


@pytest.mark.parametrize(("kind", "pre_aggregate", "per_trigger"), _cases())
def test_every_open_aggregate_reads_in_either_layout(
    kind: str,
    pre_aggregate: bool,
    per_trigger: int | None,
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
) -> None:
    topic = f"inspect-{kind}-{pre_aggregate}-{per_trigger}-{random.randrange(10**9)}".lower()
    broker.create_topic(topic, partitions=3)
    records = _messy(random.Random(f"{kind}{per_trigger}"), 360)
    send(broker.bootstrap_servers, topic, records)
    window = {
        "kind": kind,
        **SIZES[kind],
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "group_by": ["user_id"],
        "pre_aggregate": pre_aggregate,
        "aggregations": [
            {"agg": agg, **({"column": column} if column else {}), "as": alias}
            for agg, column, alias in AGGREGATIONS
        ],
    }
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, window, name=f"inspect-{kind}", schema=SCHEMA,
        source={"max_offsets_per_trigger": per_trigger} if per_trigger else {},
    )  # fmt: skip
    runner = PipelineRunner(spec, spark)
    summary = runner.run(available_now=True)
    assert summary.late_rows == 0 and summary.input_rows == len(records)
    merging = (Path(spec.checkpoint_location()) / MARKER).exists()
    assert merging == pre_aggregate
    if pre_aggregate:
        assert _spark_rows(runner) < len(records), "no partial reached Spark"
    else:
        assert _spark_rows(runner) == len(records)

    watermark, expected = _open(_events(records), kind, SIZES[kind], AGGREGATIONS)
    assert len({k[2] for k in expected}) == 5, "open windows of every group, NULL's too"
    report = inspect_state(spark, spec, store=LedgerStore.for_spec(spec), limit=1_000)

    assert _ms(report.watermark) == watermark and report.note is None
    assert report.open_windows == len(expected)
    assert_same_windows(_inspected(report), expected)


def test_the_note_names_each_aggregate_inspect_does_not_read_and_why(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path, capsys: pytest.CaptureFixture
) -> None:
    """A window that cannot pre-aggregate keeps Spark's plain buffers: an approximate
    distinct count shows its sketch's estimate; ``collect`` (Spark's own serialization of
    its items) and ``reduce`` (the user's functions) show "n/a", and the note names each
    and why. A spec whose aggregations no longer compile to the state's buffers shows
    every aggregate "n/a", and the note says both layouts; so does one that does not
    compile, and the note says why."""
    topic = f"inspect-unread-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=3)
    records = _messy(random.Random("unread"), 240)
    send(broker.bootstrap_servers, topic, records)
    window = {
        "kind": "tumbling",
        "duration_ms": 5_000,
        "event_time_column": "ts",
        "lateness_ms": LATENESS,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": "count", "as": "n"},
            {"agg": "count_distinct", "column": "page", "as": "pages"},
            {"agg": "collect", "column": "page", "as": "path"},
            {"agg": "reduce", "column": "page", "as": "trail", "result_type": "STRING",
             "initializer": "tests.reduce_fns:start_trail",
             "reducer": "tests.reduce_fns:extend_trail"},
            {"agg": "max", "column": "qty", "as": "qty_max"},
        ],
    }  # fmt: skip
    spec = make_spec(
        workdir, broker.bootstrap_servers, topic, window, name="inspect-unread", schema=SCHEMA
    )
    PipelineRunner(spec, spark).run(available_now=True)
    aggregations = [("count", None, "n"), ("count_distinct", "page", "pages"),
                    ("max", "qty", "qty_max")]  # fmt: skip
    _, expected = _open(_events(records), "tumbling", {"duration_ms": 5_000}, aggregations)

    path = _spec_file(spec, workdir)
    assert main(["inspect", str(path), "--json", "--limit", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["note"] == (
        "path = collect(page) shows n/a: Spark keeps collect_list's items serialized in its "
        "own binary row format, which inspect does not decode; trail = reduce(page) shows "
        "n/a: inspect does not run the user's initializer and reducer"
    )
    shown = {
        (datetime.fromisoformat(w["start"]).astimezone(UTC),
         datetime.fromisoformat(w["end"]).astimezone(UTC), w["group"]["user_id"]): w["aggregates"]
        for w in out["windows"]
    }  # fmt: skip
    assert all(v["path"] == v["trail"] == NOT_DECODED for v in shown.values())
    assert out["open_windows"] == len(expected)
    assert_same_windows(
        {k: {a: v[a] for a in ("n", "pages", "qty_max")} for k, v in shown.items()}, expected
    )

    changed = PipelineSpec.model_validate(
        {**spec.to_document(), "transform": {"window": {**window, "aggregations": [
            {"agg": "count", "as": "n"}, {"agg": "min", "column": "qty", "as": "qty_min"}]}}}
    )  # fmt: skip
    report = inspect_state(spark, changed, limit=1)
    assert report.windows and report.windows[0].aggregates == {
        "n": NOT_DECODED,
        "qty_min": NOT_DECODED,
    }
    assert report.note == (
        "every aggregate shows n/a: the state's aggregation buffers (count bigint, buf "
        "binary, buf binary, buf binary, max bigint) are not the compiled plan's (count "
        "bigint, min bigint): the window's aggregations changed since the checkpoint ran; "
        "inspect it with the spec it ran with"
    )
    broken = PipelineSpec.model_validate(
        {**spec.to_document(), "transform": {"window": window, "sql": "SELECT nope FROM clicks"}}
    )
    report = inspect_state(spark, broken, limit=1)
    assert report.windows and set(report.windows[0].aggregates.values()) == {NOT_DECODED}
    assert report.note is not None and report.note.startswith(
        "every aggregate shows n/a: the pipeline does not compile here, so the buffers its "
        "state keeps are unknown ("
    )
    assert "nope" in report.note and report.note.endswith("`flow-jobs validate --plan` shows why")
