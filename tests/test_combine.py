"""Pre-aggregation in the Kafka reader (issue 12): partials equal what Spark computes from
the rows, whatever the cut.

The unit half (no Spark) checks ``flow_jobs.kafka.folding.Folder`` against a reference
written from the rules in ``docs/spec-reference.md`` ("Pre-aggregation"): which rows
fold (decoded, event time present and in range, not past the batch time + skew, after
the late watermark), the pane (for a session window, the session), and each part
(Spark's NaN rule for min / max, first / last by event time then offset among non-NULL
values); and that folding the same rows in blocks of any size, then merging, gives the
same partials.

The integration half runs one messy stream through the pipeline with ``pre_aggregate``
on and off, in one micro-batch and in tiny ones, and compares the windows, the dead
letters, the late rows and the rows read; it also checks that partials did reach Spark
(fewer Spark rows than records), so it cannot pass with folding silently off. A last
test resumes checkpoints across a change of ``pre_aggregate``: each keeps the aggregation
it started with (Spark refuses other state buffers).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flow_jobs.combine.decide import MARKER
from flow_jobs.io.delta import read_delta
from flow_jobs.kafka.combine import PARTIAL, CombinePlan, partial_type
from flow_jobs.kafka.folding import Folder, RangeRows
from flow_jobs.kafka.json_decode import JsonDecoder
from flow_jobs.kafka.prestage import Stage
from flow_jobs.kafka.read import decoded_schema, with_corrupt_field
from flow_jobs.kafka.schema import ARROW_SCHEMA
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import BASE_MS, assert_same_windows, make_spec, read_windows, send

PAYLOAD = pa.schema(
    [("user_id", pa.string()), ("page", pa.string()), ("amount", pa.float64()),
     ("qty", pa.int64()), ("ts", pa.int64())]
)  # fmt: skip
PLAN = CombinePlan(
    time_field="ts",
    pane_ms=20_000,
    skew_ms=300_000,
    keys=("user_id",),
    fields=(
        ("amount", ("dsum", "max", "min", "nn", "sum")),
        ("qty", ("nn", "sum", "dsum", "min", "max")),
        ("page", ("first", "last", "nn", "min", "max")),
    ),
)
#: A session window's: folds per session; the generated times hold pairs exactly one gap
#: apart (0 and 19,999; 1 and 20,000), which join (tests/test_spark_contracts.py)
SESSION_PLAN = dataclasses.replace(PLAN, pane_ms=0, gap_ms=19_999)
NOW_MS = BASE_MS + 600_000  # the micro-batch's batchTimestampMs
TS = pa.timestamp("us", tz="UTC")


def reader_table(payloads: Sequence[bytes | None], offsets: Sequence[int]) -> pa.Table:
    """Rows as the reader builds them (``flow_jobs.kafka.read._to_arrow``), decoded by Arrow."""
    decoder = JsonDecoder(PAYLOAD, smallest_piece=1)  # a bad record alone is undecoded
    n = len(payloads)
    decoded, undecoded = decoder.decode(list(payloads))
    columns = [
        pa.nulls(n, pa.binary()),
        pa.array(payloads, pa.binary()),
        pa.repeat(pa.scalar("t", pa.string()), n),
        pa.repeat(pa.scalar(1, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.nulls(n, TS),
        pa.nulls(n, ARROW_SCHEMA.field("headers").type),
        pa.nulls(n, TS),
        pa.repeat(pa.scalar(None, TS), n),
        pa.nulls(n, TS),
        pa.repeat(pa.scalar(NOW_MS * 1000, TS), n),
        with_corrupt_field(decoded),
        undecoded,
    ]
    return pa.Table.from_batches(
        [pa.RecordBatch.from_arrays(columns, schema=decoded_schema(decoder))]
    )


# -- the reference: the rules, row by row -------------------------------------------------


def folds(row: dict[str, Any] | None, late_ms: int | None) -> bool:
    """Spark would aggregate this row: decoded, an event time in range, not too far ahead
    of the batch, not late."""
    if row is None or not isinstance(row.get("ts"), int):
        return False
    ts = row["ts"]
    if not -62_135_596_800_000 <= ts <= 253_402_300_799_999:
        return False
    return ts <= NOW_MS + PLAN.skew_ms and (late_ms is None or ts > late_ms)


def ieee_sum(values: list[Any]) -> Any:
    """The exact sum, with IEEE's rules for NaN and infinities."""
    if any(math.isnan(v) for v in values) or {math.inf, -math.inf} <= set(values):
        return math.nan
    for inf in (math.inf, -math.inf):
        if inf in values:
            return inf
    return math.fsum(values)


def spark_min(values: list[Any]) -> Any:
    """Spark's min: NaN is above every number, so it is the min only when all are NaN."""
    if not values:
        return None
    numbers = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return min(numbers) if numbers else math.nan


def spark_max(values: list[Any]) -> Any:
    if not values:
        return None
    if any(isinstance(v, float) and math.isnan(v) for v in values):
        return math.nan
    return max(values)


def reference(
    rows: list[tuple[int, dict[str, Any]]], plan: CombinePlan = PLAN
) -> dict[tuple, dict[str, Any]]:
    """{(pane, user): parts} of the folded (offset, row) pairs; for a session window
    {(session start, user): parts}, a user's rows in time order joining a session while
    each is at most the gap after the one before (the spec reference's session row)."""
    groups: dict[tuple, list[tuple[int, dict[str, Any]]]] = {}
    if plan.gap_ms:
        users: dict[Any, list[tuple[int, dict[str, Any]]]] = {}
        for offset, row in rows:
            users.setdefault(row.get("user_id"), []).append((offset, row))
        for user, members in users.items():
            members.sort(key=lambda m: m[1]["ts"])
            session: list[tuple[int, dict[str, Any]]] = []
            for m in members:
                if session and m[1]["ts"] > session[-1][1]["ts"] + plan.gap_ms:
                    groups[(session[0][1]["ts"], user)] = session
                    session = []
                session.append(m)
            groups[(session[0][1]["ts"], user)] = session
    else:
        for offset, row in rows:
            groups.setdefault((row["ts"] // plan.pane_ms, row.get("user_id")), []).append(
                (offset, row)
            )
    out = {}
    for key, members in groups.items():
        parts: dict[str, Any] = {"n": len(members), "t": max(r["ts"] for _, r in members)}
        for i, (name, _) in enumerate(PLAN.fields):
            present = [(r["ts"], o, r[name]) for o, r in members if r.get(name) is not None]
            values = [v for *_, v in present]
            parts[f"nn{i}"] = len(values)
            if name != "page":
                parts[f"sum{i}"] = ieee_sum(values) if values else None
                # a float sum depends on the order of its terms: within this of the exact
                finite = [abs(v) for v in values if math.isfinite(v)]
                parts[f"err{i}"] = 1e-15 * len(values) * math.fsum(finite)
                parts[f"min{i}"], parts[f"max{i}"] = spark_min(values), spark_max(values)
            else:
                parts[f"min{i}"] = min(values) if values else None
                parts[f"max{i}"] = max(values) if values else None
                # (ts, offset, value): the offset breaks ties of equal event time
                parts[f"first{i}"] = min(present) if present else None
                parts[f"last{i}"] = max(present) if present else None
        out[key] = parts
    return out


def ours(table: pa.Table, plan: CombinePlan = PLAN) -> dict[tuple, dict[str, Any]]:
    """{(pane or session start, user): parts} of the partial rows of ``table``."""
    out = {}
    for row in table.filter(table.column(PARTIAL).is_valid()).to_pylist():
        p, payload = row[PARTIAL], row["_decoded"]
        pane = _ms(p["start"]) if plan.gap_ms else payload["ts"] // plan.pane_ms
        key = (pane, payload["user_id"])
        assert key not in out, f"two partials for {key} in one block"
        parts: dict[str, Any] = {"n": p["n"], "t": payload["ts"]}
        for i, (name, _) in enumerate(PLAN.fields):
            parts[f"nn{i}"] = p[f"nn{i}"]
            if name != "page":
                parts[f"sum{i}"] = p[f"sum{i}"]
            parts[f"min{i}"], parts[f"max{i}"] = p[f"min{i}"], p[f"max{i}"]
            if name == "page":
                for part in ("first", "last"):
                    v = p[f"{part}{i}"]
                    parts[f"{part}{i}"] = None if v is None else (_ms(v["t"]), v["pos"], v["v"])
        out[key] = parts
    return out


def _ms(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) or a == b
    return a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


def assert_same_parts(got: dict[tuple, dict], want: dict[tuple, dict]) -> None:
    assert got.keys() == want.keys()
    for key, parts in want.items():
        for name, value in parts.items():
            if name.startswith("err"):
                continue
            finite = isinstance(value, (int, float)) and math.isfinite(value)
            if name.startswith("sum") and finite and got[key][name] is not None:
                error = parts[f"err{name[3:]}"]
                assert abs(got[key][name] - value) <= error + 1e-12, (key, name, got[key][name])
                continue
            assert same(got[key][name], value), (key, name, got[key][name], value)


# -- generated rows: equal times, disorder, NULLs, NaN, inf, 1e17, bad records -------------

_AMOUNT = st.one_of(
    st.none(),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e17, -1e17, 0.5, -2.5, 3.0]),
    st.floats(-100, 100, allow_nan=False),
)
_ROW = st.fixed_dictionaries(
    {
        "user_id": st.sampled_from(["a", "b", "c", None]),
        "page": st.sampled_from(["/home", "/cart", "/pay", None]),
        "amount": _AMOUNT,
        "qty": st.one_of(st.none(), st.integers(-5, 9)),
        # few distinct times: equal timestamps; spread over panes, some ahead of the
        # batch (skew), some out of range, some missing
        "ts": st.one_of(
            st.sampled_from([BASE_MS + d for d in (0, 1, 19_999, 20_000, 45_000, 59_999)]),
            st.integers(BASE_MS - 30_000, BASE_MS + 90_000),
            st.sampled_from([NOW_MS + 300_000, NOW_MS + 300_001, 10**17, -(10**17), None]),
        ),
    }
)
_ITEM = st.one_of(_ROW, st.sampled_from(["not json", '{"ts": "x"}', "", None]))


def _encode(item: Any) -> bytes | None:
    if item is None or isinstance(item, str):
        return None if item is None else item.encode()
    return json.dumps({k: v for k, v in item.items() if v is not None}).encode()


def _rows(items: list[Any]) -> list[dict[str, Any] | None]:
    """What each record decodes to for folding (None: Arrow leaves it to from_json).
    NaN and Infinity are not JSON, but Arrow reads them (as from_json does)."""
    return [item if isinstance(item, dict) else None for item in items]


@pytest.mark.parametrize("plan", [PLAN, SESSION_PLAN], ids=["panes", "sessions"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(_ITEM, min_size=1, max_size=80),
    late=st.sampled_from([None, BASE_MS - 1, BASE_MS + 19_999]),
    seed=st.integers(0, 2**16),
    chunk=st.integers(1, 30),
    block=st.integers(1, 60),
)
def test_partials_equal_the_reference_in_any_block_size(
    plan: CombinePlan, items: list[Any], late: int | None, seed: int, chunk: int, block: int
) -> None:
    offsets = list(range(100, 100 + len(items)))
    random.Random(seed).shuffle(items)  # disorder: offsets do not follow event time
    payloads = [_encode(i) for i in items]
    table = reader_table(payloads, offsets)
    # which records Arrow decodes is the decoder's contract (tests/test_json_decode.py)
    arrow = [not u for u in table.column("_undecoded").to_pylist()]
    decoded = [r if ok else None for r, ok in zip(_rows(items), arrow, strict=True)]
    folded = [(o, r) for o, r in zip(offsets, decoded, strict=True) if folds(r, late)]

    out = combine(table, plan, NOW_MS, late)

    # every other record passes through, unchanged
    passed = out.filter(out.column(PARTIAL).is_null())
    assert sorted(passed.column("offset").to_pylist()) == sorted(
        set(offsets) - {o for o, _ in folded}
    )
    assert passed.column("value").to_pylist() == [
        payloads[offsets.index(o)] for o in passed.column("offset").to_pylist()
    ]
    assert_same_parts(ours(out, plan), reference(folded, plan))
    # the reader's way: chunks of ``chunk`` records, a block emitted once it holds
    # ``block``; merged, the partials are the same, and so are the rows passed through
    folder = Folder(plan, PAYLOAD, range_rows(table, plan), NOW_MS, late, block_rows=block)
    blocks, kept = [], []
    for piece in _pieces(table, chunk):
        ok = _add(folder, piece)
        kept += [o for o, k in zip(piece.column("offset").to_pylist(), ok, strict=True) if k]
        if folder.full:
            blocks.append(ours(folder.emit(), plan))
    last = folder.emit()
    blocks += [ours(last, plan)] if last is not None else []
    assert sorted(kept) == sorted(o for o, _ in folded)
    assert_same_parts(merge(blocks, plan), reference(folded, plan))


def test_a_session_partial_takes_a_row_exactly_one_gap_after() -> None:
    """Exactly one gap after the last row joins the session, one millisecond more does
    not; another user's rows in between and equal times change nothing."""
    gap = SESSION_PLAN.gap_ms
    times = [("a", 0), ("b", 5), ("a", gap), ("a", gap), ("b", 2 * gap + 6), ("a", 2 * gap + 1)]
    rows = [{"user_id": u, "page": "/x", "ts": BASE_MS + t} for u, t in times]
    table = reader_table([json.dumps(r).encode() for r in rows], list(range(len(rows))))
    got = ours(combine(table, SESSION_PLAN, NOW_MS, None), SESSION_PLAN)
    assert {(s - BASE_MS, u): p["n"] for (s, u), p in got.items()} == {
        (0, "a"): 3, (2 * gap + 1, "a"): 1, (5, "b"): 1, (2 * gap + 6, "b"): 1,
    }  # fmt: skip
    assert_same_parts(got, reference(list(enumerate(rows)), SESSION_PLAN))


def test_no_batch_time_or_fold_off_folds_nothing() -> None:
    table = reader_table([b'{"user_id": "a", "ts": %d}' % BASE_MS] * 3, [0, 1, 2])
    for plan, now in ((PLAN, None), (dataclasses.replace(PLAN, fold=False), NOW_MS)):
        out = combine(table, plan, now, None)
        assert out.num_rows == 3 and out.column(PARTIAL).null_count == 3


def test_an_integer_sum_that_could_overflow_is_left_to_spark() -> None:
    big = 2**62
    rows = [b'{"user_id": "a", "qty": %d, "ts": %d}' % (big, BASE_MS)] * 2
    out = combine(reader_table(rows, [0, 1]), PLAN, NOW_MS, None)
    assert out.column(PARTIAL).null_count == 2  # try_sum sees both rows: NULL, not a wrap


def _stage_plan(ansi: bool = False) -> CombinePlan:
    """PLAN behind ``WHERE qty > 1`` with ``qty + 1`` as an aggregated column ``q1``."""
    qty = {"op": "col", "name": "qty", "type": "long"}
    where = {"op": "gt", "args": [qty, {"op": "lit", "value": 1, "type": "long"}],
             "type": "boolean"}  # fmt: skip
    q1 = {"op": "add", "args": [qty, {"op": "lit", "value": 1, "type": "long"}], "type": "long"}
    return dataclasses.replace(
        PLAN, fields=(("q1", ("nn", "sum")),), stage=Stage(where, (("q1", q1),), ansi)
    )


def test_rows_the_filter_drops_fold_apart_and_only_count() -> None:
    """A record the stage's filter drops (FALSE or NULL) folds into a partial marked not
    kept, which carries its count and time (Spark counts it and takes its time, then
    filters it out); the kept ones fold the computed column."""
    rows = [b'{"user_id": "a", "qty": %d, "ts": %d}' % (q, BASE_MS + i)
            for i, q in enumerate([5, 0, 7, 1])]  # fmt: skip
    rows.append(b'{"user_id": "a", "ts": %d}' % (BASE_MS + 9))  # qty NULL: dropped
    plan = _stage_plan()
    out = combine(reader_table(rows, list(range(5))), plan, NOW_MS, None).to_pylist()
    partials = [r[PARTIAL] for r in out]
    kept = [p for p in partials if p["kept"]]
    dropped = [p for p in partials if not p["kept"]]
    assert [(p["n"], p["sum0"], p["nn0"]) for p in kept] == [(2, 6 + 8, 2)]
    assert [(p["n"], p["sum0"]) for p in dropped] == [(3, None)]
    times = {r[PARTIAL]["kept"]: r["_decoded"]["ts"] for r in out}
    assert times == {True: BASE_MS + 2, False: BASE_MS + 9}
    dropped_key = next(r["_decoded"]["user_id"] for r in out if not r[PARTIAL]["kept"])
    assert dropped_key is None


def test_an_expression_spark_would_fail_on_is_left_to_spark() -> None:
    """With ANSI mode, ``qty + 1`` overflowing fails Spark's query: the reader folds none
    of the chunk, so Spark evaluates it; without, it wraps as Spark's does (and the sum
    guard then leaves the extreme value to Spark's try_sum)."""
    rows = [b'{"user_id": "a", "qty": %d, "ts": %d}' % (q, BASE_MS) for q in (2**63 - 1, 3)]
    table = reader_table(rows, [0, 1])
    out = combine(table, _stage_plan(ansi=True), NOW_MS, None)
    assert out.column(PARTIAL).null_count == 2
    small = reader_table([rows[1]] * 2, [0, 1])
    assert combine(small, _stage_plan(ansi=True), NOW_MS, None).column(PARTIAL).null_count == 0
    stage = _stage_plan(ansi=False).stage
    assert stage is not None
    decoded = table.column("_decoded").combine_chunks()
    view, passes = stage.apply(decoded, ["user_id"])
    assert view.field("q1").to_pylist() == [-(2**63), 4] and passes is not None


def range_rows(table: pa.Table, plan: CombinePlan) -> RangeRows:
    """What the reader knows of the range ``table``'s rows come from."""
    schema = table.schema.append(pa.field(PARTIAL, partial_type(plan, PAYLOAD)))
    topic, partition = table.column("topic")[0].as_py(), table.column("partition")[0].as_py()
    return RangeRows(schema, topic, partition, table.column("_late_watermark")[0])


def _add(folder: Folder, piece: pa.Table) -> np.ndarray:
    return folder.add(
        piece.column("_decoded").combine_chunks(),
        piece.column("_undecoded").to_numpy().astype(bool),
        piece.column("offset").to_numpy(),
        None,
    )


def combine(table: pa.Table, plan: CombinePlan, now: int | None, late: int | None) -> pa.Table:
    """``table`` folded as one block the reader's way (``Folder``): the rows passed
    through (with a NULL partial), then the partials."""
    folder = Folder(plan, PAYLOAD, range_rows(table, plan), now, late, table.num_rows)
    ok = _add(folder, table)
    rest = table.filter(pa.array(~ok))
    rest = rest.append_column(PARTIAL, pa.nulls(rest.num_rows, partial_type(plan, PAYLOAD)))
    partials = folder.emit()
    return rest if partials is None else pa.concat_tables([rest, partials.cast(rest.schema)])


def _pieces(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def merge(blocks: list[dict[tuple, dict]], plan: CombinePlan = PLAN) -> dict[tuple, dict]:
    """Partials of several blocks merged the way the window merges them in Spark: by
    pane, or, for sessions, a user's partials in order of start, one joining the session
    before it when it starts at or before that one's end (highest time + gap)."""
    out: dict[tuple, dict] = {}
    if plan.gap_ms:
        users: dict[Any, list[tuple[int, dict]]] = {}
        for block in blocks:
            for (start, user), p in block.items():
                users.setdefault(user, []).append((start, p))
        for user, partials in users.items():
            partials.sort(key=lambda sp: sp[0])
            start, q = partials[0][0], dict(partials[0][1])
            for s, p in partials[1:]:
                if s <= q["t"] + plan.gap_ms:
                    _merge_parts(q, p)
                else:
                    out[(start, user)], start, q = q, s, dict(p)
            out[(start, user)] = q
        return out
    for block in blocks:
        for key, p in block.items():
            if key not in out:
                out[key] = dict(p)
            else:
                _merge_parts(out[key], p)
    return out


def _merge_parts(q: dict[str, Any], p: dict[str, Any]) -> None:
    """Merge partial ``p`` into ``q``."""
    q["n"] += p["n"]
    for i in range(len(PLAN.fields)):
        q[f"err{i}"] = q.get(f"err{i}", 0) + p.get(f"err{i}", 0)
    q["t"] = max(q["t"], p["t"])
    for i, (name, _) in enumerate(PLAN.fields):
        q[f"nn{i}"] += p[f"nn{i}"]
        if name != "page":
            sums = [v for v in (q[f"sum{i}"], p[f"sum{i}"]) if v is not None]
            q[f"sum{i}"] = sum(sums) if sums else None
            both = [v for v in (q[f"min{i}"], p[f"min{i}"]) if v is not None]
            q[f"min{i}"] = spark_min(both)
            both = [v for v in (q[f"max{i}"], p[f"max{i}"]) if v is not None]
            q[f"max{i}"] = spark_max(both)
        else:
            for part, pick in (("min", min), ("max", max), ("first", min), ("last", max)):
                both = [v for v in (q[f"{part}{i}"], p[f"{part}{i}"]) if v is not None]
                q[f"{part}{i}"] = pick(both) if both else None


# -- end to end: the same windows with pre-aggregation on and off --------------------------

AGGREGATIONS = [
    {"agg": "count", "as": "n"},
    {"agg": "count", "column": "amount", "as": "n_amount"},
    {"agg": "sum", "column": "amount", "as": "amount_sum"},
    {"agg": "sum", "column": "qty", "as": "qty_sum"},
    {"agg": "avg", "column": "qty", "as": "qty_avg"},
    {"agg": "min", "column": "amount", "as": "amount_min"},
    {"agg": "max", "column": "amount", "as": "amount_max"},
    {"agg": "min", "column": "page", "as": "page_min"},
    {"agg": "first", "column": "page", "as": "first_page"},
    {"agg": "last", "column": "page", "as": "last_page"},
]
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"


def _messy_stream(rng: random.Random, n: int) -> list[Record]:
    """Three partitions; equal timestamps, disorder within and beyond the lateness, NULL
    keys and values, NaN / inf / 1e17, a malformed record, a missing and a far-future
    event time."""
    records = []
    for i in range(n):
        ts = BASE_MS + (i // 3) * 200 - rng.choice([0, 0, 0, 2_000, 15_000])
        amount: Any = rng.choice([None, 1.5, -2.25, 1e17, 7.0, 100.125])
        doc: dict[str, Any] = {
            "user_id": rng.choice(["a", "b", "c", "d", None]),
            "page": rng.choice(["/home", "/cart", "/pay", None]),
            "qty": rng.choice([None, 1, 2, -3, 9]),
            "ts": ts,
        }
        value = json.dumps({**doc, **({"amount": amount} if amount is not None else {})})
        if i % 97 == 5:
            value = value[:-1] + ', "amount": NaN}'
        if i % 89 == 7:
            value = value[:-1] + ', "amount": Infinity}'
        if i % 83 == 11:
            value = "{not json"
        if i % 101 == 13:
            value = json.dumps({**doc, "ts": None})
        if i % 103 == 17:
            value = json.dumps({**doc, "ts": BASE_MS + 10**12})  # ~32 years ahead
        records.append(Record(value=value.encode(), partition=i % 3, timestamp_ms=ts))
    return records


def _run(
    spark: SparkSession, workdir: Path, tag: str, bootstrap: str, topic: str, window: dict,
    per_trigger: int | None, sql: str | None = None,
) -> tuple[Any, dict, set, int]:  # fmt: skip
    spec = make_spec(
        workdir / tag,
        bootstrap,
        topic,
        window,
        name=f"combine-{tag}",
        schema=SCHEMA,
        source={"max_offsets_per_trigger": per_trigger} if per_trigger else {},
        sql=sql,
    )
    runner = PipelineRunner(spec, spark)
    if sql:  # the SQL is in the reader's grammar: it must fold behind it
        line = {p.part: p.how for p in runner.compiled.describe()}
        assert line["pre-aggregation"].startswith(("on:", "off (pre_aggregate")), line
    summary = runner.run(available_now=True)
    spark_rows = sum(int(p.get("numInputRows", 0)) for p in runner.progress.progress.values())
    dead = {
        (r["partition"], r["offset"], r["reason"])
        for r in read_delta(spec.dead_letter_path()).to_pylist()
    }
    return summary, read_windows(spec.target.path, spec.natural_key()), dead, spark_rows


#: A pre-stage in the reader's grammar (flow_jobs.kafka.prestage): a filter with NULLs, IN
#: with NULL and a negated <=>, a renamed key, a computed column (integer arithmetic, a
#: cast) and _kafka kept, which first / last need; rows it drops still move the
#: watermark. (NaN is not JSON: those records reach from_json, not the reader's
#: expressions; tests/test_prestage.py checks the grammar's NaN rules.)
FILTER_SQL = (
    "SELECT user_id AS uid, page, amount, CAST(qty * 2 AS DOUBLE) + 0.5 AS qty2, ts, _event_ts, "
    "_kafka FROM clicks WHERE user_id IS NOT NULL AND (qty > 3 OR amount >= 5.0 OR amount IS NULL) "
    "AND NOT page <=> '/home' AND user_id IN ('a', 'b', 'd', 'e', NULL)"
)


def _filtered(window: dict) -> dict:
    """The window over FILTER_SQL's columns."""
    aggregations = [
        {**a, "column": {"qty": "qty2"}.get(a["column"], a["column"])} if "column" in a else a
        for a in window["aggregations"]
    ]
    return {**window, "group_by": ["uid"], "aggregations": aggregations}


@pytest.mark.parametrize(
    "shape, per_trigger, sql",
    [
        ("tumbling", None, None),
        # cumulate windows fold into panes as tumbling and hopping ones do, with windows
        # of several lengths: the plain tiny-batch case of all three (hopping's panes
        # also run behind the SQL below)
        ("cumulate", 60, None),
        ("tumbling", None, FILTER_SQL),
        ("hopping", 60, FILTER_SQL),
        ("session", 60, None),
        ("session", None, FILTER_SQL),
    ],
)
def test_windows_are_the_same_with_and_without_pre_aggregation(
    shape: str,
    per_trigger: int | None,
    sql: str | None,
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
) -> None:
    topic = f"combine-{shape}-{per_trigger}-{random.randrange(10**6)}"
    broker.create_topic(topic, partitions=3)
    records = _messy_stream(random.Random(f"{shape}{per_trigger}"), 600)
    if shape == "session":  # mid-stream, side by side in one partition, one gap (1.2 s)
        # apart, just under and just over: a session breaks only at the last
        # (tests/test_spark_contracts.py); later records close both sessions
        records[300:300] = [
            Record(value=json.dumps({"user_id": "e", "qty": 4, "ts": t}).encode(), partition=0,
                   timestamp_ms=t)
            for t in (BASE_MS + 20_000, BASE_MS + 21_200, BASE_MS + 22_399, BASE_MS + 23_600)
        ]  # fmt: skip
    send(broker.bootstrap_servers, topic, records)
    sizes = {"duration_ms": 20_000, **({"hop_ms": 5_000} if shape == "hopping" else {})}
    if shape == "cumulate":
        sizes = {"step_ms": 5_000, "max_duration_ms": 20_000}
    if shape == "session":  # a user's records are ~1 s apart on average: some gaps break
        sizes = {"gap_ms": 1_200}
    window = {
        "kind": shape,
        **sizes,
        "event_time_column": "_event_ts" if shape == "hopping" or per_trigger else "ts",
        "lateness_ms": 4_000,
        "late_data": "dlq",
        "group_by": ["user_id"],
        "aggregations": AGGREGATIONS,
    }
    if sql:
        window = _filtered(window)
    on = _run(spark, workdir, "on", broker.bootstrap_servers, topic, window, per_trigger, sql)
    off = _run(
        spark, workdir, "off", broker.bootstrap_servers, topic,
        {**window, "pre_aggregate": False}, per_trigger, sql,
    )  # fmt: skip
    (s_on, w_on, dead_on, spark_on), (s_off, w_off, dead_off, spark_off) = on, off

    assert s_on.input_rows == s_off.input_rows == len(records)
    assert spark_off == len(records)
    assert spark_on < len(records), "no partial reached Spark: nothing was folded"
    assert dead_on == dead_off and dead_off, "the same dead letters, with their reasons"
    assert s_on.late_rows == s_off.late_rows
    if per_trigger:
        assert s_off.late_rows > 0, "the stream must hold late rows"
    assert_same_windows(w_on, w_off)
    if shape == "session":  # e's sessions, by the spec reference's rule
        e = sorted((_ms(k[0]) - BASE_MS, _ms(k[1]) - BASE_MS) for k in w_off if k[2] == "e")
        assert e == [(20_000, 23_599), (23_600, 24_800)]
    nan_windows = [r for r in w_off.values() if isinstance(r["amount_max"], float)
                   and math.isnan(r["amount_max"])]  # fmt: skip
    assert nan_windows, "a window must hold a NaN next to folded rows"
    assert np.isinf([r["amount_sum"] for r in w_off.values() if r["amount_sum"] is not None]).any()


def test_a_checkpoint_keeps_the_aggregation_it_started_with(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """A checkpoint that ran without pre-aggregation (one from before it existed, or
    ``pre_aggregate = false``) keeps Spark's plain aggregation when it is turned on: its
    state holds the plain buffers. A marked one keeps merging partials when it is turned
    off. Both resume, and both end with the windows of one run over all the events."""
    topic = f"combine-keep-{random.randrange(10**6)}"
    broker.create_topic(topic, partitions=3)
    rng = random.Random("keep")
    events = [
        {"user_id": rng.choice(["a", "b", None]), "page": rng.choice(["/x", "/y", None]),
         "amount": rng.choice([None, 1.5, -2.0, 7.25]), "qty": rng.choice([None, 1, 4]),
         "ts": BASE_MS + i * 150 - rng.randint(0, 2_000)}
        for i in range(400)
    ]  # fmt: skip
    records = [
        Record(value=json.dumps(e).encode(), partition=i % 3, timestamp_ms=e["ts"])
        for i, e in enumerate(events)
    ]
    window = {
        "kind": "tumbling",
        "duration_ms": 10_000,
        "event_time_column": "ts",
        "lateness_ms": 3_000,
        "group_by": ["user_id"],
        "aggregations": AGGREGATIONS,
    }

    def run(tag: str, pre_aggregate: bool) -> tuple[Any, int]:
        spec = make_spec(
            workdir / tag,
            broker.bootstrap_servers,
            topic,
            {**window, "pre_aggregate": pre_aggregate},
            name=f"combine-keep-{tag}",
            schema=SCHEMA,
        )
        runner = PipelineRunner(spec, spark)
        summary = runner.run(available_now=True)
        seen = sum(int(p.get("numInputRows", 0)) for p in runner.progress.progress.values())
        return summary, seen

    send(broker.bootstrap_servers, topic, records[:200])
    compiled = PipelineRunner(  # as validate --plan does: compiling marks nothing
        make_spec(workdir / "compiled", broker.bootstrap_servers, topic, window, schema=SCHEMA),
        spark,
    ).compiled
    assert compiled.pre_aggregates and not (workdir / "compiled" / "checkpoint").exists()
    plain, seen = run("plain", pre_aggregate=False)
    assert seen == 200 and not (workdir / "plain" / "checkpoint" / MARKER).exists()
    marked, seen = run("marked", pre_aggregate=True)
    assert seen < 200 and (workdir / "marked" / "checkpoint" / MARKER).exists()

    send(broker.bootstrap_servers, topic, records[200:])
    plain, seen = run("plain", pre_aggregate=True)  # resumes its plain aggregation
    assert plain.input_rows == seen == 200, "a checkpoint that ran without it never folds"
    assert not (workdir / "plain" / "checkpoint" / MARKER).exists()
    marked, seen = run("marked", pre_aggregate=False)  # resumes merging, folds nothing
    assert marked.input_rows == seen == 200

    one_run, _ = run("one-run", pre_aggregate=True)
    assert one_run.input_rows == len(events) and one_run.late_rows == 0
    key = ("window_start", "window_end", "user_id")
    expected = read_windows(workdir / "one-run" / "target", key)
    for tag in ("plain", "marked"):
        assert_same_windows(read_windows(workdir / tag / "target", key), expected)
