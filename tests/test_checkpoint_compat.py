"""Checkpoints written by an earlier release keep resuming.

Each fixture under ``tests/fixtures/checkpoints/<name>/`` was made by the release named
in its ``made_by``: a pipeline ran over phase 1 of its events (leaving open state: held
rows, open windows, kept versions), its checkpoint was kept, then it ran on over phase
2 and its target's rows were kept as ``expected.json``. The test gives a fresh broker the
same events at the same offsets, copies the checkpoint (where Spark's metadata names its
own place, the copy's), runs phase 2 with today's code and finds the same rows: the
operators read the state the earlier release wrote, and go on as it would have.

``FLOW_WRITE_CHECKPOINT_FIXTURES=1 pytest tests/test_checkpoint_compat.py`` writes the
fixtures anew (only ever with the release whose state they pin).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.io.delta import read_delta
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import BASE_MS, random_clicks, send, to_records

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
WRITE = os.environ.get("FLOW_WRITE_CHECKPOINT_FIXTURES") == "1"

CLICKS = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT, at TIMESTAMP"
AGGREGATIONS = [
    {"agg": "count", "as": "n"},
    {"agg": "sum", "column": "amount", "as": "total"},
    {"agg": "last", "column": "page", "as": "last_page"},
]

#: Each fixture's window or operator: the state-API shapes whose state a release writes
#: in its own format (native windows keep Spark's).
WINDOWS: dict[str, dict[str, Any]] = {
    "sliding": {"kind": "sliding", "duration_ms": 8_000, "lateness_ms": 2_000},
    "count": {"kind": "count_hopping", "count": 6, "step": 2, "lateness_ms": 2_000},
    "session": {"kind": "session", "gap_ms": 3_000, "lateness_ms": 2_000, "emit": "current"},
    "reopen": {
        "kind": "tumbling",
        "duration_ms": 5_000,
        "lateness_ms": 1_000,
        "late_data": "reopen",
        "allowed_lateness_ms": 20_000,
    },
    "dedup": {"kind": "tumbling", "duration_ms": 5_000, "lateness_ms": 2_000},
}
NAMES = [*WINDOWS, "temporal"]


def _clicks_spec(name: str, workdir: Path, bootstrap: str) -> dict[str, Any]:
    window = {
        **WINDOWS[name],
        "event_time_column": "ts",
        "group_by": ["user_id"],
        "aggregations": AGGREGATIONS,
    }
    transform: dict[str, Any] = {"window": window}
    if name == "dedup":
        transform["dedup"] = [{"keys": ["user_id", "page"], "within_ms": 4_000}]
    return {
        "name": f"fixture-{name}",
        "sources": [
            {
                "name": "clicks",
                "topic": f"fixture-{name}-clicks",
                "bootstrap_servers": bootstrap,
                "schema": CLICKS,
            }
        ],
        "transform": transform,
        **_places(workdir),
    }


def _temporal_spec(workdir: Path, bootstrap: str) -> dict[str, Any]:
    def source(name: str, schema: str) -> dict[str, Any]:
        topic = f"fixture-temporal-{name}"
        return {"name": name, "topic": topic, "bootstrap_servers": bootstrap, "schema": schema}

    return {
        "name": "fixture-temporal",
        "sources": [
            source("orders", "order_id BIGINT, currency STRING, amount DOUBLE, ts BIGINT"),
            source("rates", "currency STRING, rate DOUBLE, ts BIGINT"),
        ],
        "transform": {
            "temporal_join": {
                "stream_source": "orders",
                "versions_source": "rates",
                "stream_keys": ["currency"],
                "version_keys": ["currency"],
                "how": "left",
                "event_time_column": "ts",
                "lateness_ms": 2_000,
                "output_stream_columns": ["order_id", "currency", "amount", "ts"],
                "output_version_columns": {"rate": "rate", "ts": "rate_ts"},
            }
        },
        **_places(workdir),
    }


def _places(workdir: Path) -> dict[str, Any]:
    return {
        "target": {"kind": "delta", "path": str(workdir / "target")},
        "checkpoint": {"location": str(workdir / "checkpoint")},
        "dead_letter": {"path": str(workdir / "dead_letters")},
        "spark": {"shuffle_partitions": 2},
    }


def spec_of(name: str, workdir: Path, bootstrap: str) -> PipelineSpec:
    doc = _temporal_spec(workdir, bootstrap) if name == "temporal" else None
    return PipelineSpec.model_validate(doc or _clicks_spec(name, workdir, bootstrap))


def phases(name: str) -> list[dict[str, list[Record]]]:
    """Each phase's records by topic: phase 2 goes on in time after phase 1, with rows
    late for it (reopen: within the allowed lateness) and repeats (dedup)."""
    rng = random.Random(f"fixture-{name}")
    if name == "temporal":
        return _temporal_phases(rng)
    keys = ("a", "b", "c", None)
    first = random_clicks(rng, 120, keys=keys, step_ms=100, disorder_ms=300)
    second = random_clicks(
        rng, 120, keys=keys, step_ms=100, disorder_ms=300, start_ms=BASE_MS + 12_000
    )
    second[5:5] = [dict(e) for e in first[-20:-10]]  # repeats, and late for reopen
    topic = f"fixture-{name}-clicks"
    return [{topic: to_records(first, 2)}, {topic: to_records(second, 2)}]


def _temporal_phases(rng: random.Random) -> list[dict[str, list[Record]]]:
    def rate(ts: int) -> dict[str, Any]:
        return {
            "currency": rng.choice(["EUR", "GBP", "CHF"]),
            "rate": round(rng.uniform(0.5, 2), 4),
            "ts": ts,
        }

    def order(i: int, ts: int) -> dict[str, Any]:
        currency = rng.choice(["EUR", "GBP", "CHF", None])
        return {
            "order_id": i,
            "currency": currency,
            "amount": round(rng.uniform(1, 99), 2),
            "ts": ts,
        }

    def records(rows: list[dict[str, Any]]) -> list[Record]:
        return [
            Record(json.dumps(r).encode(), i % 2, timestamp_ms=r["ts"]) for i, r in enumerate(rows)
        ]

    out = []
    for start in (BASE_MS, BASE_MS + 12_000):
        rates = [rate(start + 400 * i) for i in range(25)]
        orders = [order(start + i, start + 100 * i + rng.randint(-300, 0)) for i in range(100)]
        out.append(
            {"fixture-temporal-rates": records(rates), "fixture-temporal-orders": records(orders)}
        )
    return out


#: Where a fixture's checkpoint was, in the files that name it: Spark's operator metadata
#: (``state/<op>/_metadata/v2/<batch>``) keeps the state schema files' absolute paths.
PLACE = "file:@CHECKPOINT@"
_NAMED_PLACE = re.compile(r"file:[^\"]*?/checkpoint(?=/state/)")


def _metadata_files(checkpoint: Path) -> list[Path]:
    return [p for p in checkpoint.glob("state/*/_metadata/v2/*") if not p.name.startswith(".")]


def _unplace(checkpoint: Path) -> None:
    """A checkpoint that can move: its own absolute path as ``PLACE``. The checksum file
    of a file changed goes (Hadoop checks a file against its checksum where there is one)."""
    for path in _metadata_files(checkpoint):
        path.write_text(_NAMED_PLACE.sub(PLACE, path.read_text()))
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def _place(checkpoint: Path) -> None:
    """A moved checkpoint where it now is (``_unplace``'s other half)."""
    for path in _metadata_files(checkpoint):
        path.write_text(
            path.read_text().replace(
                PLACE, checkpoint.resolve().as_uri().replace("file:///", "file:/")
            )
        )


def _rows(path: Path) -> list[dict[str, Any]]:
    def plain(value: Any) -> Any:
        return value.isoformat() if isinstance(value, datetime) else value

    rows = [{k: plain(v) for k, v in row.items()} for row in read_delta(str(path)).to_pylist()]
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def _serve(broker: EmbeddedBroker, batches: list[dict[str, list[Record]]]) -> None:
    for topic in batches[0]:
        broker.create_topic(topic, partitions=2)
    for batch in batches:
        for topic, records in batch.items():
            send(broker.bootstrap_servers, topic, records)


@pytest.mark.parametrize("name", NAMES)
def test_a_checkpoint_of_the_last_release_resumes_and_writes_what_it_wrote(
    name: str, spark: SparkSession, workdir: Path
) -> None:
    """A broker of its own: the fixture's topic names are fixed (its offsets name them)."""
    fixture = FIXTURES / name
    first, second = phases(name)
    with EmbeddedBroker() as broker:
        spec = spec_of(name, workdir, broker.bootstrap_servers)
        if WRITE:
            _serve(broker, [first])
            PipelineRunner(spec, spark).run(available_now=True)
            shutil.rmtree(fixture, ignore_errors=True)
            shutil.copytree(workdir / "checkpoint", fixture / "checkpoint")
            _unplace(fixture / "checkpoint")
            shutil.rmtree(workdir / "target")
            for topic, records in second.items():
                send(broker.bootstrap_servers, topic, records)
        else:
            shutil.copytree(fixture / "checkpoint", workdir / "checkpoint")
            _place(workdir / "checkpoint")
            _serve(broker, [first, second])
        PipelineRunner(spec, spark).run(available_now=True)
    written = _rows(workdir / "target")
    assert written, "phase 2 wrote nothing: the fixture would prove nothing"
    if WRITE:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        )
        (fixture / "made_by").write_text(f"{commit.stdout.strip()}\n")
        (fixture / "expected.json").write_text(json.dumps(written, indent=1) + "\n")
    assert written == json.loads((fixture / "expected.json").read_text())
