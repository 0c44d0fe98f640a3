"""A per-source operator written in the test tree (``tests/plugins/threshold_filter.py``:
the records whose column is at least a threshold), which a spec loads with
``plugins = [...]`` and runs end to end like the built-in dedup without a line of the
engine naming it: in tiny micro-batches across a restart and as one, the target equal
to its definition and the records below the threshold dead-lettered; ``validate --plan``
says what it compiled to, and a changed threshold is refused on resume."""

from __future__ import annotations

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
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import load_spec
from flow_jobs.spec.fingerprint import fingerprint_fields
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
from tests.test_plan_description import check_plan_lines

PLUGIN = "tests.plugins.threshold_filter"
DURATION, LATENESS, AT_LEAST = 10_000, 4_000, 20.0
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT"
AGGREGATIONS: list[dict[str, Any]] = [
    {"agg": "count", "as": "n"},
    {"agg": "sum", "column": "amount", "as": "amount_sum"},
    {"agg": "max", "column": "qty", "as": "qty_max"},
]
LINE = f"threshold clicks: amount >= {AT_LEAST}"


def passes(event: dict[str, Any]) -> bool:
    """The definition: ``amount`` at least ``at_least`` (no amount: below)."""
    return event["amount"] is not None and event["amount"] >= AT_LEAST


def reference(events: list[dict[str, Any]], watermark: int) -> dict[tuple, dict[str, Any]]:
    """The windows the watermark closed, over the records that pass; the watermark
    follows every record the source read, those taken out too (it is the source's)."""
    windows: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for e in filter(passes, events):
        start = e["ts"] - e["ts"] % DURATION
        if start + DURATION <= watermark:
            windows[(_ts(start), _ts(start + DURATION), e["user_id"])].append(e)
    out = {}
    for key, rows in windows.items():
        qtys = [r["qty"] for r in rows if r["qty"] is not None]
        out[key] = {
            "n": len(rows),
            "amount_sum": math.fsum(r["amount"] for r in rows),
            "qty_max": max(qtys) if qtys else None,
        }
    return out


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def spec_file(
    workdir: Path, bootstrap: str, topic: str, name: str, per_trigger: int | None, **op: Any
) -> Path:
    """A pipeline with the plug-in's operator as a user writes it."""
    transform = {
        "operators": [{"kind": "threshold", "source": "clicks", "column": "amount",
                       "at_least": AT_LEAST, **op}],
        "window": {"kind": "tumbling", "duration_ms": DURATION, "event_time_column": "ts",
                   "lateness_ms": LATENESS, "group_by": ["user_id"],
                   "aggregations": AGGREGATIONS},
    }  # fmt: skip
    return plugin_spec_file(
        workdir, name, PLUGIN, (bootstrap, topic, SCHEMA), per_trigger, transform
    )


def test_a_spec_brings_the_plug_ins_operator_with_its_plugins_key(tmp_path: Path) -> None:
    """In a fresh interpreter only the spec's ``plugins`` registers the kind: with it the
    spec validates; without it the kind is unknown, in one line naming the known ones."""
    path = spec_file(tmp_path, "127.0.0.1:9092", "clicks", "threshold-valid", None)

    ok = validate_in_a_fresh_interpreter(path)
    assert ok.returncode == 0, ok.stderr
    doc = tomllib.loads(path.read_text())
    del doc["plugins"]
    bare = tmp_path / "without.toml"
    bare.write_text(tomli_w.dumps(doc))
    refused = validate_in_a_fresh_interpreter(bare)
    assert refused.returncode != 0
    assert "transform.operators[0].kind: Input should be 'dedup' (got 'threshold')" in (
        refused.stderr
    )


def test_a_threshold_runs_end_to_end_as_its_definition_says(
    spark: SparkSession,
    broker: EmbeddedBroker,
    workdir: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    rng = random.Random("threshold")
    events = random_clicks(rng, 500, step_ms=300, disorder_ms=int(LATENESS * 0.6))
    topic = f"threshold-operator-{rng.randrange(1 << 30):x}"
    broker.create_topic(topic, partitions=2)
    bootstrap = broker.bootstrap_servers
    below = sum(not passes(e) for e in events)
    assert 0 < below < len(events) // 2

    # Tiny micro-batches, with a restart (a new runner on the same checkpoint) halfway;
    # the records below the threshold dead-lettered.
    tiny_path = spec_file(workdir, bootstrap, topic, "threshold-tiny", 60, below="dlq")
    tiny = load_spec(tiny_path)
    records = to_records(events, partitions=2)
    half = len(records) // 2
    send(bootstrap, topic, records[:half])
    first = PipelineRunner(tiny, spark).run(available_now=True)
    send(bootstrap, topic, records[half:])
    second = PipelineRunner(tiny, spark).run(available_now=True)
    assert first.late_rows == second.late_rows == 0
    assert first.batches + second.batches >= 5
    assert first.dead_lettered + second.dead_lettered == below

    # The whole topic as one micro-batch, the records below dropped.
    whole = load_spec(spec_file(workdir, bootstrap, topic, "threshold-whole", None))
    run = PipelineRunner(whole, spark).run(available_now=True)
    assert run.batches >= 1 and run.dead_lettered == 0

    watermark = max(e["ts"] for e in events) - LATENESS
    expected = reference(events, watermark)
    assert len({key[0] for key in expected}) >= 4, "want several windows"
    assert_same_windows(read_windows(tiny.target.path, tiny.natural_key()), expected)
    assert_same_windows(read_windows(whole.target.path, whole.natural_key()), expected)

    # validate --plan: the operator's line, between the source's and the window's.
    by_part = check_plan_lines(PipelineRunner(tiny, spark), spark)
    parts = list(by_part)
    window = next(i for i, part in enumerate(parts) if part.startswith("window: "))
    assert parts.index("source clicks") < parts.index(LINE) < window
    assert "dead-lettered with their bytes" in by_part[LINE]
    assert (
        "records below it or without a value dropped"
        in (check_plan_lines(PipelineRunner(whole, spark), spark)[LINE])
    )
    assert main(["validate", str(tiny_path), "--plan"]) == 0
    assert LINE in capsys.readouterr().out

    # Fingerprinted: another threshold cannot resume this checkpoint; where the records
    # below go (``below``, a SAFE_KEY) is no state and can.
    key = "transform.operators.clicks[0].at_least"
    raised = tiny.to_document()
    raised["transform"]["operators"][0]["at_least"] = AT_LEAST + 10
    assert fingerprint_fields(PipelineSpec.model_validate(raised))[key] == AT_LEAST + 10
    assert fingerprint_fields(tiny)[key] == AT_LEAST
    dropped = tiny.to_document()
    dropped["transform"]["operators"][0]["below"] = "drop"
    assert fingerprint_fields(PipelineSpec.model_validate(dropped)) == fingerprint_fields(tiny)
    with pytest.raises(IncompatibleSpec) as refused:
        PipelineRunner(PipelineSpec.model_validate(raised), spark).run(available_now=True)
    assert f"{key}: {AT_LEAST} -> {AT_LEAST + 10}" in str(refused.value)
