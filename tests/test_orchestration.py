"""Dagster: the pipeline asset, its checks and its sensor against the real broker, Spark,
Delta and Postgres (the test's ledger schema)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dagster import (
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetKey,
    AssetsDefinition,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    EnvVar,
    RunRequest,
    SkipReason,
    build_resources,
    build_schedule_context,
    build_sensor_context,
    instance_for_test,
    materialize,
)
from dagster_pyspark import LazyPySparkResource
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from assets.asset import pipeline_asset
from assets.check_rules import (
    check_late_row_rate,
    check_natural_key_unique,
    check_target_fresh,
    check_watermark_lag,
    check_window_config,
)
from assets.checks import pipeline_checks
from assets.inspect import inspect_job
from assets.naming import PIPELINE_TAG, asset_name, dead_letter_key
from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    SparkResource,
)
from assets.schedules import MONITOR_TAG, monitoring_schedule, pipeline_schedule
from assets.sensors import pipeline_sensor
from flow_jobs.io.delta import read_delta
from flow_jobs.kafka.source import KafkaDataSource
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.producer import Record
from tests.support import make_spec, random_clicks, send, to_records

WINDOW: dict[str, Any] = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "event_time_column": "ts",
    "lateness_ms": 2_000,
    "group_by": ["user_id"],
    "aggregations": [{"agg": "count", "as": "n"}, {"agg": "sum", "column": "amount", "as": "s"}],
}


def _write_spec(workdir: Path, broker: EmbeddedBroker, topic: str, **tables: Any) -> Path:
    spec = make_spec(workdir, broker.bootstrap_servers, topic, WINDOW, name="orchestrated")
    doc = spec.to_document()
    doc.update(tables)
    path = workdir / "pipelines" / "orchestrated.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(PipelineSpec.model_validate(doc).to_toml())
    return path


def _resources() -> dict[str, Any]:
    return {
        "spark": SparkResource(master="local[2]"),
        "kafka": KafkaResource(),
        "state_store": PostgresStateStoreResource(
            url=os.environ["FLOW_STATE_STORE_URL"],
            schema_name=os.environ["FLOW_STATE_STORE_SCHEMA"],
        ),
        "delta": DeltaTargetResource(),
    }


def _asset(spec_path: Path) -> AssetsDefinition:
    return pipeline_asset(load_spec(spec_path), spec_path)


def _checks(spec_path: Path) -> list[AssetChecksDefinition]:
    return pipeline_checks(load_spec(spec_path), spec_path)


def _ledger() -> LedgerStore:
    return LedgerStore(os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"])


def test_the_spark_resource_is_dagster_pysparks_lazy_one_with_flow_jobs_set_up(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SparkResource`` is dagster-pyspark's ``LazyPySparkResource``: its
    ``spark_session`` and ``spark_context`` are flow-jobs' session (the Kafka data source
    registered), with its ``spark_config`` applied, an ``EnvVar`` among them resolved."""
    monkeypatch.setenv("FLOW_TEST_MARKER", "from-the-environment")
    resource = SparkResource(
        master="local[2]", spark_config={"flow.test.marker": EnvVar("FLOW_TEST_MARKER")}
    )
    assert isinstance(resource, LazyPySparkResource)
    with build_resources({"spark": resource}) as built:
        session = built.spark.spark_session
        assert built.spark.spark_context is session.sparkContext
    assert session.conf.get("flow.test.marker") == "from-the-environment"
    manager = session._jsparkSession.sessionState().dataSourceManager()
    assert manager.dataSourceExists(KafkaDataSource.name())


def test_materialize_runs_the_pipeline_and_evaluates_its_checks(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(6), 400, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))
    # Old sample times (2023): the watermark lags by years, so allow that here.
    spec_path = _write_spec(
        workdir, broker, topic, checks={"watermark_lag_max_s": 10**10, "target_fresh_max_s": 600}
    )
    spec = load_spec(spec_path)
    instance = DagsterInstance.ephemeral()
    result = materialize(
        [_asset(spec_path), *_checks(spec_path)], resources=_resources(), instance=instance
    )
    assert result.success
    # The run's logs carry the figures `flow-jobs run` shows: offsets done of the total.
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("orchestrated progress: clicks 400/400 offsets (100%)" in m for m in logs), logs
    # `flow-jobs inspect` as a job: the open windows, recorded on the target asset.
    inspected = inspect_job(spec).execute_in_process(resources=_resources(), instance=instance)
    assert inspected.success
    (observation,) = [
        e.event_specific_data.asset_observation  # type: ignore[union-attr]
        for e in inspected.all_events
        if e.event_type == DagsterEventType.ASSET_OBSERVATION
    ]
    assert observation.asset_key == AssetKey(asset_name(spec))
    seen = {k: v.value for k, v in observation.metadata.items()}
    assert seen["open_windows"] > 0 and seen["state_batch"] == 1
    assert len(seen["report"]["windows"]) == seen["open_windows"]
    assert "waiting for clicks" in seen["open"]

    by_key = {m.asset_key: m for m in result.asset_materializations_for_node(asset_name(spec))}
    assert set(by_key) == {AssetKey(asset_name(spec)), dead_letter_key(spec)}
    dead = {k: v.value for k, v in by_key[dead_letter_key(spec)].metadata.items()}
    assert dead["dead_lettered_rows"] == 0
    meta = {k: v.value for k, v in by_key[AssetKey(asset_name(spec))].metadata.items()}
    windows = read_delta(spec.target.path).num_rows
    assert meta["input_rows"] == len(events)
    assert meta["windows_emitted"] == windows > 0
    assert meta["batch_ids"] == "0-1"  # the data batch and the closing no-data batch
    assert meta["global_watermark"].startswith("2023-11-14T")
    assert set(meta["source_watermarks"]) == {"clicks"}
    assert meta["end_offsets"] == {"clicks": {topic: {"0": 200, "1": 200}}}
    assert meta["preview"].count("\n") == 11  # header, rule, 10 newest rows

    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(evaluations) == {
        "window_config_valid",
        "watermark_lag",
        "late_row_rate",
        "natural_key_unique",
        "target_fresh",
    }
    failed = {name: e.description for name, e in evaluations.items() if not e.passed}
    assert not failed, failed


def test_checks_fail_when_they_should(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(9), 300, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))
    spec_path = _write_spec(workdir, broker, topic, checks={"late_row_rate_max": 0.0})
    assert materialize([_asset(spec_path)], resources=_resources()).success
    # Then a row far behind the watermark that run left: dropped by the next run.
    late = {**events[0], "ts": events[0]["ts"] - 120_000}
    send(broker.bootstrap_servers, topic, [Record(to_records([late])[0].value, 0, b"x", 1)])
    assert materialize([_asset(spec_path)], resources=_resources()).success
    spec, ledger = load_spec(spec_path), _ledger()

    # A stalled watermark (2023 data, default 15 min limit) fails watermark_lag.
    lag = check_watermark_lag(spec, ledger)
    assert not lag.passed and "limit 900 s" in (lag.description or "")
    # One late row dropped: above a zero tolerance, a warning.
    rate = check_late_row_rate(spec, ledger)
    assert not rate.passed and rate.severity == AssetCheckSeverity.WARN
    assert rate.metadata["late_rows"].value == 1
    # A duplicated window row (written behind the pipeline's back).
    assert check_natural_key_unique(spec, ledger).passed
    one = read_delta(spec.target.path).slice(0, 1)
    write_deltalake(spec.target.path, pa.Table.from_batches(one.to_batches()), mode="append")
    duplicate = check_natural_key_unique(spec, ledger)
    assert not duplicate.passed and duplicate.metadata["duplicate_keys"].value == 1
    # Fresh within an hour, not within a millisecond.
    assert check_target_fresh(spec, ledger).passed
    stale = spec.model_copy(
        update={"checks": spec.checks.model_copy(update={"target_fresh_max_s": 0.001})}
    )
    assert not check_target_fresh(stale, ledger).passed
    # A state budget below the window's upper bound.
    assert check_window_config(spec_path).passed
    tight = workdir / "pipelines" / "tight.toml"
    tight.write_text(spec_path.read_text() + "\n[checks]\nstate_budget_bytes = 1000\n")
    assert not check_window_config(tight).passed
    broken = workdir / "pipelines" / "broken.toml"
    broken.write_text(spec_path.read_text().replace("duration_ms = 10000", "duration_ms = -1"))
    invalid = check_window_config(broken)
    assert not invalid.passed and "duration_ms" in (invalid.description or "")


def test_the_sensor_requests_one_run_per_set_of_new_offsets(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(12), 200, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events[:100]))
    spec_path = _write_spec(workdir, broker, topic)
    sensor = pipeline_sensor(load_spec(spec_path))
    resources = _resources()
    instance = DagsterInstance.ephemeral()

    def tick(cursor: str | None) -> tuple[RunRequest | SkipReason, str | None]:
        context = build_sensor_context(cursor=cursor, resources=resources, instance=instance)
        result = sensor(context)
        return result, context.cursor

    first, cursor = tick(None)  # nothing processed yet: a run
    assert isinstance(first, RunRequest)
    assert first.run_config == {"ops": {"target": {"config": {"mode": "available_now"}}}}
    again, same = tick(cursor)  # the same offsets again: no second run
    assert isinstance(again, SkipReason) and same == cursor

    assert materialize([_asset(spec_path)], resources=resources).success
    idle, idle_cursor = tick(cursor)  # the ledger has caught up: skip
    assert isinstance(idle, SkipReason) and "no offsets beyond" in (idle.skip_message or "")
    assert idle_cursor == cursor

    send(
        broker.bootstrap_servers,
        topic,
        [Record(r.value, (i + 100) % 2, r.key, r.timestamp_ms)
         for i, r in enumerate(to_records(events[100:]))],
    )  # fmt: skip
    second, advanced = tick(cursor)
    assert isinstance(second, RunRequest) and advanced != cursor
    assert second.run_key != first.run_key


def test_the_sensor_requests_no_run_while_one_is_in_progress(
    broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(3), 50)))
    spec_path = _write_spec(workdir, broker, topic)
    spec = load_spec(spec_path)
    key = AssetKey(asset_name(spec))
    sensor, resources = pipeline_sensor(load_spec(spec_path)), _resources()
    instance = DagsterInstance.ephemeral()

    def tick() -> RunRequest | SkipReason:
        context = build_sensor_context(cursor=None, resources=resources, instance=instance)
        result = sensor(context)
        assert isinstance(result, RunRequest) or context.cursor is None  # a skip keeps it
        return result

    def add_run(status: DagsterRunStatus, **fields: Any) -> str:
        run = instance.add_run(DagsterRun(job_name="__ASSET_JOB", status=status, **fields))
        return run.run_id

    # Finished runs of this pipeline, and another pipeline's run in progress: no obstacle.
    add_run(DagsterRunStatus.SUCCESS, tags={PIPELINE_TAG: spec.name})
    add_run(DagsterRunStatus.FAILURE, asset_selection=frozenset({key}))
    add_run(DagsterRunStatus.STARTED, tags={PIPELINE_TAG: "another-pipeline"})
    assert isinstance(tick(), RunRequest)

    # A sensor or schedule run of this pipeline (tagged) in progress: skip.
    started = add_run(DagsterRunStatus.STARTED, tags={PIPELINE_TAG: spec.name})
    skipped = tick()
    assert isinstance(skipped, SkipReason)
    assert skipped.skip_message == f"run {started} of {spec.name} is queued or in progress"
    instance.delete_run(started)
    assert isinstance(tick(), RunRequest)

    # A run materializing the asset launched from the UI (no tag), starting: skip too.
    starting = add_run(DagsterRunStatus.STARTING, asset_selection=frozenset({key}))
    skipped = tick()
    assert isinstance(skipped, SkipReason) and starting in (skipped.skip_message or "")


def test_a_run_of_a_busy_pipeline_fails_with_the_reason(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    spec_path = _write_spec(workdir, broker, topic)
    spec = load_spec(spec_path)
    with _ledger().run_lock(spec.name):  # as a run elsewhere holds it
        result = materialize([_asset(spec_path)], resources=_resources(), raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert failure.step_failure_data is not None
    error = failure.step_failure_data.error
    assert error is not None and error.cls_name == "Failure"
    assert f"pipeline {spec.name} is busy: 'flow-jobs run pid {os.getpid()}@" in error.message
    assert not spark.streams.active


def test_a_spec_schedule_becomes_a_dagster_schedule(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "127.0.0.1:9", "t", WINDOW, name="scheduled")
    doc = spec.to_document()
    doc["orchestration"] = {"schedule": "*/5 * * * *", "sensor": False}
    path = tmp_path / "scheduled.toml"
    path.write_text(PipelineSpec.model_validate(doc).to_toml())
    schedule = pipeline_schedule(load_spec(path))
    assert schedule is not None
    assert schedule.cron_schedule == "*/5 * * * *"
    assert schedule.execution_timezone == "UTC"
    assert pipeline_schedule(load_spec(_write_spec_plain(tmp_path))) is None


def test_the_monitoring_schedule_runs_its_checks_while_a_continuous_run_is_open(
    tmp_path: Path,
) -> None:
    """A continuous run never materializes, so watermark_lag and target_fresh would never
    run: the monitoring schedule requests a check-only run while one is open, else skips.
    An available-now run of the pipeline, or a continuous one not started yet, or
    another pipeline's, is no reason to."""
    spec = load_spec(_write_spec_plain(tmp_path))
    schedule = monitoring_schedule(spec)
    assert schedule is not None and schedule.cron_schedule == "*/5 * * * *"
    assert schedule.job.name == f"{asset_name(spec)}_monitor_job"
    with instance_for_test() as instance:
        _monitoring_ticks(spec, schedule, instance)
    off = spec.model_copy(
        update={"orchestration": spec.orchestration.model_copy(update={"monitor": False})}
    )
    assert monitoring_schedule(off) is None


def _monitoring_ticks(spec: PipelineSpec, schedule: Any, instance: DagsterInstance) -> None:
    name, key = asset_name(spec), AssetKey(asset_name(spec))

    def add_run(status: DagsterRunStatus, mode: str | None, **fields: Any) -> str:
        config = {"ops": {name: {"config": {"mode": mode}}}} if mode else {}
        run = DagsterRun(job_name="__ASSET_JOB", status=status, run_config=config, **fields)
        return instance.add_run(run).run_id

    add_run(DagsterRunStatus.STARTED, "available_now", asset_selection=frozenset({key}))
    add_run(DagsterRunStatus.STARTED, None, asset_selection=frozenset({key}))  # the default
    add_run(DagsterRunStatus.NOT_STARTED, "continuous", asset_selection=frozenset({key}))
    add_run(DagsterRunStatus.SUCCESS, "continuous", asset_selection=frozenset({key}))
    other = frozenset({AssetKey("another")})
    add_run(DagsterRunStatus.STARTED, "continuous", asset_selection=other)
    assert isinstance(schedule(build_schedule_context(instance=instance)), SkipReason)

    open_run = add_run(DagsterRunStatus.STARTED, "continuous", asset_selection=frozenset({key}))
    request = schedule(build_schedule_context(instance=instance))
    assert isinstance(request, RunRequest)
    assert request.tags[MONITOR_TAG] == spec.name and request.tags["flow-jobs/run"] == open_run
    assert PIPELINE_TAG not in request.tags  # it must not hold back the new-offsets sensor
    selected = schedule.job.selection.resolve_checks(  # type: ignore[union-attr]
        pipeline_definitions_graph(spec)
    )
    assert {c.name for c in selected} == {"watermark_lag", "target_fresh"}


def pipeline_definitions_graph(spec: PipelineSpec) -> Any:
    from dagster import Definitions

    path, unset = Path("unused.toml"), {"spark": SparkResource(), "kafka": KafkaResource()}
    unset.update(state_store=PostgresStateStoreResource(), delta=DeltaTargetResource())
    assets, checks = [pipeline_asset(spec, path)], pipeline_checks(spec, path)
    return Definitions(assets=assets, asset_checks=checks, resources=unset).resolve_asset_graph()


def _write_spec_plain(tmp_path: Path) -> Path:
    spec = make_spec(tmp_path, "127.0.0.1:9", "t", WINDOW, name="plain")
    path = tmp_path / "plain.toml"
    path.write_text(spec.to_toml())
    return path


def test_checks_run_alone_without_materializing(
    spark: SparkSession, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    send(broker.bootstrap_servers, topic, to_records(random_clicks(random.Random(2), 100)))
    spec_path = _write_spec(workdir, broker, topic)
    asset, checks = _asset(spec_path), _checks(spec_path)
    # Before any run: no ledger rows, so the ledger-based checks fail, and say why.
    result = materialize(
        [asset, *checks], resources=_resources(), selection=AssetSelection.all_asset_checks()
    )
    assert not result.asset_materializations_for_node(asset_name(load_spec(spec_path)))
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert len(evaluations) == 5
    assert not evaluations["watermark_lag"].passed
    assert "no watermark" in (evaluations["watermark_lag"].description or "")
    assert not evaluations["target_fresh"].passed
    assert evaluations["window_config_valid"].passed
