"""A window family written in the test tree (``tests/plugins/offset_windows.py``: tumbling
windows shifted by ``offset_ms``, Flink's ``TUMBLE`` offset), which a spec loads with
``plugins = [...]``, runs end to end like a built-in one without a line of the engine
naming it: on Spark's aggregation (the Kafka reader folding rows into its panes) and on
the state API (an exact distinct count), in tiny micro-batches across a restart and as
one, equal to its definition; ``validate --plan`` says what it compiled to, a changed
``offset_ms`` is refused on resume, and ``inspect`` shows its open windows with values."""

from __future__ import annotations

import json
import math
import random
import tomllib
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.io.checkpoint_claim import IncompatibleSpec
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.inspect import inspect_state
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import (
    assert_same_windows,
    plugin_spec_file,
    random_clicks,
    read_windows,
    send,
    to_records,
    validate_in_a_fresh_interpreter,
)
from tests.test_plan_description import check_plan_lines, folds, reader_options

PLUGIN = "tests.plugins.offset_windows"
DURATION, OFFSET, LATENESS = 30_000, 7_000, 6_000
#: No TIMESTAMP field: Arrow decodes the payload, so the reader may fold it.
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
AGGREGATIONS: list[dict[str, Any]] = [
    {"agg": "count", "as": "n"},
    {"agg": "count", "column": "amount", "as": "n_amount"},
    {"agg": "sum", "column": "qty", "as": "qty_sum"},
    {"agg": "min", "column": "page", "as": "page_min"},
    {"agg": "max", "column": "amount", "as": "amount_max"},
    {"agg": "avg", "column": "amount", "as": "amount_avg"},
]
#: An exact distinct count moves the window to the state API (capped while open).
EXACT = {"agg": "count_distinct", "column": "qty", "as": "qtys", "mode": "exact",
         "max_distinct_values_per_group": 1_000}  # fmt: skip


def window_start(ts: int) -> int:
    """The definition: the window of ``ts`` starts at the last ``k * duration + offset``."""
    return ts - (ts - OFFSET) % DURATION


def aggregate(rows: list[dict[str, Any]], exact: bool) -> dict[str, Any]:
    amounts = [r["amount"] for r in rows if r["amount"] is not None]
    qtys = [r["qty"] for r in rows if r["qty"] is not None]
    pages = [r["page"] for r in rows if r["page"] is not None]
    out = {
        "n": len(rows),
        "n_amount": len(amounts),
        "qty_sum": sum(qtys) if qtys else None,
        "page_min": min(pages) if pages else None,
        "amount_max": max(amounts) if amounts else None,
        "amount_avg": math.fsum(amounts) / len(amounts) if amounts else None,
    }
    return {**out, "qtys": len(set(qtys))} if exact else out


def reference(
    events: list[dict[str, Any]], watermark: int, exact: bool, closed: bool = True
) -> dict[tuple, dict[str, Any]]:
    """The windows the watermark has closed (end <= watermark), or those still open."""
    windows: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        start = window_start(e["ts"])
        if (start + DURATION <= watermark) == closed:
            windows[(_ts(start), _ts(start + DURATION), e["user_id"])].append(e)
    return {key: aggregate(rows, exact) for key, rows in windows.items()}


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def spec_file(
    workdir: Path, bootstrap: str, topic: str, name: str, per_trigger: int | None, **window: Any
) -> Path:
    """A pipeline of the plug-in's kind as a user writes it."""
    transform = {"window": {"kind": "tumbling_offset", "duration_ms": DURATION,
                            "offset_ms": OFFSET, "event_time_column": "ts",
                            "lateness_ms": LATENESS, "group_by": ["user_id"],
                            **window}}  # fmt: skip
    return plugin_spec_file(
        workdir, name, PLUGIN, (bootstrap, topic, SCHEMA), per_trigger, transform
    )


def test_a_spec_brings_the_plug_ins_kind_with_its_plugins_key(tmp_path: Path) -> None:
    """In a fresh interpreter only the spec's ``plugins`` can register the kind: with
    it the spec validates, without it the kind is unknown."""
    path = spec_file(tmp_path, "127.0.0.1:9092", "clicks", "offset-valid", None,
                     aggregations=AGGREGATIONS)  # fmt: skip

    ok = validate_in_a_fresh_interpreter(path)
    assert ok.returncode == 0, ok.stderr
    assert "tumbling_offset window 30000 ms from 7000 ms" in ok.stdout
    doc = tomllib.loads(path.read_text())
    del doc["plugins"]
    bare = tmp_path / "without.toml"
    bare.write_text(tomli_w.dumps(doc))
    refused = validate_in_a_fresh_interpreter(bare)
    assert refused.returncode != 0
    assert "transform.window.kind: Input should be 'tumbling'" in refused.stderr
    assert "(got 'tumbling_offset')" in refused.stderr


@pytest.mark.parametrize("engine", ["native", "state"])
def test_offset_windows_run_end_to_end_as_their_definition_says(
    engine: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    exact = engine == "state"
    aggregations = [*AGGREGATIONS, EXACT] if exact else AGGREGATIONS
    rng = random.Random(f"offset-{engine}")
    events = random_clicks(rng, 600, step_ms=450, disorder_ms=int(LATENESS * 0.6))
    topic = f"offset-windows-{engine}-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=3)
    bootstrap = broker.bootstrap_servers
    tiny_path = spec_file(workdir, bootstrap, topic, f"offset-{engine}-tiny", 120,
                          aggregations=aggregations)  # fmt: skip
    tiny = load_spec(tiny_path)
    assert tiny.window.engine == engine

    # Tiny micro-batches, with a restart (a new runner on the same checkpoint) halfway.
    records = to_records(events, partitions=3)
    half = len(records) // 2
    send(bootstrap, topic, records[:half])
    first = PipelineRunner(tiny, spark).run(available_now=True)
    send(bootstrap, topic, records[half:])
    second = PipelineRunner(tiny, spark).run(available_now=True)
    assert first.late_rows == second.late_rows == 0
    assert first.batches + second.batches >= 5

    # The whole topic as one micro-batch.
    whole = load_spec(spec_file(workdir, bootstrap, topic, f"offset-{engine}-whole", None,
                                aggregations=aggregations))  # fmt: skip
    assert PipelineRunner(whole, spark).run(available_now=True).batches >= 1

    watermark = max(e["ts"] for e in events) - LATENESS
    expected = reference(events, watermark, exact)
    assert len({key[0] for key in expected}) >= 4, "want several windows"
    assert all(key[0].timestamp() * 1000 % DURATION == OFFSET for key in expected)
    assert_same_windows(read_windows(tiny.target.path, tiny.natural_key()), expected)
    assert_same_windows(read_windows(whole.target.path, whole.natural_key()), expected)

    # inspect: the windows still open, with their values as they stand.
    report = inspect_state(spark, tiny, store=LedgerStore.for_spec(tiny), limit=1_000)
    still_open = reference(events, watermark, exact, closed=False)
    assert still_open and report.open_windows == len(still_open)
    shown = {(w.start, w.end, w.group["user_id"]): w.aggregates for w in report.windows}
    assert shown.keys() == still_open.keys()
    for key, want in still_open.items():
        assert shown[key]["n"] == want["n"] and shown[key]["qty_sum"] == want["qty_sum"], key
        if exact:
            assert shown[key]["qtys"] == want["qtys"], key
    assert main(["inspect", str(tiny_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["open_windows"] == len(still_open)

    # validate --plan: the window's line is what compiled, checked against the query.
    by_part = check_plan_lines(PipelineRunner(tiny, spark), spark)
    operator = by_part["window: tumbling_offset 30000 ms from 7000 ms"]
    if exact:
        assert "transformWithStateInPandas" in operator
    else:
        assert f"window(event_time, {DURATION} ms, startTime {OFFSET} ms)" in operator
        assert by_part["pre-aggregation"].startswith("on:")
        runner = PipelineRunner(tiny, spark)
        plan = folds(reader_options(runner.compiled.frame)["clicks"])
        assert plan is not None and plan.pane_ms == math.gcd(DURATION, OFFSET)
    assert main(["validate", str(tiny_path), "--plan"]) == 0
    assert "tumbling_offset 30000 ms from 7000 ms" in capsys.readouterr().out

    # Fingerprinted: another offset cannot resume this checkpoint.
    shifted = tiny.to_document()
    shifted["transform"]["window"]["offset_ms"] = OFFSET + 1_000
    with pytest.raises(IncompatibleSpec) as refused:
        PipelineRunner(PipelineSpec.model_validate(shifted), spark).run(available_now=True)
    assert f"transform.window.offset_ms: {OFFSET} -> {OFFSET + 1_000}" in str(refused.value)
