"""An aggregator written in the test tree (``tests/plugins/variance.py``: the sample
variance, with a partial part of its own), which a spec loads with ``plugins = [...]``,
runs end to end like a built-in one without a line of the engine naming it: in a native
window pre-aggregated by the Kafka reader, and on the state API (beside an exact distinct
count), in tiny micro-batches and as one, equal to its definition;
``validate --plan`` says what it compiled to, a changed column is refused on resume, and
``inspect`` shows the open windows' variance of their rows so far."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
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
)
from tests.test_plan_description import check_plan_lines, folds, reader_options

PLUGIN = "tests.plugins.variance"
ROOT = Path(__file__).parent.parent
DURATION, LATENESS = 20_000, 4_000
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
AGGREGATIONS: list[dict[str, Any]] = [
    {"agg": "count", "as": "n"},
    {"agg": "variance", "column": "amount", "as": "amount_var"},
    {"agg": "variance", "column": "qty", "as": "qty_var"},
]
#: An exact distinct count moves the window to the state API.
EXACT = {"agg": "count_distinct", "column": "qty", "as": "qtys", "mode": "exact",
         "max_distinct_values_per_group": 1_000}  # fmt: skip
NATIVE_FORM = "(try_sum(x²) - try_sum(x)² / count(x)) / (count(x) - 1)"
STATE_FORM = "statistics.variance per window"


def variance(rows: list[dict[str, Any]], field: str) -> float | None:
    """The definition: the sample variance of the window's non-NULL values."""
    xs = [float(r[field]) for r in rows if r[field] is not None]
    return statistics.variance(xs) if len(xs) > 1 else None


def aggregate(rows: list[dict[str, Any]], exact: bool) -> dict[str, Any]:
    out = {"n": len(rows), "amount_var": variance(rows, "amount"),
           "qty_var": variance(rows, "qty")}  # fmt: skip
    if exact:
        out["qtys"] = len({r["qty"] for r in rows if r["qty"] is not None})
    return out


def reference(
    events: list[dict[str, Any]], watermark: int, exact: bool, closed: bool = True
) -> dict[tuple, dict[str, Any]]:
    """The windows the watermark has closed (end <= watermark), or those still open."""
    windows: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        start = e["ts"] - e["ts"] % DURATION
        if (start + DURATION <= watermark) == closed:
            windows[(_ts(start), _ts(start + DURATION), e["user_id"])].append(e)
    return {key: aggregate(rows, exact) for key, rows in windows.items()}


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


def assert_same_open_values(
    shown: dict[tuple, dict[str, Any]], still_open: dict[tuple, dict[str, Any]]
) -> None:
    """``inspect``'s open windows are the reference's, each variance its rows' so far."""
    assert shown.keys() == still_open.keys()
    for key, want in still_open.items():
        assert shown[key]["n"] == want["n"], key
        for column in ("amount_var", "qty_var"):
            got = shown[key][column]
            if want[column] is None:
                assert got is None, (key, column, got)
            else:
                assert math.isclose(got, want[column], rel_tol=1e-9, abs_tol=1e-9), (
                    key, column, got, want[column],
                )  # fmt: skip


def spec_file(
    workdir: Path,
    bootstrap: str,
    topic: str,
    name: str,
    per_trigger: int | None,
    aggregations: list[dict[str, Any]],
) -> Path:
    """A pipeline using the plug-in (``agg = "variance"``) as a user writes it."""
    transform = {"window": {"kind": "tumbling", "duration_ms": DURATION,
                            "event_time_column": "ts", "lateness_ms": LATENESS,
                            "group_by": ["user_id"], "aggregations": aggregations}}  # fmt: skip
    return plugin_spec_file(
        workdir, name, PLUGIN, (bootstrap, topic, SCHEMA), per_trigger, transform
    )


def test_a_spec_brings_the_plug_in_aggregator_with_its_plugins_key(tmp_path: Path) -> None:
    """In a fresh interpreter only the spec's ``plugins`` can register ``variance``:
    without it the aggregator is unknown, then the spec with it validates."""
    path = spec_file(tmp_path, "127.0.0.1:9092", "clicks", "variance-valid", None, AGGREGATIONS)
    doc = tomllib.loads(path.read_text())
    del doc["plugins"]
    bare = tmp_path / "without.toml"
    bare.write_text(tomli_w.dumps(doc))
    script = (
        "import sys\n"
        "from flow_jobs.spec import load_spec\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        load_spec(path)\n"
        "        print('valid', path)\n"
        "    except Exception as error:\n"
        "        print('refused', path, error)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(bare), str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    refused, valid = out.stdout.rstrip("\n").rsplit("\n", 1)
    assert refused.startswith(f"refused {bare}"), out.stdout
    assert valid == f"valid {path}", out.stdout
    assert "transform.window.aggregations[1].agg: Input should be 'count'" in refused
    assert "(got 'variance')" in refused


@pytest.mark.parametrize("engine", ["native", "state"])
def test_the_variance_plug_in_runs_end_to_end_as_its_definition_says(
    engine: str,
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    exact = engine == "state"
    aggregations = [*AGGREGATIONS, EXACT] if exact else AGGREGATIONS
    rng = random.Random(f"variance-{engine}")
    events = random_clicks(rng, 300, step_ms=250, disorder_ms=int(LATENESS * 0.6))
    topic = f"variance-{engine}-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=3)
    bootstrap = broker.bootstrap_servers
    records = to_records(events, partitions=3)
    send(bootstrap, topic, records)

    # Tiny micro-batches: the open windows' state carried from one to the next.
    tiny_path = spec_file(workdir, bootstrap, topic, f"variance-{engine}-tiny", 120, aggregations)
    tiny = load_spec(tiny_path)
    assert tiny.window.engine == engine
    summary = PipelineRunner(tiny, spark).run(available_now=True)
    assert summary.late_rows == 0 and summary.batches >= 3

    # The whole topic as one micro-batch.
    whole_path = spec_file(workdir, bootstrap, topic, f"variance-{engine}-whole", None,
                           aggregations)  # fmt: skip
    whole = load_spec(whole_path)
    whole_runner = PipelineRunner(whole, spark)
    assert whole_runner.run(available_now=True).batches >= 1
    if not exact:  # the reader folded rows into partials: fewer rows reached Spark
        progress = whole_runner.progress.progress.values()
        assert 0 < sum(int(p.get("numInputRows", 0)) for p in progress) < len(records)

    watermark = max(e["ts"] for e in events) - LATENESS
    expected = reference(events, watermark, exact)
    assert len({key[0] for key in expected}) >= 3, "want several windows"
    assert sum(w["amount_var"] is not None for w in expected.values()) >= 10
    assert_same_windows(read_windows(tiny.target.path, tiny.natural_key()), expected)
    assert_same_windows(read_windows(whole.target.path, whole.natural_key()), expected)

    # inspect: the windows still open, with the variance of their rows so far.
    still_open = reference(events, watermark, exact, closed=False)
    assert sum(w["amount_var"] is not None for w in still_open.values()) >= 2
    report = inspect_state(spark, tiny, store=LedgerStore.for_spec(tiny), limit=1_000)
    assert report.open_windows == len(still_open) and report.note is None, report.note
    shown = {(w.start, w.end, w.group["user_id"]): w.aggregates for w in report.windows}
    assert_same_open_values(shown, still_open)
    assert main(["inspect", str(whole_path), "--json", "--limit", "1000"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["open_windows"] == len(still_open)
    shown = {(_iso(w["start"]), _iso(w["end"]), w["group"]["user_id"]): w["aggregates"]
             for w in printed["windows"]}  # fmt: skip
    assert_same_open_values(shown, still_open)

    # validate --plan: each variance's line is the plug-in's form where it runs.
    form = STATE_FORM if exact else NATIVE_FORM
    by_part = check_plan_lines(PipelineRunner(tiny, spark), spark)
    assert by_part["amount_var = variance(amount)"] == form
    assert by_part["qty_var = variance(qty)"] == form
    if not exact:
        assert by_part["pre-aggregation"].startswith("on:")
        plan = folds(reader_options(PipelineRunner(tiny, spark).compiled.frame)["clicks"])
        assert plan is not None and "sumsq" in dict(plan.fields)["amount"]
        assert plan.imports == (PLUGIN,)
    assert main(["validate", str(tiny_path), "--plan"]) == 0
    printed = capsys.readouterr().out
    assert "amount_var = variance(amount)" in printed and form in printed

    # Fingerprinted: the variance of another column cannot resume this checkpoint.
    moved = tiny.to_document()
    moved["transform"]["window"]["aggregations"][1]["column"] = "qty"
    with pytest.raises(IncompatibleSpec) as refused:
        PipelineRunner(PipelineSpec.model_validate(moved), spark).run(available_now=True)
    assert 'transform.window.aggregations.amount_var.column: "amount" -> "qty"' in str(
        refused.value
    )
