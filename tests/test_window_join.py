"""``[transform.window_join]``: the rows of two sources with equal keys in one window.

The reference follows the rule in docs/spec-reference.md ("[transform.window_join]"),
written here on its own, as Flink SQL's window join reads: a row at event time t is in
every window [s, e) with s <= t < e (tumbling: s a multiple of the size; hopping: of the
hop; cumulate: [c, c + k * step) for c the multiple of the largest size at or below t).
In each window, the left and right rows with equal keys pair up (a NULL key equals
nothing): inner gives the pairs; left/right/full also each row of the kept side(s)
without a pair, the other side NULL; semi gives each left row with a pair once, anti
each left row without one. A window's rows are joined once the watermark (the lower of
the two sources') reaches its end; rows at or below the previous batch's watermark are
late.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.inspect import inspect_state
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.window_join.compile import window_bounds
from flow_jobs.window_join.processor import WindowJoinState, release
from flow_jobs.window_join.spec import WindowJoinSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import send

Event = dict[str, Any]
HOWS = ("inner", "left", "right", "full", "semi", "anti")


def reference_windows(kind: str, sizes: dict[str, int], t: int) -> list[tuple[int, int]]:
    """The windows [s, e) holding time ``t``, by enumeration."""
    if kind == "cumulate":
        step, most = sizes["step_ms"], sizes["max_duration_ms"]
        c = math.floor(t / most) * most
        return [(c, c + k * step) for k in range(1, most // step + 1) if t < c + k * step]
    size = sizes["duration_ms"]
    hop = sizes.get("hop_ms", size)
    k = math.floor(t / hop)
    starts = [j * hop for j in range(k - size // hop - 1, k + 1)]
    return [(s, s + size) for s in starts if s <= t < s + size]


def reference_join(
    left: list[Event], right: list[Event], how: str, windows: Any
) -> Counter[tuple[Any, ...]]:
    """(window, left row id or None, right row id or None) of every output row."""
    out: Counter[tuple[Any, ...]] = Counter()
    by_window: dict[tuple[int, int], tuple[list[Event], list[Event]]] = {}
    for side, rows in ((0, left), (1, right)):
        for e in rows:
            for w in windows(e["ts"]):
                by_window.setdefault(w, ([], []))[side].append(e)
    for w, (ls, rs) in by_window.items():
        matched_right: set[Any] = set()
        for lrow in ls:
            pairs = [r for r in rs if lrow["k"] is not None and r["k"] == lrow["k"]]
            if how == "semi":
                out.update([(w, lrow["id"], None)] if pairs else [])
            elif how == "anti":
                out.update([] if pairs else [(w, lrow["id"], None)])
            else:
                out.update((w, lrow["id"], r["id"]) for r in pairs)
                matched_right |= {r["id"] for r in pairs}
                if not pairs and how in ("left", "full"):
                    out[(w, lrow["id"], None)] += 1
        if how in ("right", "full"):
            out.update((w, None, r["id"]) for r in rs if r["id"] not in matched_right)
    return out


WINDOWS = [
    ("tumbling", {"duration_ms": 5}),
    ("hopping", {"duration_ms": 6, "hop_ms": 2}),
    ("cumulate", {"step_ms": 3, "max_duration_ms": 9}),
]


# -- the operator's rule, under any cut --------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),  # a right row (else a left one)
            st.integers(0, 40),
            st.sampled_from(["a", "b", None]),
        ),
        min_size=1,
        max_size=40,
    ),
    st.sampled_from(WINDOWS),
    st.sampled_from(HOWS),
    st.integers(0, 10),
    st.lists(st.integers(1, 40), max_size=8),
)
def test_release_joins_every_window_as_the_rule_whatever_the_cut(
    rows: list[tuple[bool, int, str | None]],
    window: tuple[str, dict[str, int]],
    how: str,
    lateness: int,
    cuts: list[int],
) -> None:
    """Rows arrive in the order given, cut into micro-batches anywhere; after each batch
    the watermark (the lower of both sides' highest time less the lateness) releases
    the windows whose end it reached; a row at or below the previous batch's watermark
    is late. Every window released is joined as the reference says, once."""
    kind, sizes = window

    def windows(t: int) -> list[tuple[int, int]]:
        return reference_windows(kind, sizes, t)

    events = [{"right": r, "ts": t, "k": k, "id": i} for i, (r, t, k) in enumerate(rows)]
    bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
    state, watermark = WindowJoinState(), None
    tops: dict[bool, int | None] = {True: None, False: None}
    on_time: list[Event] = []
    out: Counter[tuple[Any, ...]] = Counter()
    for lo, hi in itertools.pairwise(bounds):
        for e in events[lo:hi]:
            if watermark is not None and e["ts"] <= watermark:
                continue  # late
            on_time.append(e)
            key = None if e["k"] is None else json.dumps(e["k"])
            for s, end in windows(e["ts"]):
                state.held.append((end, s, int(e["right"]), e["ts"], 0, e["id"], key, e["id"]))
            top = tops[e["right"]]
            tops[e["right"]] = e["ts"] if top is None else max(top, e["ts"])
        if None in tops.values():
            continue  # a side without any row holds the watermark at its start
        low = min(tops.values()) - lateness  # type: ignore[type-var]
        watermark = low if watermark is None else max(watermark, low)
        out.update(((j.start, j.end), j.left, j.right) for j in release(state, watermark, how))
    closed = watermark if watermark is not None else -(10**9)
    expected = reference_join(
        [e for e in on_time if not e["right"]], [e for e in on_time if e["right"]], how, windows
    )
    assert out == Counter({k: n for k, n in expected.items() if k[0][1] <= closed})
    assert all(r[0] > closed for r in state.held), "what stays is of open windows only"


def test_a_row_goes_into_each_window_spark_computes_at_the_edges(spark: SparkSession) -> None:
    """``window_bounds`` in Spark against the enumeration, at window edges (a start, one
    microsecond before, one after), before the epoch and at microsecond times."""
    cases = [
        ("tumbling", {"duration_ms": 10_000}),
        ("hopping", {"duration_ms": 10_000, "hop_ms": 2_000}),
        ("hopping", {"duration_ms": 5_000, "hop_ms": 3_000}),
        ("cumulate", {"step_ms": 2_000, "max_duration_ms": 10_000}),
    ]
    times_us = [0, 1, -1, 9_999_999, 10_000_000, 10_000_001, 2_000_000, 1_999_999, -10_000_000]
    times_us += [1_700_000_000_000_000, 1_700_000_001_999_999, 1_700_000_003_000_500]
    for kind, sizes in cases:
        join = WindowJoinSpec(
            left_source="a",
            right_source="b",
            left_keys=["k"],
            right_keys=["k"],
            kind=kind,
            **sizes,  # type: ignore[arg-type]
        )
        frame = spark.createDataFrame([(t,) for t in times_us], "t BIGINT")
        got = frame.select("t", window_bounds(join, F.timestamp_micros("t")).alias("w")).collect()
        for row in got:
            t = row["t"]
            # the reference in µs: sizes scaled, windows of t
            expected = [
                (s * 1000, e * 1000)
                for s, e in reference_windows(kind, {k: v for k, v in sizes.items()}, t / 1000)
            ]
            assert sorted((w["s"], w["e"]) for w in row["w"]) == sorted(expected), (kind, t)


# -- end to end --------------------------------------------------------------------------

PARTITIONS = 3
LATENESS = 1_500
SIZE = 2_000
BASE = 1_700_000_000_000  # a multiple of SIZE: window edges at BASE + k * SIZE
KEYS = ("p1", "p2", "p3", "p4", "p5")


class Topic:
    """Records round-robin over the partitions; each event learns its (partition, offset)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.offsets = [0] * PARTITIONS

    def records(self, events: list[Event]) -> list[Record]:
        out = []
        for e in events:
            p = min(range(PARTITIONS), key=lambda q: self.offsets[q])
            e["_at"] = (p, self.offsets[p])
            self.offsets[p] += 1
            value = {k: v for k, v in e.items() if not k.startswith("_")}
            out.append(Record(json.dumps(value).encode(), p, None, e["ts"]))
        return out


def _events(rng: random.Random, side: str, n: int, start: int, first_id: int) -> list[Event]:
    """Times advancing 60 ms a row with disorder within the lateness, a few at window
    edges exactly (and 1 ms before), equal times, NULL keys now and then."""
    out = []
    for i in range(n):
        t = start + i * 60 - rng.randint(0, 500)
        if rng.random() < 0.08:
            t = t - t % SIZE - rng.choice([0, 1])  # on an edge, or just before it
        key = rng.choice([*KEYS, None]) if rng.random() < 0.9 else None
        out.append({"id": first_id + i, "k": key, "v": f"{side}{i}", "ts": t})
    for i in rng.sample(range(1, n), n // 8):
        out[i]["ts"] = out[i - 1]["ts"]
    return out


#: join type -> (window kind and sizes, tiny micro-batches)
SHAPES: dict[str, tuple[dict[str, Any], bool]] = {
    "inner": ({"kind": "tumbling", "duration_ms": SIZE}, False),
    "left": ({"kind": "hopping", "duration_ms": SIZE, "hop_ms": SIZE // 2}, True),
    "right": ({"kind": "cumulate", "step_ms": SIZE // 2, "max_duration_ms": SIZE}, False),
    "full": ({"kind": "tumbling", "duration_ms": SIZE}, True),
    "semi": ({"kind": "hopping", "duration_ms": SIZE, "hop_ms": SIZE // 2}, False),
    "anti": ({"kind": "tumbling", "duration_ms": SIZE}, True),
}


def _spec(workdir: Path, bootstrap: str, topics: tuple[str, str], how: str) -> PipelineSpec:
    window, tiny = SHAPES[how]

    def source(name: str, topic: str) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "kafka",
            "topic": topic,
            "bootstrap_servers": bootstrap,
            "format": "json",
            "schema": "id BIGINT, k STRING, v STRING, ts BIGINT",
            **({"max_offsets_per_trigger": 45} if tiny else {}),
        }

    right = {} if how in ("semi", "anti") else {"output_right_columns": {"id": "right_id"}}
    return PipelineSpec.model_validate(
        {
            "name": f"window-join-{how}",
            "sources": [source("persons", topics[0]), source("auctions", topics[1])],
            "transform": {
                "window_join": {
                    "left_source": "persons",
                    "right_source": "auctions",
                    "left_keys": ["k"],
                    "right_keys": ["k"],
                    "how": how,
                    **window,
                    "event_time_column": "ts",
                    "lateness_ms": LATENESS,
                    "output_left_columns": {"id": "left_id", "k": "k"},
                    **right,
                },
            },
            "target": {"kind": "delta", "path": str(workdir / how / "target")},
            "checkpoint": {"location": str(workdir / how / "checkpoint")},
            "dead_letter": {"path": str(workdir / how / "dead_letters")},
        }
    )


def test_each_join_type_joins_each_closed_window_once_under_any_cut_and_restart(
    spark: SparkSession, broker: EmbeddedBroker, workdir: Path
) -> None:
    """Both topics over three partitions, NULL keys, equal times, times on window edges,
    disorder within the lateness, and late rows on both sides; two runs on one
    checkpoint (a restart, with windows that span it). Each join type on its own window
    kind, half in tiny micro-batches: each target is the reference's rows of the windows
    the final watermark closed, once each, and the late rows are counted one by one."""
    rng = random.Random("window-join")
    names = (f"persons-{rng.randrange(10**9)}", f"auctions-{rng.randrange(10**9)}")
    for name in names:
        broker.create_topic(name, partitions=PARTITIONS)
    topics = (Topic(names[0]), Topic(names[1]))
    left1, right1 = _events(rng, "p", 90, BASE, 0), _events(rng, "a", 110, BASE, 10_000)
    start2 = BASE + 90 * 60
    left2, right2 = _events(rng, "p", 70, start2, 1_000), _events(rng, "a", 80, start2, 11_000)
    # far behind run 1's watermark on either side: late whatever the cut
    late_left = [{**e, "id": 5_000 + i} for i, e in enumerate(rng.sample(left1[:30], 4))]
    late_right = [{**e, "id": 15_000 + i} for i, e in enumerate(rng.sample(right1[:30], 3))]
    specs = {how: _spec(workdir, broker.bootstrap_servers, names, how) for how in HOWS}

    def run_all() -> int:
        return sum(
            PipelineRunner(s, spark).run(available_now=True).late_rows for s in specs.values()
        )

    send(broker.bootstrap_servers, names[0], topics[0].records(left1))
    send(broker.bootstrap_servers, names[1], topics[1].records(right1))
    late = run_all()
    mixed = list(left2)
    for row in late_left:
        mixed.insert(rng.randrange(len(mixed) + 1), row)
    send(broker.bootstrap_servers, names[0], topics[0].records(mixed))
    send(broker.bootstrap_servers, names[1], topics[1].records(right2 + late_right))
    late += run_all()
    assert late == len(HOWS) * (len(late_left) + len(late_right))

    left, right = left1 + left2, right1 + right2
    assert any(e["ts"] % SIZE == 0 for e in left + right), "rows on window edges"
    watermark = min(max(e["ts"] for e in left), max(e["ts"] for e in right)) - LATENESS
    for how, spec in specs.items():
        window, _ = SHAPES[how]
        sizes = {k: v for k, v in window.items() if k != "kind"}

        def windows(t: int, kind: str = window["kind"], sizes: dict = sizes) -> list:
            return reference_windows(kind, sizes, t)

        everything = reference_join(left, right, how, windows)
        expected = Counter({k: n for k, n in everything.items() if k[0][1] <= watermark})
        assert any(k[0][1] > watermark for k in everything), how
        rows = read_delta(spec.target.path).to_pylist()
        assert len(rows) == len({(r["window_start"], r["join_row_id"]) for r in rows}), how
        got = Counter(
            (
                (_ms(r["window_start"]), _ms(r["window_end"])),
                r["left_id"],
                r.get("right_id"),
            )
            for r in rows
        )
        assert got == expected, how
        assert len(expected) > 20, how
    # inspect lists the rows of the windows still open, once per window
    report = inspect_state(spark, specs["left"], limit=100_000)
    held = Counter((r.side, r.row["id"]) for r in report.join_rows)
    hop_windows = SHAPES["left"][0]
    sizes = {k: v for k, v in hop_windows.items() if k != "kind"}
    expected_held = Counter(
        (side, e["id"])
        for side, rows_ in (("left", left), ("right", right))
        for e in rows_
        for _, end in reference_windows("hopping", sizes, e["ts"])
        if end > watermark and (side == "left" or e["k"] is not None)
    )
    assert held == expected_held


def _ms(t: Any) -> int:
    return round(t.timestamp() * 1000)


# -- spec rules --------------------------------------------------------------------------


def _doc(**join: Any) -> dict[str, Any]:
    def source(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "kind": "kafka",
            "topic": name,
            "bootstrap_servers": "127.0.0.1:9092",
            "format": "json",
            "schema": "k STRING, ts BIGINT",
        }

    return {
        "name": "window-join-rules",
        "sources": [source("l"), source("r")],
        "transform": {
            "window_join": {
                "left_source": "l",
                "right_source": "r",
                "left_keys": ["k"],
                "right_keys": ["k"],
                "kind": "tumbling",
                "duration_ms": 10_000,
                "event_time_column": "ts",
                **join,
            }
        },
        "target": {"kind": "delta", "path": "/tmp/x"},
    }


@pytest.mark.parametrize(
    ("join", "message"),
    [
        ({"right_source": "l"}, "is also left_source"),
        ({"right_source": "z"}, "'z' is not a declared source"),
        ({"right_keys": ["k", "ts"]}, "pair up one to one"),
        ({"left_keys": []}, "left_keys is empty"),
        ({"right_keys": ["nope"]}, "'nope' is not a column of source 'r'"),
        ({"kind": "session"}, "kind"),
        ({"kind": "hopping"}, 'kind = "hopping" needs duration_ms and hop_ms'),
        ({"hop_ms": 5_000}, 'hop_ms is not a key of kind = "tumbling"'),
        ({"kind": "hopping", "hop_ms": 20_000}, "hop_ms = 20000 must be <= duration_ms"),
        (
            {"kind": "cumulate", "duration_ms": None, "step_ms": 3_000, "max_duration_ms": 10_000},
            "must be a multiple of step_ms",
        ),
        ({"how": "semi", "output_right_columns": ["k"]}, "outputs the left rows only"),
        ({"how": "cross"}, "how"),
    ],
)
def test_a_window_join_names_its_sides_and_windows(join: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        PipelineSpec.model_validate(_doc(**join))
    assert PipelineSpec.model_validate(_doc()).transform.window_join is not None
