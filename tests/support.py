"""Test helpers: specs, generated streams, reading Delta and Iceberg results."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tomli_w

from flow_jobs.io.delta import read_delta
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.producer import Record, produce

CLICK_SCHEMA = "user_id STRING, page STRING, amount DOUBLE, qty BIGINT, ts BIGINT, at TIMESTAMP"
BASE_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z, in the past: no skew rejections


def make_spec(
    workdir: Path,
    bootstrap: str,
    topic: str,
    window: dict[str, Any],
    *,
    name: str = "test-pipeline",
    sql: str | None = None,
    schema: str = CLICK_SCHEMA,
    source: dict[str, Any] | None = None,
) -> PipelineSpec:
    doc: dict[str, Any] = {
        "name": name,
        "sources": [
            {
                "name": "clicks",
                "kind": "kafka",
                "topic": topic,
                "bootstrap_servers": bootstrap,
                "format": "json",
                "schema": schema,
                **(source or {}),
            }
        ],
        "transform": {"window": window, **({"sql": sql} if sql else {})},
        "target": {"kind": "delta", "path": str(workdir / "target")},
        "checkpoint": {"location": str(workdir / "checkpoint")},
        "dead_letter": {"path": str(workdir / "dead_letters")},
    }
    return PipelineSpec.model_validate(doc)


def aggregation_specs(aggregations: Sequence[tuple]) -> list[dict[str, Any]]:
    """The spec's ``aggregations`` for the reference's (agg, column, alias[, options])."""
    return [
        {"agg": a, **({"column": c} if c else {}), "as": n, **(rest[0] if rest else {})}
        for a, c, n, *rest in aggregations
    ]


def fresh_checkpoint(spec: PipelineSpec, tag: str = "fresh") -> PipelineSpec:
    """The same spec on a new, empty checkpoint folder (a lost checkpoint, a new lineage).

    Never delete a checkpoint and restart on the same path in the same JVM: the stopped
    query's state-store maintenance may still write into it (it raced once:
    ``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``).
    """
    doc = spec.to_document()
    location = f"{spec.checkpoint_location()}-{tag}"
    doc["checkpoint"] = {**doc.get("checkpoint", {}), "location": location}
    return PipelineSpec.model_validate(doc)


def random_clicks(
    rng: random.Random,
    n: int,
    *,
    keys: Sequence[str | None] = ("a", "b", "c", "d", None),
    step_ms: int = 250,
    disorder_ms: int = 0,
    null_rate: float = 0.15,
    start_ms: int = BASE_MS,
) -> list[dict[str, Any]]:
    """Events in production order; each is at most ``disorder_ms`` behind an earlier one."""
    events = []
    for i in range(n):
        ts = start_ms + i * step_ms - rng.randint(0, disorder_ms)
        events.append(
            {
                "user_id": rng.choice(keys),
                "page": rng.choice(["/home", "/cart", "/pay", None]),
                "amount": None if rng.random() < null_rate else round(rng.uniform(-5, 100), 2),
                "qty": None if rng.random() < null_rate else rng.randint(0, 9),
                "ts": ts,
                "at": datetime.fromtimestamp(ts / 1000, tz=UTC).isoformat(timespec="milliseconds"),
            }
        )
    return events


def to_records(events: Sequence[dict[str, Any]], partitions: int = 2) -> list[Record]:
    """Round-robin over partitions (both advance together in event time); Kafka
    timestamp = the event's ts."""
    return [
        Record(
            value=json.dumps(e).encode(),
            partition=i % partitions,
            key=(e["user_id"] or "").encode(),
            timestamp_ms=e["ts"],
        )
        for i, e in enumerate(events)
    ]


def drop_last_commit(checkpoint: PipelineSpec | str) -> int:
    """Simulate a crash after the target write and before Spark's commit log: the
    checkpoint's (a spec's, or a folder) last commit log entry is gone, so the next run
    replays that batch."""
    where = checkpoint.checkpoint_location() if isinstance(checkpoint, PipelineSpec) else checkpoint
    commits = Path(where, "commits")
    last = max(int(p.name) for p in commits.glob("[0-9]*"))
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


def send(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
    assert produce(bootstrap, topic, records) == len(records)


def read_windows(
    path: Path | str, key_columns: Sequence[str], storage_options: dict[str, str] | None = None
) -> dict[tuple, dict[str, Any]]:
    """The target as {natural key: row}; fails on a duplicate natural key."""
    return by_natural_key(read_delta(str(path), storage_options).to_pylist(), key_columns)


def by_natural_key(
    rows: Sequence[dict[str, Any]], key_columns: Sequence[str]
) -> dict[tuple, dict[str, Any]]:
    """A target's rows as {natural key: the other columns}; fails on a duplicate key."""
    out: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[c] for c in key_columns)
        assert key not in out, f"duplicate natural key {key}"
        out[key] = {c: v for c, v in row.items() if c not in key_columns}
    return out


def iceberg_target(workdir: Path, table: str, **keys: Any) -> dict[str, Any]:
    """An Iceberg ``[target]`` in the default catalog (a SQL catalog in the state
    store's database), its files under ``workdir``, its namespace the test's own
    state-store schema (the catalog is shared by every test of the database)."""
    namespace = os.environ["FLOW_STATE_STORE_SCHEMA"]
    return {
        "kind": "iceberg",
        "table": f"{namespace}.{table}",
        "catalog": {"warehouse": str(workdir / "iceberg")},
        **keys,
    }


def iceberg_table(target: dict[str, Any], url: str | None = None) -> Any:
    """The pyiceberg table of an Iceberg ``[target]`` of the default catalog, read with
    pyiceberg's own SQL catalog (not flow-jobs' code)."""
    from pyiceberg.catalog.sql import SqlCatalog

    libpq = url or os.environ["FLOW_STATE_STORE_URL"]
    catalog = SqlCatalog(
        "flow_jobs",
        uri="postgresql+psycopg://" + libpq.split("://", 1)[1],
        warehouse=Path(target["catalog"]["warehouse"]).resolve().as_uri(),
    )
    return catalog.load_table(target["table"])


def read_iceberg(
    target: dict[str, Any], key_columns: Sequence[str], url: str | None = None
) -> dict[tuple, dict[str, Any]]:
    """An Iceberg target as {natural key: row}; fails on a duplicate natural key."""
    return by_natural_key(iceberg_table(target, url).scan().to_arrow().to_pylist(), key_columns)


def assert_same_windows(actual: dict[tuple, dict], expected: dict[tuple, dict]) -> None:
    assert expected, "the reference closed no window: the test would prove nothing"
    missing = expected.keys() - actual.keys()
    extra = actual.keys() - expected.keys()
    assert not missing and not extra, (
        f"missing {sorted(missing, key=repr)[:5]}, extra {sorted(extra, key=repr)[:5]}"
    )
    for key, want in expected.items():
        got = actual[key]
        for column, value in want.items():
            if value is Ellipsis:  # a sketch: checked by its own test
                assert isinstance(got[column], bytes) and got[column], (key, column)
            elif isinstance(value, float) and math.isnan(value):  # NaN equals only NaN
                assert isinstance(got[column], float) and math.isnan(got[column]), (key, column)
            elif isinstance(value, float) and got[column] is not None:
                assert math.isclose(got[column], value, rel_tol=1e-9, abs_tol=1e-9), (
                    key,
                    column,
                    got[column],
                    value,
                )
            else:
                assert got[column] == value, (key, column, got[column], value)


def stamped_before_first(events: Sequence[dict[str, Any]], at_ms: int) -> list[dict[str, Any]]:
    """The events with every one stamped (``ts``) before ``at_ms`` ahead of the others, so
    that in each partition the records before a replay's time precede the rest: the
    premise of finding where a partition starts by time (``flow_jobs.kafka.time_offsets``)
    on a broker without a time index."""
    return [e for e in events if e["ts"] < at_ms] + [e for e in events if e["ts"] >= at_ms]


def tamper_windows(path: str, key: Sequence[str], starts_ms: Sequence[int]) -> dict[tuple, dict]:
    """Set ``n = -1`` in the target's rows of the windows starting at ``starts_ms``, so a
    later run that rewrites one of them shows; the windows as they then stand."""
    from deltalake import DeltaTable

    for start_ms in starts_ms:
        start = datetime.fromtimestamp(start_ms / 1000, tz=UTC).isoformat()
        DeltaTable(path).update(updates={"n": "-1"}, predicate=f"window_start = '{start}'")
    return read_windows(path, key)


def until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """Wait for ``condition`` (polled every 50 ms); fail naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def clicks_in_phases(seed: str, sizes: Sequence[int]) -> list[list[dict[str, Any]]]:
    """Click events in phases, each after the one before (100 ms apart, up to 300 ms of
    disorder: none late under a lateness of 2 s)."""
    rng = random.Random(seed)
    phases: list[list[dict[str, Any]]] = []
    start = BASE_MS
    for n in sizes:
        phases.append(random_clicks(rng, n, step_ms=100, disorder_ms=300, start_ms=start))
        start = max(e["ts"] for e in phases[-1]) + 100
    return phases


class ContinuousRun:
    """``PipelineRunner.run()`` (continuous) in a thread of its own, for tests of what
    happens around a run that goes on; ``failure`` holds what it raised, if anything."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.failure: list[BaseException] = []
        self.summary: list[Any] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.summary.append(self.runner.run())
        except BaseException as e:
            self.failure.append(e)

    def stop(self, timeout_s: float = 60) -> None:
        self.runner.stop_event.set()
        self.thread.join(timeout_s)

    def input_rows(self) -> int:
        progress = getattr(self.runner, "progress", None)
        return progress.input_rows() if progress is not None else -1


def windows_or_none(
    path: str, key_columns: Sequence[str], storage_options: dict[str, str] | None = None
) -> dict[tuple, dict[str, Any]]:
    """``read_windows``, or nothing while the table does not exist yet."""
    try:
        return read_windows(path, key_columns, storage_options)
    except Exception:
        return {}


#: The continuous-run fault tests' window: 5 s tumbling per user, counted and summed.
PHASE_LATENESS_MS = 2_000
PHASE_AGGREGATIONS = (("count", None, "n"), ("sum", "amount", "s"))


def phase_window() -> dict[str, Any]:
    """``[transform.window]`` of the tests over ``clicks_in_phases``."""
    return {
        "kind": "tumbling",
        "duration_ms": 5_000,
        "event_time_column": "ts",
        "lateness_ms": PHASE_LATENESS_MS,
        "group_by": ["user_id"],
        "aggregations": aggregation_specs(PHASE_AGGREGATIONS),
    }


def tumbling_reference(sent: Sequence[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """``phase_window``'s reference windows over every event ``sent`` (in order: ties
    by that order), closed by the watermark its highest event time gives."""
    from tests.reference import reference_windows

    return reference_windows(
        [{**e, "_arrival": i} for i, e in enumerate(sent)],
        kind="tumbling",
        time_key="ts",
        duration_ms=5_000,
        group_by=["user_id"],
        aggregations=list(PHASE_AGGREGATIONS),
        watermark_ms=max(e["ts"] for e in sent) - PHASE_LATENESS_MS,
    )


ROOT = Path(__file__).parent.parent


def plugin_spec_file(
    workdir: Path,
    name: str,
    plugin: str,
    source: tuple[str, str, str],
    per_trigger: int | None,
    transform: dict[str, Any],
) -> Path:
    """A pipeline using ``plugin`` as a user writes it: the TOML file, with the
    ``plugins`` key that brings it; one JSON source ``clicks`` (``source``: bootstrap
    servers, topic, schema; ``per_trigger``: its max_offsets_per_trigger, None for one
    micro-batch), a Delta target, checkpoint and dead letters under ``workdir / name``."""
    bootstrap, topic, schema = source
    tiny = {} if per_trigger is None else {"max_offsets_per_trigger": per_trigger}
    doc = {
        "plugins": [plugin],
        "name": name,
        "sources": [
            {"name": "clicks", "topic": topic, "bootstrap_servers": bootstrap,
             "format": "json", "schema": schema, **tiny}
        ],
        "transform": transform,
        "target": {"kind": "delta", "path": str(workdir / name / "target")},
        "checkpoint": {"location": str(workdir / name / "checkpoint")},
        "dead_letter": {"path": str(workdir / name / "dead_letters")},
    }  # fmt: skip
    path = workdir / f"{name}.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def validate_in_a_fresh_interpreter(file: Path) -> subprocess.CompletedProcess[str]:
    """``flow-jobs validate FILE`` in a new Python process: only what the spec itself
    imports (its ``plugins``) is registered there."""
    return subprocess.run(
        [sys.executable, "-m", "flow_jobs.cli", "validate", str(file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
