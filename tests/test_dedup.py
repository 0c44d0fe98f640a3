"""``[[transform.dedup]]``: duplicates out before the window, the same under any cut.

The reference follows the rule in docs/spec-reference.md ("Deduplication"), written
here on its own: per key (NULL a value of its own), records in the order of events
(event time, then Kafka partition and offset); the first passes; a later one is a
duplicate when its event time is at most ``within_ms`` after the last record of its key
that passed.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flow_jobs.dedup.processor import KEY, DedupState, release
from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.plan.carried_rows import key_json
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.reference import reference_windows
from tests.support import assert_same_windows, random_clicks, read_windows, send

Event = dict[str, Any]


def reference_duplicates(events: list[Event], keys: list[str], within_ms: int) -> set[tuple]:
    """The ``_at`` (partition, offset) of every duplicate among ``events``."""
    last: dict[tuple, int] = {}
    duplicates = set()
    for e in sorted(events, key=lambda e: (e["ts"], e["_at"])):
        k = tuple(e[c] for c in keys)
        if k in last and e["ts"] - last[k] <= within_ms:
            duplicates.add(e["_at"])
        else:
            last[k] = e["ts"]
    return duplicates


# -- the operator's rule, under any cut --------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.sampled_from(["a", "b", None]), st.integers(0, 2)),
        min_size=1,
        max_size=40,
    ),
    st.integers(0, 15),
    st.integers(0, 10),
    st.lists(st.integers(1, 40), max_size=8),
)
def test_release_decides_every_record_as_the_rule_whatever_the_cut(
    rows: list[tuple[int, str | None, int]], within: int, lateness: int, cuts: list[int]
) -> None:
    """Records arrive in the order given, cut into micro-batches anywhere; after each
    batch the watermark (highest time - lateness) releases what it reached, and a record
    at or below the previous batch's watermark is late (out before the operator). The
    released records are the on-time ones, each decided as the rule says."""
    arrivals = [
        {"ts": t, "k": k, "_at": (p, i)} for i, (t, k, p) in enumerate(rows)
    ]  # offsets: the arrival index, increasing per partition too
    bounds = sorted({0, len(arrivals), *(c for c in cuts if c < len(arrivals))})
    state, watermark, on_time, out = DedupState(), None, [], []
    for lo, hi in itertools.pairwise(bounds):
        for e in arrivals[lo:hi]:
            if watermark is not None and e["ts"] <= watermark:
                continue  # late
            on_time.append(e)
            state.held.append((e["ts"], *e["_at"], e["k"], (e["_at"],)))
        top = max(e["ts"] for e in arrivals[:hi]) - lateness
        watermark = top if watermark is None else max(watermark, top)
        out += release(state, watermark, within)
    out += release(state, 10**9, within)  # the end of the stream
    assert sorted(r.values[0] for r in out) == sorted(e["_at"] for e in on_time)
    got = {r.values[0] for r in out if r.duplicate_of is not None}
    assert got == reference_duplicates(on_time, ["k"], within)


def test_nan_is_one_key_null_another_and_minus_zero_is_zero(spark: SparkSession) -> None:
    """The keys as the operator compares them (their JSON, ``key_json``): SQL
    ``GROUP BY``'s equality, though NaN != NaN and -0.0 is not 0.0 in Spark's hash."""
    values = [float("nan"), float("nan"), None, None, 0.0, -0.0, 1.5]
    frame = spark.createDataFrame([(v, "a") for v in values], "d DOUBLE, s STRING")
    keys = [r[KEY] for r in frame.select(key_json(frame, ["d", "s"]).alias(KEY)).collect()]
    state = DedupState(held=[(10, 0, i, k, (i,)) for i, k in enumerate(keys)])
    released = release(state, 10, 5)
    assert [r.values[0] for r in released if r.duplicate_of is None] == [0, 2, 4, 6]


# -- end to end --------------------------------------------------------------------------

PARTITIONS = 3
LATENESS = 2_000
WITHIN = 1_500
KEYS = ["user_id", "page"]
AGGREGATIONS = [
    ("count", None, "n"),
    ("sum", "amount", "amount_sum"),
    ("first", "qty", "first_qty"),
    ("last", "page", "last_page"),
]


def _records(events: list[Event], offsets: list[int]) -> list[Record]:
    """Round-robin over the partitions, so that each advances in event time with the
    others (a partition left behind in a micro-batch would make rows late, and which
    ones depends on the cut)."""
    out = []
    for e in events:
        p = min(range(PARTITIONS), key=lambda q: offsets[q])
        e["_at"] = (p, offsets[p])
        offsets[p] += 1
        value = json.dumps({k: v for k, v in e.items() if not k.startswith("_")}).encode()
        out.append(Record(value, p, (e["user_id"] or "").encode(), e["ts"]))
    return out


def _phases(seed: str) -> tuple[list[Event], list[Event], list[Event]]:
    """Phase 1, phase 2 (each with resends: the same record again, later in Kafka, and
    records of equal time), and phase 2's late rows (behind phase 1's watermark)."""
    rng = random.Random(seed)

    def phase(n: int, start_ms: int) -> list[Event]:
        events = random_clicks(
            rng, n, keys=("a", "b", None), step_ms=200, disorder_ms=800, start_ms=start_ms
        )
        for e in events:
            e["page"] = rng.choice(["/x", "/y", None])
        # resent, a little later in Kafka (all within the lateness: none is late)
        for i in rng.sample(range(10, n), n // 6):
            events.insert(min(n, i + rng.randint(1, 2)), dict(events[i]))
        for i in rng.sample(range(1, n), n // 10):  # another record at an equal time
            if abs(events[i]["ts"] - events[i - 1]["ts"]) <= 400:
                events[i]["ts"] = events[i - 1]["ts"]
        return events

    first = phase(240, 1_700_000_000_000)
    top = max(e["ts"] for e in first)
    second = phase(160, top + 300)
    late = [{**e, "amount": 1.0} for e in rng.sample(first[:120], 6)]  # far behind
    return first, second, late


def _spec(workdir: Path, bootstrap: str, topic: str, on_duplicate: str, tiny: bool) -> PipelineSpec:
    return PipelineSpec.model_validate(
        {
            "name": f"dedup-{workdir.name}",
            "sources": [
                {
                    "name": "clicks",
                    "kind": "kafka",
                    "topic": topic,
                    "bootstrap_servers": bootstrap,
                    "format": "json",
                    "schema": "user_id STRING, page STRING, amount DOUBLE, qty INT, ts BIGINT",
                    **({"max_offsets_per_trigger": 60} if tiny else {}),
                }
            ],
            "transform": {
                "dedup": [{"keys": KEYS, "within_ms": WITHIN, "on_duplicate": on_duplicate}],
                "window": {
                    "kind": "tumbling",
                    "duration_ms": 5_000,
                    "event_time_column": "ts",
                    "lateness_ms": LATENESS,
                    "group_by": ["user_id"],
                    "aggregations": [
                        {"agg": a, **({"column": c} if c else {}), "as": n}
                        for a, c, n in AGGREGATIONS
                    ],
                },
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )


def test_duplicates_are_out_of_every_window_under_any_cut_and_restart(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Three partitions, NULL keys, equal times, disorder within the lateness, resends
    and late rows; tiny micro-batches with a restart between the phases (duplicates
    dead-lettered), and each phase as one micro-batch (duplicates dropped): both targets
    are the reference windows over the records that pass, and the duplicates are counted
    (and dead-lettered) one by one."""
    on_duplicate = {"tiny": "dlq", "one": "drop"}
    topic = f"dedup-{random.randrange(10**9)}"
    broker.create_topic(topic, partitions=PARTITIONS)
    first, second, late = _phases("dedup")
    rng, offsets = random.Random("dedup/mix"), [0] * PARTITIONS
    send(broker.bootstrap_servers, topic, _records(first, offsets))
    mixed = list(second)
    for row in late:
        mixed.insert(rng.randrange(len(mixed) + 1), row)
    specs = {
        tag: _spec(workdir / tag, broker.bootstrap_servers, topic, on_duplicate[tag], tag == "tiny")
        for tag in ("tiny", "one")
    }
    summaries: dict[str, list] = {tag: [] for tag in specs}
    for tag, spec in specs.items():
        summaries[tag].append(PipelineRunner(spec, spark).run(available_now=True))
    send(broker.bootstrap_servers, topic, _records(mixed, offsets))
    for tag, spec in specs.items():  # a new runner on the checkpoint: a restart
        summaries[tag].append(PipelineRunner(spec, spark).run(available_now=True))

    on_time = first + second
    watermark = max(e["ts"] for e in on_time) - LATENESS
    duplicates = reference_duplicates(on_time, KEYS, WITHIN)
    # ties in first / last: by Kafka position, which the reference reads as _arrival
    passing = [{**e, "_arrival": e["_at"]} for e in on_time if e["_at"] not in duplicates]
    # a record is decided once the watermark reaches it: those after it are still held
    decided = {e["_at"] for e in on_time if e["ts"] <= watermark}
    duplicates &= decided
    expected = reference_windows(
        passing,
        kind="tumbling",
        time_key="ts",
        duration_ms=5_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=watermark,
    )
    assert len(duplicates) > 30, "the stream must hold duplicates"
    for tag, spec in specs.items():
        assert sum(s.late_rows for s in summaries[tag]) == len(late), tag
        assert sum(s.duplicates for s in summaries[tag]) == len(duplicates), tag
        assert_same_windows(read_windows(spec.target.path, spec.natural_key()), expected)
        store = LedgerStore.for_spec(spec)
        ledger: Counter[str] = Counter()
        for row in store.recent_batches(spec.name, 1_000):
            ledger.update(row["source_duplicates"] or {})
        assert ledger == Counter({"clicks": len(duplicates)}), tag
        if on_duplicate[tag] == "dlq":
            rows = read_delta(spec.dead_letter_path()).to_pylist()
            dead = {(r["partition"], r["offset"]) for r in rows if r["reason"].startswith("dup")}
            assert dead == duplicates, tag
            assert all("within_ms = 1500" in r["reason"] for r in rows if r["reason"][:3] == "dup")


# -- spec rules --------------------------------------------------------------------------


def _doc(dedup: list[dict[str, Any]], sources: tuple[str, ...] = ("clicks",)) -> dict:
    return {
        "name": "dedup-rules",
        "sources": [
            {
                "name": s,
                "kind": "kafka",
                "topic": s,
                "bootstrap_servers": "127.0.0.1:9092",
                "format": "json",
                "schema": "user_id STRING, ts BIGINT",
            }
            for s in sources
        ],
        "transform": {
            **(
                {"sql": " UNION ALL ".join(f"SELECT * FROM {s}" for s in sources)}
                if len(sources) > 1
                else {}
            ),
            "dedup": dedup,
            "window": {
                "kind": "tumbling",
                "duration_ms": 1_000,
                "event_time_column": "ts",
                "aggregations": [{"agg": "count", "as": "n"}],
            },
        },
        "target": {"kind": "delta", "path": "/tmp/x"},
    }


@pytest.mark.parametrize(
    ("dedup", "sources", "message"),
    [
        ([{"keys": ["user_id"], "within_ms": 1}], ("a", "b"), "source is required with 2"),
        ([{"source": "z", "keys": ["user_id"], "within_ms": 1}], ("clicks",), "'z' is not a"),
        (
            [{"keys": ["user_id"], "within_ms": 1}, {"keys": ["ts"], "within_ms": 1}],
            ("clicks",),
            "deduplicated by transform.dedup[0] already",
        ),
        ([{"keys": [], "within_ms": 1}], ("clicks",), "keys"),
        ([{"keys": ["a", "a"], "within_ms": 1}], ("clicks",), "listed twice"),
    ],
)
def test_a_dedup_names_its_source_once(
    dedup: list[dict[str, Any]], sources: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PipelineSpec.model_validate(_doc(dedup, sources))
    assert PipelineSpec.model_validate(_doc([{"keys": ["user_id"], "within_ms": 0}])).operators_of(
        "clicks"
    )


def test_a_dedup_needs_event_time_before_a_window_or_a_join() -> None:
    window = _doc([{"keys": ["user_id"], "within_ms": 1}])
    window["transform"]["window"]["time_mode"] = "processing"
    del window["transform"]["window"]["event_time_column"]
    joined = _doc([{"source": "a", "keys": ["user_id"], "within_ms": 1}], ("a", "b"))
    del joined["transform"]["sql"], joined["transform"]["window"]
    joined["transform"]["join"] = {
        "kind": "stream_stream_join", "left_source": "a", "right_source": "b",
        "left_keys": ["user_id"], "right_keys": ["user_id"], "time_window_ms": 10,
        "time_mode": "processing",
    }  # fmt: skip
    for doc in (window, joined):
        with pytest.raises(ValueError, match=r'transform.dedup\[0\].*time_mode = "event"'):
            PipelineSpec.model_validate(doc)
