"""One Dagster asset per ``pipelines/*.toml`` spec, with its checks, sensor and schedule.

* The asset launches the pipeline's managed Spark query in one of two run modes, chosen
  by run config: ``available_now`` (process what is in Kafka, emit what the watermark
  closes, finish: for schedules and sensors) or ``continuous`` (until the run is
  terminated from the UI, which stops the query after the batch in flight). Progress
  goes to the run's logs; the materialization carries the run's figures and a preview
  of the newest rows.
* Checks read the spec, the Postgres ledger and the target; they run with the asset or
  alone (the ``flow_jobs_checks`` job, for CI).
* The sensor requests an ``available_now`` run when Kafka holds offsets beyond the
  ledger's last committed ones; its cursor is the end offsets it requested a run for,
  so one set of new offsets never yields two runs.
* One run per pipeline: the runner holds the pipeline's lock in the state store, so a
  second run fails at once (``PipelineBusy``, a ``Failure`` naming the holder); the
  sensor requests no run while one of the pipeline's runs is queued or in progress; each
  asset is in a concurrency pool of its own (``flow-jobs/<name>``), so an instance with
  ``concurrency: pools: default_limit: 1`` queues a second run's step instead.
"""

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    Config,
    DagsterExecutionInterruptedError,
    DagsterRunStatus,
    DefaultSensorStatus,
    Failure,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    asset,
    asset_check,
    define_asset_job,
    multi_asset_check,
    sensor,
)

from assets.resources import (
    DeltaTargetResource,
    KafkaResource,
    PostgresStateStoreResource,
    SparkResource,
    apply_resources,
)
from flow_jobs.io.state_store import PipelineBusy, StateStore
from flow_jobs.secrets import RedactingFilter
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec, revealed

PREVIEW_ROWS = 10

#: The run tag naming a run's pipeline (sensor and schedule runs carry it).
PIPELINE_TAG = "flow-jobs/pipeline"

#: Runs that are, or are about to be, executing (as Dagster's concurrency guide lists).
ACTIVE_RUN_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


def asset_name(spec: PipelineSpec) -> str:
    """The asset key: the target's table (Delta folder, Postgres table, Kafka topic)."""
    target = spec.target
    if target.kind == "postgres":
        raw = target.table
    elif target.kind == "kafka":
        raw = target.topic
    else:
        raw = target.path.rstrip("/").rsplit("/", 1)[-1]
    return "".join(c if c.isalnum() else "_" for c in raw).strip("_") or spec.name


class PipelineRunConfig(Config):
    mode: Literal["available_now", "continuous"] = "available_now"


@contextmanager
def _logs_to(dagster_log: Any) -> Iterator[None]:
    """flow-jobs's progress lines (one per micro-batch) into the run's Dagster logs."""

    class Forward(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            level = "warning" if record.levelno >= logging.WARNING else "info"
            getattr(dagster_log, level)(record.getMessage())

    handler = Forward(logging.INFO)
    handler.addFilter(RedactingFilter())  # Dagster's event log keeps what it is given
    root = logging.getLogger("flow_jobs")
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def run_pipeline(
    context: AssetExecutionContext,
    spec: PipelineSpec,
    mode: str,
    spark: Any,
) -> MaterializeResult:
    from flow_jobs.runtime.runner import PipelineRunner

    stop = threading.Event()
    runner = PipelineRunner(spec, spark, stop_event=stop)
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["summary"] = runner.run(available_now=mode == "available_now")
        except BaseException as e:  # re-raised in the step's thread below
            outcome["error"] = e

    with _logs_to(context.log):
        worker = threading.Thread(target=work, name=f"flow-jobs-{spec.name}", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.5)  # Dagster delivers a termination here, between joins
        except (DagsterExecutionInterruptedError, KeyboardInterrupt):
            context.log.info("run terminated: stopping the query after the batch in flight")
            stop.set()
            worker.join()
            raise
    if isinstance(outcome.get("error"), PipelineBusy):
        # A clear step failure, not a stack trace: nothing ran, nothing to retry now.
        raise Failure(description=str(outcome["error"]), allow_retries=False) from None
    if "error" in outcome:
        raise outcome["error"]
    summary = outcome["summary"]
    return MaterializeResult(metadata=_metadata(runner, spec, summary))


def _metadata(runner: Any, spec: PipelineSpec, summary: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "input_rows": summary.input_rows,
        "windows_emitted": summary.windows_inserted + summary.windows_updated,
        "windows_inserted": summary.windows_inserted,
        "windows_updated": summary.windows_updated,
        "late_rows": summary.late_rows,
        "dead_lettered_rows": summary.dead_lettered,
        "global_watermark": summary.watermark or "",
        "batches": summary.batches,
        "target": f"{spec.target.kind} {spec.target.describe()}",
        "target_version": summary.target_version or "",
        "query_id": summary.query_id,
    }
    ledger = runner.ledger
    if ledger is not None:
        rows = [
            r
            for r in ledger.recent_batches(spec.name, 1000)
            if r["query_id"] == str(summary.query_id)
        ]
        if rows:
            metadata["batch_ids"] = f"{rows[0]['batch_id']}-{rows[-1]['batch_id']}"
            metadata["source_watermarks"] = MetadataValue.json(rows[-1]["source_watermarks"] or {})
            metadata["end_offsets"] = MetadataValue.json(rows[-1]["end_offsets"] or {})
    preview = preview_rows(spec, runner)
    if preview:
        metadata["preview"] = MetadataValue.md(_markdown(preview))
    return metadata


def preview_rows(spec: PipelineSpec, runner: Any) -> list[dict[str, Any]]:
    """The newest rows of the target (by its first natural-key column)."""
    key = list(runner.compiled.natural_key)
    if spec.target.kind == "delta":
        from flow_jobs.io.delta import quoted, read_delta

        order = ", ".join(f"{quoted(c)} DESC NULLS LAST" for c in key[:2])
        sql = f"SELECT * FROM t ORDER BY {order} LIMIT {PREVIEW_ROWS}"
        options = revealed(spec.target.storage_options)
        return read_delta(spec.target.path, options, sql).to_pylist()
    elif spec.target.kind == "postgres" and runner.ledger is not None:
        from psycopg import sql

        with runner.ledger.connect() as conn:
            cur = conn.execute(
                sql.SQL("SELECT * FROM {} ORDER BY {} DESC NULLS LAST LIMIT %s").format(
                    sql.Identifier(spec.target.schema_name, spec.target.table),
                    sql.Identifier(key[0]),
                ),
                (PREVIEW_ROWS,),
            )
            names = [d.name for d in cur.description or []]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    else:
        return []
    rows.sort(key=lambda r: tuple((r[c] is not None, r[c]) for c in key[:2]), reverse=True)
    return rows[:PREVIEW_ROWS]


def _markdown(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, bytes):
            return f"<{len(v)} bytes>"
        return "" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def pipeline_asset(spec_path: Path) -> AssetsDefinition:
    spec = load_spec(spec_path)  # an invalid spec fails loading the code location, loudly
    join = spec.transform.join
    operator = f"{join.how} join" if join else f"{spec.window.kind} window"

    @asset(
        name=asset_name(spec),
        group_name="pipelines",
        description=f"{spec.name}: {operator} over {', '.join(s.topic for s in spec.sources)}"
        f" -> {spec.target.kind} {spec.target.describe()} ({spec_path.name})",
        kinds={"spark", spec.target.kind},
        metadata={"spec": str(spec_path), "pipeline": spec.name},
        pool=pipeline_pool(spec),
    )
    def _pipeline(
        context: AssetExecutionContext,
        config: PipelineRunConfig,
        spark: SparkResource,
        kafka: KafkaResource,
        state_store: PostgresStateStoreResource,
        delta: DeltaTargetResource,
    ) -> MaterializeResult:
        resolved = apply_resources(load_spec(spec_path), kafka, state_store, delta)
        return run_pipeline(context, resolved, config.mode, spark.spark_session)

    return _pipeline


# -- checks ---------------------------------------------------------------------------


def pipeline_checks(spec_path: Path) -> list[AssetChecksDefinition]:
    spec = load_spec(spec_path)
    key = AssetKey(asset_name(spec))

    @asset_check(
        asset=key,
        name="window_config_valid",
        description="the spec validates; seed 000's state-size bound is within "
        "[checks] state_budget_bytes",
    )
    def window_config_valid() -> AssetCheckResult:
        return check_window_config(spec_path)

    return [window_config_valid, _ledger_checks(spec_path, key)]


def _ledger_checks(spec_path: Path, key: AssetKey) -> AssetChecksDefinition:
    """The checks of the spec (as the resources resolve it) against its ledger and
    target, as one step: the spec resolved once, one state store (migrated once) for
    all of them; each can still run alone (``can_subset``)."""

    @multi_asset_check(
        name=f"{key.to_python_identifier()}_ledger_checks",
        specs=[
            AssetCheckSpec(name, asset=key, description=description)
            for name, (description, _check) in LEDGER_CHECKS.items()
        ],
        can_subset=True,
    )
    def _checks(
        context: AssetCheckExecutionContext,
        kafka: KafkaResource,
        state_store: PostgresStateStoreResource,
        delta: DeltaTargetResource,
    ) -> Iterator[AssetCheckResult]:
        spec = apply_resources(load_spec(spec_path), kafka, state_store, delta)
        ledger = state_store.store_for(spec)
        for selected in sorted(context.selected_asset_check_keys, key=lambda k: k.name):
            result = LEDGER_CHECKS[selected.name][1](spec, ledger)
            yield AssetCheckResult(
                asset_key=key,
                check_name=selected.name,
                passed=result.passed,
                severity=result.severity,
                description=result.description,
                metadata=result.metadata,
            )

    return _checks


def check_window_config(spec_path: Path) -> AssetCheckResult:
    from flow_jobs.plan.sizing import estimate_state
    from flow_jobs.spec import SpecError

    try:
        spec = load_spec(spec_path)
    except SpecError as e:
        return AssetCheckResult(passed=False, description=str(e))
    if not spec.has_window:
        return AssetCheckResult(passed=True, description="valid (a join: no window state)")
    estimate = estimate_state(spec.window)
    budget = spec.checks.state_budget_bytes
    return AssetCheckResult(
        passed=estimate.total <= budget,
        description=f"valid; state upper bound {estimate.describe()}, budget {budget:,} bytes",
        metadata={"state_bytes_upper_bound": estimate.total, "budget_bytes": budget},
    )


def check_watermark_lag(spec: PipelineSpec, ledger: StateStore) -> AssetCheckResult:
    rows = ledger.recent_batches(spec.name, 1)
    limit = spec.checks.watermark_lag_max_s
    if not rows or rows[-1]["global_watermark"] is None:
        return AssetCheckResult(passed=False, description="no watermark in the ledger yet")
    last = rows[-1]
    lag = (datetime.now(UTC) - last["global_watermark"]).total_seconds()
    return AssetCheckResult(
        passed=lag <= limit,
        description=f"now - global watermark = {lag:,.0f} s (limit {limit:,.0f} s)",
        metadata={
            "watermark_lag_s": lag,
            "limit_s": limit,
            "global_watermark": last["global_watermark"].isoformat(),
            "batch_id": last["batch_id"],
        },
    )


def check_late_row_rate(spec: PipelineSpec, ledger: StateStore) -> AssetCheckResult:
    totals = ledger.totals(spec.name, spec.checks.late_row_rate_batches)
    input_rows, late = int(totals.get("input_rows") or 0), int(totals.get("late_rows") or 0)
    rate = late / input_rows if input_rows else 0.0
    limit = spec.checks.late_row_rate_max
    return AssetCheckResult(
        passed=rate <= limit,
        severity=AssetCheckSeverity.WARN,
        description=f"{late} late of {input_rows} input rows = {rate:.4f} (limit {limit})",
        metadata={"late_rows": late, "input_rows": input_rows, "rate": rate, "limit": limit},
    )


def check_natural_key_unique(spec: PipelineSpec, ledger: StateStore) -> AssetCheckResult:
    if spec.target.kind == "kafka":
        return AssetCheckResult(passed=True, description="kafka target: append-only, n/a")
    key = ledger.natural_key(spec.name)
    if key is None:
        return AssetCheckResult(passed=True, description="no run recorded yet: nothing written")
    if spec.target.kind == "postgres":
        from psycopg import sql

        with ledger.connect() as conn:
            row = conn.execute(
                sql.SQL(
                    "SELECT count(*), coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM "
                    "{} GROUP BY {} HAVING count(*) > 1) d"
                ).format(
                    sql.Identifier(spec.target.schema_name, spec.target.table),
                    sql.SQL(", ").join(map(sql.Identifier, key)),
                )
            ).fetchone()
        keys, extra = (int(row[0]), int(row[1])) if row else (0, 0)
    else:
        from flow_jobs.io.delta import query_delta, quoted

        # One aggregate in delta-rs's engine: no row of the target comes into Python.
        groups = ", ".join(map(quoted, key))
        sql = (
            "SELECT count(*) AS keys, coalesce(sum(n - 1), 0) AS extra FROM "
            f"(SELECT count(*) AS n FROM t GROUP BY {groups} HAVING count(*) > 1) d"
        )
        try:
            found = query_delta(spec.target.path, sql, revealed(spec.target.storage_options))
        except Exception as e:
            return AssetCheckResult(passed=False, description=f"cannot read the target: {e}")
        keys, extra = int(found["keys"][0].as_py()), int(found["extra"][0].as_py())
    return AssetCheckResult(
        passed=keys == 0,
        description=f"{keys} natural keys ({', '.join(key)}) repeated, {extra} extra rows",
        metadata={"duplicate_keys": keys, "extra_rows": extra},
    )


def check_target_fresh(spec: PipelineSpec, ledger: StateStore) -> AssetCheckResult:
    totals = ledger.totals(spec.name, 1)
    last = totals.get("last_commit")
    limit = spec.checks.target_fresh_max_s
    if last is None:
        return AssetCheckResult(passed=False, description="no batch committed yet")
    age = (totals["now"] - last).total_seconds()
    return AssetCheckResult(
        passed=age <= limit,
        description=f"last batch committed {age:,.0f} s ago (limit {limit:,.0f} s)",
        metadata={"age_s": age, "limit_s": limit, "last_commit": last.isoformat()},
    )


#: The checks that read the ledger (and target): name -> (description, function).
LEDGER_CHECKS: dict[str, tuple[str, Callable[[PipelineSpec, StateStore], AssetCheckResult]]] = {
    "watermark_lag": (
        "now - the global watermark in the ledger <= [checks] watermark_lag_max_s",
        check_watermark_lag,
    ),
    "late_row_rate": (
        "late / input rows over recent batches <= [checks] late_row_rate_max (a warning)",
        check_late_row_rate,
    ),
    "natural_key_unique": (
        "no natural key appears twice in the target",
        check_natural_key_unique,
    ),
    "target_fresh": (
        "the last batch committed within [checks] target_fresh_max_s",
        check_target_fresh,
    ),
}


# -- sensors and schedules ---------------------------------------------------------------


def offsets_ahead(ends: dict[str, Any], committed: dict[str, Any] | None) -> bool:
    """Whether any partition's end offset is beyond the ledger's last end offset."""
    committed = committed or {}
    for source, topics in ends.items():
        for topic, partitions in topics.items():
            done = committed.get(source, {}).get(topic, {})
            if any(int(end) > int(done.get(p, 0)) for p, end in partitions.items()):
                return True
    return False


def pipeline_pool(spec: PipelineSpec) -> str:
    """The asset's Dagster concurrency pool: one per pipeline."""
    return f"flow-jobs/{spec.name}"


def active_run(context: SensorEvaluationContext, pipeline: str, key: AssetKey) -> str | None:
    """The id of a queued or in-progress run of the pipeline: one tagged with it (sensor,
    schedule) or one materializing its asset (launched from the UI), else None."""
    for record in context.instance.get_run_records(RunsFilter(statuses=ACTIVE_RUN_STATUSES)):
        run = record.dagster_run
        if run.tags.get(PIPELINE_TAG) == pipeline or key in (run.asset_selection or ()):
            return run.run_id
    return None


def pipeline_sensor(spec_path: Path) -> SensorDefinition:
    spec = load_spec(spec_path)
    name = asset_name(spec)

    @sensor(
        name=f"{name}_new_offsets",
        asset_selection=[AssetKey(name)],
        minimum_interval_seconds=spec.orchestration.sensor_interval_s,
        default_status=DefaultSensorStatus.STOPPED,
        description=f"an available-now run of {spec.name} when Kafka has new offsets",
    )
    def _sensor(
        context: SensorEvaluationContext,
        kafka: KafkaResource,
        state_store: PostgresStateStoreResource,
        delta: DeltaTargetResource,
    ) -> RunRequest | SkipReason:
        resolved = apply_resources(load_spec(spec_path), kafka, state_store, delta)
        running = active_run(context, resolved.name, AssetKey(name))
        if running is not None:  # its run would be refused; the next tick looks again
            return SkipReason(f"run {running} of {resolved.name} is queued or in progress")
        ends = kafka.end_offsets(resolved)
        committed = state_store.store_for(resolved).last_end_offsets(resolved.name)
        if not offsets_ahead(ends, committed):
            return SkipReason("no offsets beyond the ledger's last committed batch")
        cursor = json.dumps(ends, sort_keys=True)
        if cursor == context.cursor:
            return SkipReason("a run for these offsets was already requested")
        context.update_cursor(cursor)
        return RunRequest(
            run_key=f"{resolved.name}:{cursor}",
            run_config={"ops": {name: {"config": {"mode": "available_now"}}}},
            tags={PIPELINE_TAG: resolved.name},
        )

    return _sensor


def pipeline_schedule(spec_path: Path) -> ScheduleDefinition | None:
    spec = load_spec(spec_path)
    if spec.orchestration.schedule is None:
        return None
    name = asset_name(spec)
    job = define_asset_job(
        f"{name}_job",
        selection=[AssetKey(name)],
        config={"ops": {name: {"config": {"mode": "available_now"}}}},
        tags={PIPELINE_TAG: spec.name},
    )
    return ScheduleDefinition(
        name=f"{name}_schedule",
        job=job,
        cron_schedule=spec.orchestration.schedule,
        execution_timezone="UTC",
    )


def build_pipeline_assets(folder: Path) -> list[AssetsDefinition]:
    return [pipeline_asset(p) for p in sorted(folder.glob("*.toml"))]


def build_pipeline_checks(folder: Path) -> list[AssetChecksDefinition]:
    return [c for p in sorted(folder.glob("*.toml")) for c in pipeline_checks(p)]


def build_pipeline_sensors(folder: Path) -> list[SensorDefinition]:
    return [
        pipeline_sensor(p)
        for p in sorted(folder.glob("*.toml"))
        if load_spec(p).orchestration.sensor
    ]


def build_pipeline_schedules(folder: Path) -> list[ScheduleDefinition]:
    schedules = (pipeline_schedule(p) for p in sorted(folder.glob("*.toml")))
    return [s for s in schedules if s is not None]
