"""Replay from a time: ``starting_offsets = { timestamp = … }`` and ``flow-jobs reset
NAME --from T`` (issue 16, item 3)."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.kafka.heartbeats import IDLE_FOR_THE_RUN_MS
from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.planning import KafkaStreamReader
from flow_jobs.kafka.time_offsets import first_offset_at
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.idleness import replay_targets
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import SpecError
from flow_jobs.spec.loader import parse_spec
from flow_jobs.spec.models import PipelineSpec, StartingTimestamp
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import (
    BASE_MS,
    assert_same_windows,
    fresh_checkpoint,
    make_spec,
    random_clicks,
    read_windows,
    send,
    stamped_before_first,
    tamper_windows,
    to_records,
)

_SPEC = """
name = "replay"
[[sources]]
name = "events"
topic = "events"
bootstrap_servers = "127.0.0.1:9092"
format = "raw"
{starting}
[transform.window]
kind = "tumbling"
duration_ms = 60000
[[transform.window.aggregations]]
agg = "count"
as = "n"
[target]
kind = "delta"
path = "./data/replay"
"""
T = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "starting",
    [
        'starting_offsets = { timestamp = "2026-11-01T10:00:00Z" }',
        'starting_offsets = { timestamp = "2026-11-01T11:00:00+01:00" }',
        "starting_offsets = { timestamp = 2026-11-01T10:00:00Z }",  # TOML's own datetime
        "starting_offsets = { timestamp = 2026-11-01T05:00:00-05:00 }",
    ],
)
def test_starting_offsets_takes_an_aware_time_as_a_string_or_a_toml_datetime(
    starting: str,
) -> None:
    spec = parse_spec(_SPEC.format(starting=starting))
    source = spec.sources[0]
    assert source.starting_offsets == StartingTimestamp(timestamp=T)
    assert source.starting_option() == f"timestamp:{int(T.timestamp() * 1000)}"
    assert parse_spec(spec.to_toml()) == spec  # written back, read back


@pytest.mark.parametrize(
    ("starting", "says"),
    [
        ('{ timestamp = "2026-11-01T10:00:00" }', "has no time zone"),
        ("{ timestamp = 2026-11-01T10:00:00 }", "has no time zone"),  # a TOML local time
        ("{ timestamp = 2026-11-01 }", "is not a time"),
        ('{ timestamp = "yesterday" }', "is not an ISO-8601 time"),
        ('{ at = "2026-11-01T10:00:00Z" }', "one key, timestamp"),
        ('"earlist"', '"earliest", "latest" or { timestamp'),
    ],
)
def test_a_starting_time_without_a_zone_or_of_another_shape_is_refused_naming_the_key(
    starting: str, says: str
) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(_SPEC.format(starting=f"starting_offsets = {starting}"))
    [problem] = refused.value.problems
    assert problem.startswith("sources[0].starting_offsets: ")
    assert says in problem


# -- where a partition reaches a time ----------------------------------------------------


def test_the_search_finds_the_first_offset_at_or_after_the_time_across_gaps() -> None:
    # Offsets 3 and 4 hold no record (a transaction marker, compaction): reading there
    # reads the record at 5. Past the last record there is none (None).
    records = {0: 10, 1: 20, 2: 20, 5: 30, 6: 30, 7: 40}

    def timestamp_at(offset: int) -> int | None:
        return next((records[o] for o in sorted(records) if o >= offset), None)

    assert [first_offset_at(timestamp_at, 0, 8, t) for t in (5, 10, 15, 20, 25, 30, 40, 41)] == [
        0,
        0,
        1,
        1,
        3,  # the gap before 5: reading from 3 reads 5 first, as Kafka would
        3,
        7,
        8,
    ]


def _start_offsets(broker: EmbeddedBroker, topic: str, at_ms: int) -> dict[int, int]:
    options = KafkaSourceOptions.from_options(
        {
            "bootstrap_servers": broker.bootstrap_servers,
            "topic": topic,
            "starting_offsets": f"timestamp:{at_ms}",
        }
    )
    reader = KafkaStreamReader(options)
    try:
        return {int(p): o for p, o in reader.initialOffset()[topic].items()}
    finally:
        reader.stop()


def test_a_start_by_time_is_each_partitions_first_record_at_or_after_it(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"replay-offsets-{BASE_MS}"
    broker.create_topic(topic, partitions=3)
    # Partition 0: equal timestamps in runs; 1: empty; 2: one record.
    stamps = {0: [0, 0, 1000, 1000, 1000, 2000, 3000], 2: [1000]}
    send(
        broker.bootstrap_servers,
        topic,
        [
            Record(b"{}", partition=p, key=None, timestamp_ms=BASE_MS + t)
            for p, ts in stamps.items()
            for t in ts
        ],
    )
    cases = {
        -500: {0: 0, 1: 0, 2: 0},  # before every record: the earliest offset
        0: {0: 0, 1: 0, 2: 0},
        1: {0: 2, 1: 0, 2: 0},
        1000: {0: 2, 1: 0, 2: 0},  # the first of equal timestamps
        1500: {0: 5, 1: 0, 2: 1},
        3000: {0: 6, 1: 0, 2: 1},
        3001: {0: 7, 1: 0, 2: 1},  # after every record: the latest offset
    }
    with caplog.at_level(logging.WARNING, logger="flow_jobs.kafka.time_offsets"):
        found = {t: _start_offsets(broker, topic, BASE_MS + t) for t in cases}
    assert found == cases
    # The embedded broker has no time index (it answers offset 0 for every time): its
    # answers were checked, found wrong, and searched for instead.
    assert any(topic in r.getMessage() for r in caplog.records)


# -- flow-jobs reset NAME --from T ---------------------------------------------------------

WINDOW_MS = 10_000
LATENESS = 3_000
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum")]
REPLAY_FROM_MS = BASE_MS + 40_000  # on a window boundary


def _replay_spec(workdir: Path, broker: EmbeddedBroker, topic: str, max_offsets: int | None):
    window = {
        "kind": "tumbling",
        "duration_ms": WINDOW_MS,
        "lateness_ms": LATENESS,  # event time = the Kafka timestamp (_event_ts)
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
    }
    source = {"max_offsets_per_trigger": max_offsets} if max_offsets else None
    return make_spec(workdir, broker.bootstrap_servers, topic, window, source=source)


def _ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


@pytest.mark.parametrize("max_offsets", [None, 60], ids=["one-batch", "small-batches"])
def test_a_replay_from_a_time_rewrites_exactly_the_windows_from_it_on(
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    max_offsets: int | None,
) -> None:
    topic = f"replay-{max_offsets}-{random.Random().getrandbits(32):08x}"
    broker.create_topic(topic, partitions=3)
    rng = random.Random(16)
    events = random_clicks(
        rng, 900, keys=("a", "b", "c", "d", "e"), step_ms=100, disorder_ms=2_000, null_rate=0.1
    )
    # Out of order within the lateness, but in each partition every record stamped before
    # the replay's time precedes the others (the search's premise, module note of
    # flow_jobs.kafka.time_offsets). Kafka timestamp = event time.
    events = stamped_before_first(events, REPLAY_FROM_MS)
    send(broker.bootstrap_servers, topic, to_records(events, partitions=3))
    spec = _replay_spec(workdir, broker, topic, max_offsets)
    key = spec.natural_key()
    PipelineRunner(spec, spark).run(available_now=True)
    reference = reference_windows(
        events,
        time_key="ts",
        duration_ms=WINDOW_MS,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - LATENESS,
    )
    assert_same_windows(read_windows(spec.target.path, key), reference)

    # Tamper with closed windows on both sides of the replay's time.
    replay_from = datetime.fromtimestamp(REPLAY_FROM_MS / 1000, tz=UTC)
    starts = (REPLAY_FROM_MS - 20_000, REPLAY_FROM_MS, REPLAY_FROM_MS + 10_000)
    tampered = tamper_windows(spec.target.path, key, starts)
    assert sum(row["n"] == -1 for k, row in tampered.items() if k[0] < replay_from) >= 3
    assert sum(row["n"] == -1 for k, row in tampered.items() if k[0] >= replay_from) >= 6

    spec_file = workdir / "replay.toml"
    spec_file.write_text(spec.to_toml(), encoding="utf-8")
    assert main(["reset", str(spec_file), "--from", "2023-11-14T23:14:00+01:00"]) == 0
    assert "reads every source from 2023-11-14T22:14:00Z" in capsys.readouterr().out
    # The retired checkpoint's path is not reused in this JVM (tests.support.fresh_checkpoint).
    replay = fresh_checkpoint(spec, "replay")
    summary = PipelineRunner(replay, spark).run(available_now=True)

    replayed = read_windows(spec.target.path, key)  # fails on a duplicate natural key
    before = {k: row for k, row in tampered.items() if k[0] < replay_from}
    after = {k: row for k, row in reference.items() if k[0] >= replay_from}
    # From the replay's time on: recomputed, the tampered rows corrected. Before it: the
    # rows as they were (tampered ones too), never rewritten from a part of their rows.
    assert_same_windows(replayed, {**before, **after})
    # The read started at each partition's first record stamped at or after the time.
    assert summary.input_rows == sum(e["ts"] >= REPLAY_FROM_MS for e in events)
    store = LedgerStore.for_spec(replay)
    batches = store.batch_ids(spec.name)[summary.query_id]
    rows = [r for r in store.recent_batches(spec.name, 1000) if r["query_id"] == summary.query_id]
    assert len(rows) == len(batches) and sum(r["input_rows"] for r in rows) == summary.input_rows
    assert all(r["state_version"] == 1 for r in rows)


def test_reset_from_a_time_without_a_zone_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["reset", "clicks", "--from", "2026-11-01T10:00:00"]) == 2
    assert "--from = '2026-11-01T10:00:00' has no time zone" in capsys.readouterr().err


# -- a replay's idle sources: a source with nothing at or after the time -------------------

UNION = "SELECT user_id, amount, ts FROM live UNION ALL SELECT user_id, amount, ts FROM quiet"
FROM_MS = BASE_MS + 30_000  # on a window boundary


def _two_sources(workdir: Path, broker: EmbeddedBroker, topics: dict[str, str], **source):
    """A window over two sources (a UNION ALL): the pipeline's watermark is the lowest
    of the sources' that are not idle (docs/spec-reference.md)."""
    doc = _replay_spec(workdir, broker, topics["live"], None).to_document()
    doc["sources"] = [
        {**doc["sources"][0], "name": name, "topic": topic, **source}
        for name, topic in topics.items()
    ]
    doc["transform"]["sql"] = UNION
    doc["transform"]["window"]["event_time_column"] = "ts"
    return PipelineSpec.model_validate(doc)


def _before_and_after(broker: EmbeddedBroker, tag: str) -> tuple[dict[str, str], list[dict]]:
    """``live`` has records on both sides of FROM_MS, ``quiet`` only before it (both in
    Kafka-timestamp order within a partition, the search's premise); returns the topics
    and the live rows from FROM_MS on."""
    suffix = f"{tag}-{random.Random().getrandbits(32):08x}"
    topics = {name: f"replay-{name}-{suffix}" for name in ("live", "quiet")}
    for topic in topics.values():
        broker.create_topic(topic, partitions=2)
    rng = random.Random(f"replay-idle/{tag}")
    live = random_clicks(rng, 300, step_ms=200, disorder_ms=1_000, null_rate=0.1)
    live = sorted(live, key=lambda e: e["ts"] >= FROM_MS)  # stable: disorder kept within
    quiet = random_clicks(rng, 40, step_ms=500, disorder_ms=1_000)  # all before FROM_MS
    assert max(e["ts"] for e in quiet) < FROM_MS <= max(e["ts"] for e in live)
    send(broker.bootstrap_servers, topics["live"], to_records(live))
    send(broker.bootstrap_servers, topics["quiet"], to_records(quiet))
    return topics, [e for e in live if e["ts"] >= FROM_MS]


def test_a_source_with_nothing_after_the_start_time_is_idle_for_a_replay(
    broker: EmbeddedBroker, workdir: Path
) -> None:
    """Where a fresh checkpoint starts by time, a source is idle for an --available-now
    run when no partition has a record at or after that time (the reader starts each
    at its end): found with the same offsets-for-time lookup the reader makes."""
    topics, _ = _before_and_after(broker, "targets")
    checkpoint = str(workdir / "checkpoint")
    at = datetime.fromtimestamp(FROM_MS / 1000, tz=UTC)
    spec = _two_sources(workdir, broker, topics, starting_offsets={"timestamp": at})
    assert replay_targets(spec, checkpoint) == {"quiet": IDLE_FOR_THE_RUN_MS}
    # From earlier on, both have records; from after every record, neither has.
    for year in (2020, 2030):
        other = {"timestamp": at.replace(year=year)}
        assert (
            replay_targets(
                _two_sources(workdir, broker, topics, starting_offsets=other), checkpoint
            )
            == {}
        )


@pytest.mark.parametrize(
    ("start", "max_offsets"),
    [("starting_offsets", None), ("reset --from", 40)],
    ids=["starting-offsets-one-batch", "reset-from-small-batches"],
)
def test_a_replay_from_a_time_closes_windows_beside_a_source_with_nothing_after_it(
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
    start: str,
    max_offsets: int | None,
) -> None:
    """``quiet``'s records all come before the replay's time: the run has nothing of it
    to read, so it is idle for the run and ``live``'s watermark closes the windows (were
    it counted as having records, its watermark would stay at 0 and close none)."""
    topics, after = _before_and_after(broker, start.split()[0])
    at = datetime.fromtimestamp(FROM_MS / 1000, tz=UTC)
    per_trigger = {"max_offsets_per_trigger": max_offsets} if max_offsets else {}
    if start == "starting_offsets":
        starting = {"starting_offsets": {"timestamp": at}}
        spec = _two_sources(workdir, broker, topics, **starting, **per_trigger)
    else:  # a generation started by `flow-jobs reset --from`: the ledger's replay_from
        registered = _two_sources(workdir, broker, topics, **per_trigger)
        LedgerStore.for_spec(registered).open_pipeline(registered)
        spec_file = workdir / "two.toml"
        spec_file.write_text(registered.to_toml(), encoding="utf-8")
        assert main(["reset", str(spec_file), "--from", at.isoformat()]) == 0
        spec = fresh_checkpoint(registered, "replay")
        assert spec.sources[0].starting_offsets == "earliest"

    summary = PipelineRunner(spec, spark).run(available_now=True)

    # live's records from the time on, and quiet's one heartbeat (it is idle for the run)
    assert summary.input_rows == len(after) + 1 and summary.late_rows == 0
    reference = reference_windows(
        after,
        time_key="ts",
        duration_ms=WINDOW_MS,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in after) - LATENESS,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), reference)
