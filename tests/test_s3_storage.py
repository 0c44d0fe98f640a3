"""Delta targets and dead-letter tables on S3-compatible object storage.

Against moto's S3 server over HTTP (the ``s3`` fixture): a real endpoint that checks
every request's signature, so the storage options' secret must reach delta-rs, and a
wrong one is refused as S3 refuses it.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from dagster import EnvVar, asset, materialize
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from assets.check_rules import check_natural_key_unique
from assets.metadata import preview_rows
from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    apply_resources,
)
from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.io.delta import DeltaMergeTable, read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec import SpecError, parse_spec
from flow_jobs.spec.models import PipelineSpec, revealed
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.conftest import S3Bucket
from tests.reference import reference_windows
from tests.support import (
    assert_same_windows,
    make_spec,
    random_clicks,
    read_windows,
    send,
    to_records,
)

WINDOW_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("user_id", pa.string()),
        ("n", pa.int64()),
    ]
)
NATURAL_KEY = ("window_start", "window_end", "user_id")
AGGREGATIONS = [("count", None, "n"), ("sum", "amount", "amount_sum"), ("max", "qty", "qty_max")]
WINDOW: dict[str, Any] = {
    "kind": "tumbling",
    "duration_ms": 60_000,
    "event_time_column": "ts",
    "lateness_ms": 5_000,
    "group_by": ["user_id"],
    "aggregations": [
        {"agg": a, **({"column": c} if c else {}), "as": n} for a, c, n in AGGREGATIONS
    ],
}
MALFORMED = {
    b"{not json": "malformed JSON: not parseable: {not json",
    b"[1, 2]": "malformed JSON: not an object, got [1, 2]",
}


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _windows(n: int, users: int) -> pa.Table:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = [
        {
            "window_start": start + timedelta(minutes=i),
            "window_end": start + timedelta(minutes=i + 1),
            "user_id": None if u == 0 else f"u{u}",
            "n": i * 10 + u,
        }
        for i in range(n)
        for u in range(users)
    ]
    return pa.Table.from_pylist(rows, WINDOW_SCHEMA)


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: (r["window_start"], r["user_id"] or ""))


def test_a_delta_merge_table_on_s3_merges_each_batch_once(
    s3: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing of an s3:// table may land on the local disk
    path = s3.uri(f"{_prefix()}/windows")
    table = DeltaMergeTable(
        path,
        WINDOW_SCHEMA,
        NATURAL_KEY,
        nullable_key=("user_id",),
        storage_options=s3.storage_options,
    )
    table.ensure()
    rows = _windows(5, 3)

    first = table.merge(rows, txn=("app", 0))
    replay = table.merge(rows, txn=("app", 0))  # the same micro-batch again: skipped
    rerun = table.merge(rows, txn=("app", 1))  # the same rows, a later batch: MERGEd
    table.ensure()  # an existing table: its columns checked, left as it is

    assert (first.skipped, first.inserted, first.updated) == (False, 15, 0)
    assert replay.skipped and replay.table_version == first.table_version
    assert (rerun.skipped, rerun.inserted, rerun.updated) == (False, 0, 15)
    assert _sorted(read_delta(path, s3.storage_options)) == _sorted(rows)
    key = path.removeprefix(f"s3://{s3.name}/")
    assert f"{key}/_delta_log/00000000000000000000.json" in s3.keys(key)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_commits_on_s3_never_overwrite_one_another(s3: S3Bucket) -> None:
    """delta-rs commits version N by a conditional PUT of ``_delta_log/N.json``
    (If-None-Match: *): a writer that loses the race gets 412 and retries on N+1. An
    endpoint that ignored the condition would lose commits here."""
    path = s3.uri(f"{_prefix()}/race")
    schema = pa.schema([("writer", pa.int64()), ("i", pa.int64())])
    DeltaTable.create(path, schema, storage_options=s3.storage_options)
    errors: list[BaseException] = []

    def append(writer: int) -> None:
        for i in range(5):
            try:
                rows = pa.table({"writer": [writer], "i": [i]}, schema)
                write_deltalake(path, rows, mode="append", storage_options=s3.storage_options)
            except BaseException as e:  # surfaced by the assertion below
                errors.append(e)

    threads = [threading.Thread(target=append, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors
    assert DeltaTable(path, storage_options=s3.storage_options).version() == 20
    written = read_delta(path, s3.storage_options).to_pylist()
    assert sorted((r["writer"], r["i"]) for r in written) == [
        (w, i) for w in range(4) for i in range(5)
    ]
    # The precondition the protocol rests on, asked of the endpoint directly.
    key = path.removeprefix(f"s3://{s3.name}/") + "/_delta_log/00000000000000000001.json"
    with pytest.raises(ClientError) as refused:
        s3.client().put_object(Bucket=s3.name, Key=key, Body=b"{}", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"


def _s3_spec(
    workdir: Path, broker: EmbeddedBroker, topic: str, s3: S3Bucket, name: str, prefix: str
) -> PipelineSpec:
    doc = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW, name=name).to_document()
    doc["target"] = {
        "kind": "delta",
        "path": s3.uri(f"{prefix}/windows"),
        "storage_options": s3.storage_options,
    }
    doc["dead_letter"] = {
        "path": s3.uri(f"{prefix}/dead_letters"),
        "storage_options": s3.storage_options,
    }
    return PipelineSpec.model_validate(doc)


def test_a_pipeline_into_s3_writes_the_windows_it_writes_locally(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    s3: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Run from workdir: dead letters of an s3:// table must not land on the local disk
    # (no staging folder such as ./s3:/bucket/..._staging, checked at the end).
    monkeypatch.chdir(workdir)
    caplog.set_level(logging.DEBUG)
    keys = ("a", "b", "c", "d", "e", "f", "g", None)
    events = random_clicks(random.Random(14), 400, keys=keys, step_ms=500, disorder_ms=2_000)
    records = to_records(events)  # round-robin over the topic's two partitions
    # Two malformed records, one per partition, at known offsets.
    records.insert(60, Record(b"{not json", 0, b"bad", events[60]["ts"]))
    records.insert(241, Record(b"[1, 2]", 1, b"bad", events[240]["ts"]))
    expected_dead = {
        (r.partition, sum(1 for q in records[:i] if q.partition == r.partition)): r.value
        for i, r in enumerate(records)
        if r.key == b"bad"
    }
    send(broker.bootstrap_servers, topic, records)
    prefix = _prefix()
    on_s3 = _s3_spec(workdir / "s3", broker, topic, s3, "windows-on-s3", prefix)
    local = make_spec(workdir / "local", broker.bootstrap_servers, topic, WINDOW, name="on-disk")

    runner = PipelineRunner(on_s3, spark)
    summary = runner.run(available_now=True)
    local_summary = PipelineRunner(local, spark).run(available_now=True)

    key = on_s3.natural_key()
    from_s3 = read_windows(on_s3.target.path, key, s3.storage_options)
    from_disk = read_windows(local.target.path, key)
    expected = reference_windows(
        events,
        time_key="ts",
        duration_ms=60_000,
        group_by=["user_id"],
        aggregations=AGGREGATIONS,
        watermark_ms=max(e["ts"] for e in events) - 5_000,
    )
    assert_same_windows(from_disk, expected)
    assert_same_windows(from_s3, from_disk)
    assert len({k[2] for k in from_s3}) == len(keys)  # every key, NULL included

    # The dead letters: on S3, with their bytes and positions, counted in the ledger.
    assert summary.dead_lettered == local_summary.dead_lettered == 2
    dead = read_delta(on_s3.dead_letter_path(), on_s3.dead_letter_storage_options()).to_pylist()
    assert {(r["partition"], r["offset"]): r["value"] for r in dead} == expected_dead
    assert {r["value"]: r["reason"] for r in dead} == MALFORMED
    ledger = LedgerStore.for_spec(on_s3)
    batches = ledger.recent_batches(on_s3.name)
    assert sum(b["dead_lettered_rows"] for b in batches) == 2
    assert batches[-1]["target_version"] == str(summary.target_commit)
    for table in ("windows", "dead_letters"):
        assert s3.keys(f"{prefix}/{table}/_delta_log/")

    # Dagster's reads of the target (the asset's preview, the uniqueness check).
    assert len(preview_rows(on_s3, runner)) == min(10, len(from_s3))
    check = check_natural_key_unique(on_s3, ledger)
    assert check.passed, check.description

    # The run's logs (flow-jobs's own and every library's Python logging) never carry
    # the secret, though the run used it and the capture holds the run's lines.
    assert f"{on_s3.name}: started query" in caplog.text
    assert s3.secret not in caplog.text
    assert not list(workdir.glob("s3:*")), sorted(p.name for p in workdir.iterdir())


def test_a_wrong_secret_is_refused_and_never_echoed(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    s3: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(workdir)
    caplog.set_level(logging.DEBUG)
    send(broker.bootstrap_servers, topic, [Record(b'{"user_id": "a", "ts": 1}', 0)])
    spec = _s3_spec(workdir, broker, topic, s3, "wrong-secret", _prefix())
    wrong = "Wr0ng-" + uuid.uuid4().hex
    doc = spec.to_document()
    doc["target"]["storage_options"]["AWS_SECRET_ACCESS_KEY"] = wrong
    spec = PipelineSpec.model_validate(doc)

    with pytest.raises(OSError) as refused:
        PipelineRunner(spec, spark).run(available_now=True)

    assert "403" in str(refused.value)  # S3's answer, where the request was refused
    for secret in (wrong, s3.secret):
        assert secret not in str(refused.value)
        assert secret not in caplog.text
        assert secret not in repr(spec)


def test_storage_option_values_never_appear_in_spec_errors() -> None:
    secrets = ["S3cr3t-target-" + uuid.uuid4().hex, "S3cr3t-dead-" + uuid.uuid4().hex]
    text = f"""
name = "leaky"
[[sources]]
name = "clicks"
topic = "clicks"
bootstrap_servers = "127.0.0.1:9092"
schema = "user_id STRING, ts BIGINT"
[transform.window]
kind = "tumbling"
duration_ms = 60000
[[transform.window.aggregations]]
agg = "count"
as = "n"
[target]
path = "s3://bucket/windows"
storage_options = {{ AWS_ACCESS_KEY_ID = "id", AWS_SECRET_ACCESS_KEY = ["{secrets[0]}"] }}
[dead_letter]
kind = "state_store"
storage_options = {{ AWS_SECRET_ACCESS_KEY = {{ value = "{secrets[1]}" }} }}
"""
    with pytest.raises(SpecError) as invalid:
        parse_spec(text)

    message = str(invalid.value)
    assert "target.delta.storage_options.AWS_SECRET_ACCESS_KEY" in message
    assert "dead_letter.storage_options.AWS_SECRET_ACCESS_KEY" in message
    for secret in secrets:
        assert secret not in message

    # Valid now: the kind takes storage options, the values are strings; still secret.
    valid = text.replace('kind = "state_store"', 'path = "s3://bucket/dead"')
    valid = valid.replace(f'["{secrets[0]}"]', f'"{secrets[0]}"')
    valid = valid.replace(f'{{ value = "{secrets[1]}" }}', f'"{secrets[1]}"')
    spec = parse_spec(valid)
    assert spec.dead_letter_storage_options() == {"AWS_SECRET_ACCESS_KEY": secrets[1]}
    assert revealed(spec.target.storage_options)["AWS_SECRET_ACCESS_KEY"] == secrets[0]
    for secret in secrets:
        assert secret not in repr(spec) and secret not in str(spec.dead_letter)


def test_state_store_dead_letters_take_no_storage_options() -> None:
    doc = _doc("./windows", dead_letter={"kind": "state_store", "storage_options": {"K": "v"}})
    with pytest.raises(ValueError, match=r'storage_options is only for kind = "delta"'):
        PipelineSpec.model_validate(doc)


def _doc(target_path: str, **tables: Any) -> dict[str, Any]:
    spec = make_spec(Path("/data"), "127.0.0.1:9092", "clicks", WINDOW, name="where")
    doc = spec.to_document()
    doc["target"] = {"path": target_path, "storage_options": {"AWS_REGION": "eu-west-1"}}
    doc.pop("dead_letter")
    doc.update(tables)
    return doc


@pytest.mark.parametrize(
    ("target", "dead_letter", "path", "options"),
    [
        # On object storage, dead letters default to beside the target, with its options.
        ("s3://lake/w/", {}, "s3://lake/w_dead_letters", {"AWS_REGION": "eu-west-1"}),
        ("gs://lake/w", {}, "gs://lake/w_dead_letters", {"AWS_REGION": "eu-west-1"}),
        # Local paths and file:// URIs keep the local default.
        ("./w", {}, "./.flow/where/dead_letters", {}),
        ("file:///data/w", {}, "./.flow/where/dead_letters", {}),
        # A path of its own takes the options given with it (else delta-rs's AWS_* env).
        ("s3://lake/w", {"path": "s3://dlq/x"}, "s3://dlq/x", {}),
        (
            "s3://lake/w",
            {"path": "s3://dlq/x", "storage_options": {"AWS_REGION": "us-east-2"}},
            "s3://dlq/x",
            {"AWS_REGION": "us-east-2"},
        ),
        ("s3://lake/w", {"storage_options": {"X": "y"}}, "s3://lake/w_dead_letters", {"X": "y"}),
    ],
)
def test_where_dead_letters_go(
    target: str, dead_letter: dict[str, Any], path: str, options: dict[str, str]
) -> None:
    spec = PipelineSpec.model_validate(_doc(target, dead_letter=dead_letter))
    assert spec.dead_letter_path() == path
    assert spec.dead_letter_storage_options() == options


def test_dagster_storage_options_come_from_env_vars_for_target_and_dead_letters(
    s3: S3Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``DeltaTargetResource.storage_options`` values as ``EnvVar``s: Dagster resolves
    them when it initializes the resource, and both the target and the dead-letter table
    open with them (the endpoint refuses anything but the right key pair)."""
    monkeypatch.setenv("FLOW_TEST_S3_KEY_ID", s3.storage_options["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("FLOW_TEST_S3_SECRET", s3.secret)
    delta = DeltaTargetResource(
        storage_options={
            "AWS_ENDPOINT_URL": s3.endpoint,
            "AWS_REGION": s3.storage_options["AWS_REGION"],
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": EnvVar("FLOW_TEST_S3_KEY_ID"),
            "AWS_SECRET_ACCESS_KEY": EnvVar("FLOW_TEST_S3_SECRET"),
        }
    )
    prefix = _prefix()
    explicit = PipelineSpec.model_validate(
        _doc(s3.uri(f"{prefix}/a/windows"), dead_letter={"path": s3.uri(f"{prefix}/a/dead")})
    )
    beside = PipelineSpec.model_validate(_doc(s3.uri(f"{prefix}/b/windows")))
    opened: list[str] = []

    @asset
    def s3_tables(delta: DeltaTargetResource) -> None:
        for spec in (explicit, beside):
            resolved = apply_resources(spec, KafkaResource(), PostgresStateStoreResource(), delta)
            assert resolved.target.kind == "delta"
            DeltaMergeTable(
                resolved.target.path,
                WINDOW_SCHEMA,
                NATURAL_KEY,
                storage_options=revealed(resolved.target.storage_options),
            ).ensure()
            DeadLetterTable(
                resolved.dead_letter_path(),
                resolved.name,
                storage_options=resolved.dead_letter_storage_options(),
            ).ensure()
            opened.extend([resolved.target.path, resolved.dead_letter_path()])

    result = materialize([s3_tables], resources={"delta": delta})

    assert result.success
    assert opened == [
        s3.uri(f"{prefix}/a/windows"),
        s3.uri(f"{prefix}/a/dead"),
        s3.uri(f"{prefix}/b/windows"),
        s3.uri(f"{prefix}/b/windows_dead_letters"),
    ]
    for uri in opened:
        assert s3.keys(uri.removeprefix(f"s3://{s3.name}/") + "/_delta_log/")
    events = " ".join(str(e) for e in result.all_events)
    assert s3.secret not in events and s3.secret not in str(result.dagster_run)
