"""Bad records are dead-lettered with their bytes and position, never lost nor doubled."""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import (
    CLICK_SCHEMA,
    assert_same_windows,
    fresh_checkpoint,
    make_spec,
    random_clicks,
    read_windows,
    send,
)

T = 1_700_000_030_000  # an event time among the good rows
LONG = "a value far longer than a reason shows of it, cut short"
#: (payload, its dead letter's reason) for any JSON schema of the clicks; the reasons
#: name the field, the type the schema declares and the value, cut to 40 characters.
BAD_PAYLOADS: list[tuple[bytes | None, str]] = [
    (b'{"user_id": "a", "page": ', 'malformed JSON: not parseable: {"user_id": "a", "page":'),
    (b"{broken", "malformed JSON: not parseable: {broken"),
    (b"[1, 2]", "malformed JSON: not an object, got [1, 2]"),
    (b"42", "malformed JSON: not an object, got 42"),
    (b"null", "malformed JSON: not an object, got null"),
    (b'{"user_id": "a", "amount": "hot", "ts": %d}' % T,
     'field amount: expected DOUBLE, got "hot"'),
    (b'{"user_id": "a", "ts": "1795000000000"}', 'field ts: expected BIGINT, got "1795000000000"'),
    (b'{"user_id": "a", "ts": "soon"}', 'field ts: expected BIGINT, got "soon"'),
    (b'{"user_id": "a", "qty": 99999999999999999999, "ts": %d}' % T,
     "field qty: expected BIGINT, got 99999999999999999999 (out of range)"),
    (b'{"user_id": "a", "qty": 2.5, "ts": %d}' % T, "field qty: expected BIGINT, got 2.5"),
    (b'{"user_id": "a", "amount": [1, 2], "ts": %d}' % T,
     "field amount: expected DOUBLE, got [1,2]"),
    (b'{"user_id": "a", "qty": {"n": 1}, "ts": %d}' % T, 'field qty: expected BIGINT, got {"n":1}'),
    (json.dumps({"user_id": "a", "amount": LONG, "ts": T}).encode(),
     f'field amount: expected DOUBLE, got "{LONG[:38]}…'),
    (None, "null payload (a tombstone)"),
    (b"", "empty payload"),
    (b" \n", "malformed JSON: not parseable: only blanks"),
    (b'{"user_id": "a", "amount": 1.0}', "missing event time: ts is absent"),
    (b'{"user_id": "a", "ts": null}', "missing event time: ts is null"),
    (b'{"user_id": "a", "ts": 9000000000000000000}',
     "event time ts = 9000000000000000000 is out of range: epoch milliseconds outside years "
     "1-9999 (a value in micro- or nanoseconds?)"),
]  # fmt: skip
#: the schema Arrow decodes in the reader (``decoder = "auto"``); CLICK_SCHEMA's TIMESTAMP
#: leaves every record to from_json
ARROW_SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
#: a payload only CLICK_SCHEMA's ``at`` rejects
BAD_AT = (b'{"user_id": "a", "ts": %d, "at": "yesterday"}' % T,
          'field at: expected TIMESTAMP, got "yesterday"')  # fmt: skip
AGGREGATIONS = [
    ("count", None, "n"),
    ("sum", "amount", "amount_sum"),
    ("last", "page", "last_page"),
]


#: A filter in the SQL on payload columns a bad record lacks (NULL): it must not reach
#: below the dead-letter taps (flow_jobs.dead_letters.divert), or such records would vanish.
FILTER_SQL = "SELECT user_id, page, amount, ts FROM clicks WHERE user_id IS NOT NULL AND amount > 0"


@pytest.mark.parametrize(
    "sql, per_trigger, schema",
    [
        (None, None, CLICK_SCHEMA),
        (FILTER_SQL, 40, CLICK_SCHEMA),
        (None, None, ARROW_SCHEMA),
        (None, 40, ARROW_SCHEMA),
    ],
    ids=["one-batch", "sql-filter-small-batches", "arrow-one-batch", "arrow-small-batches"],
)
def test_bad_records_land_in_the_dead_letter_table(
    sql: str | None,
    per_trigger: int | None,
    schema: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
) -> None:
    """Every bad record is a dead letter whose reason names what failed, the same whether
    Arrow decoded the good records in the reader or from_json did them all."""
    rng = random.Random(7)
    good = random_clicks(rng, 600, step_ms=500, disorder_ms=2_000)
    far_future = int(time.time() * 1000) + 86_400_000
    at = datetime.fromtimestamp(far_future / 1000, UTC).isoformat(timespec="milliseconds")
    future = (
        f"event time ts = {at.replace('+00:00', 'Z')} is more than "
        "max_event_time_skew_ms=300000 ahead of processing time"
    )
    bad = [*BAD_PAYLOADS, (json.dumps({"user_id": "a", "ts": far_future}).encode(), future)]
    if schema == CLICK_SCHEMA:
        bad.append(BAD_AT)
    # Interleave: bad records at known places among the good ones.
    stream: list[tuple[bytes | None, str | None]] = [(json.dumps(e).encode(), None) for e in good]
    for i, item in enumerate(bad):
        stream.insert(17 + i * 29, item)
    records, expected_dead, next_offset = [], {}, [0, 0]
    for i, (value, reason) in enumerate(stream):
        partition = i % 2
        # Kafka headers on some records, bad and good: a dead letter keeps its own.
        headers = (("id", b"%d" % i), ("bin", b"\x00\xff"), ("id", None)) if i % 3 == 0 else ()
        records.append(Record(value, partition, b"k%d" % i, 1_700_000_000_000 + i, headers))
        if reason is not None:
            expected_dead[(partition, next_offset[partition])] = (
                value, reason, b"k%d" % i, list(headers) or None
            )  # fmt: skip
        next_offset[partition] += 1
    send(broker.bootstrap_servers, topic, records)
    window = {
        "kind": "tumbling",
        "duration_ms": 60_000,
        "event_time_column": "ts",
        "lateness_ms": 5_000,
        "group_by": ["user_id"],
        "aggregations": [
            {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
        ],
    }
    spec = make_spec(
        workdir,
        broker.bootstrap_servers,
        topic,
        window,
        sql=sql,
        schema=schema,
        source={"max_offsets_per_trigger": per_trigger} if per_trigger else None,
    )

    summary = PipelineRunner(spec, spark).run(available_now=True)

    assert summary.dead_lettered == len(bad)
    dead = read_delta(spec.dead_letter_path()).to_pylist()
    got = {
        (r["partition"], r["offset"]): (
            r["value"], r["reason"], r["key"],
            None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]],
        )
        for r in dead
    }  # fmt: skip
    assert got == expected_dead
    assert any(h for *_, h in got.values()) and not all(h for *_, h in got.values())
    assert {r["topic"] for r in dead} == {topic}
    assert {r["source"] for r in dead} == {"clicks"}
    assert {r["pipeline"] for r in dead} == {spec.name}
    # The SQL's WHERE, row by row (a NULL comparison is not true); the watermark is the
    # sources', over every good row.
    kept = good if sql is None else [
        e for e in good if e["user_id"] is not None and e["amount"] is not None and e["amount"] > 0
    ]  # fmt: skip
    expected = reference_windows(
        kept,
        time_key="ts",
        duration_ms=60_000,
        hop_ms=None,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in good) - 5_000,
    )
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)
    # Nothing staged on disk beside the table (executors hand bad rows to the driver).
    assert not Path(spec.dead_letter_path() + "_staging").exists()

    # A re-run from a fresh checkpoint reads everything again: no dead letter doubles.
    again = PipelineRunner(fresh_checkpoint(spec), spark).run(available_now=True)
    assert again.dead_lettered == 0  # all already there: MERGE inserted nothing new
    assert len(read_delta(spec.dead_letter_path())) == len(bad)
    assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)


def test_a_dead_letter_table_from_before_headers_gets_the_column(tmp_path: Path) -> None:
    """An existing table without ``headers`` is migrated on start, its rows kept; any
    other difference is still refused."""
    import pyarrow as pa

    from flow_jobs.dead_letters.table import DEAD_LETTER_SCHEMA, DeadLetterTable
    from flow_jobs.io.delta import DeltaMergeTable, TargetSchemaError

    path = str(tmp_path / "dead")
    before = pa.schema([f for f in DEAD_LETTER_SCHEMA if f.name != "headers"])
    old = DeltaMergeTable(path, before, ("source", "topic", "partition", "offset"))
    old.ensure()
    row = {f.name: None for f in before} | {
        "pipeline": "p", "source": "s", "topic": "t", "partition": 0, "offset": 1
    }  # fmt: skip
    old.merge(pa.Table.from_pylist([row], before))

    DeadLetterTable(path, "p").ensure()

    rows = read_delta(path).to_pylist()
    assert [(r["offset"], r["headers"]) for r in rows] == [(1, None)]
    narrower = pa.schema([f for f in before if f.name != "reason"])
    other = DeltaMergeTable(str(tmp_path / "other"), narrower, ("source",))
    other.ensure()
    with pytest.raises(TargetSchemaError):
        DeltaMergeTable(
            str(tmp_path / "other"), DEAD_LETTER_SCHEMA, ("source",), added=("headers",)
        ).ensure()


def test_a_row_reported_twice_is_written_once() -> None:
    """A re-run stage (a lost shuffle, a retried fetch) can return a task's observed
    rows twice: the driver keeps one row per position, the first it got, in order."""
    import pyarrow as pa

    from flow_jobs.dead_letters.table import TAPPED, _distinct

    def tapped(*positions: tuple[str, int, int], reason: str = "bad") -> pa.Table:
        return pa.Table.from_pylist(
            [
                {"pipeline": "p", "source": s, "reason": reason, "topic": "t",
                 "partition": p, "offset": o}
                for s, p, o in positions
            ],
            TAPPED,
        )  # fmt: skip

    first = tapped(("clicks", 0, 5), ("clicks", 1, 5), ("other", 0, 5))
    again = tapped(("clicks", 1, 5), ("clicks", 0, 7), reason="again")
    rows = _distinct([first, tapped(), again])
    assert rows is not None
    assert [(r["source"], r["partition"], r["offset"], r["reason"]) for r in rows.to_pylist()] == [
        ("clicks", 0, 5, "bad"),
        ("clicks", 1, 5, "bad"),
        ("other", 0, 5, "bad"),
        ("clicks", 0, 7, "again"),
    ]
    assert _distinct([tapped()]) is None
