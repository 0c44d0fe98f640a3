"""The checks' rules: functions of the spec, the ledger and the target, each returning
an ``AssetCheckResult``. ``checks.py`` turns them into Dagster checks; the target is
read with bounded queries only (an aggregate where its rows are: the sink's ``crowded``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from dagster import AssetCheckResult, AssetCheckSeverity

from flow_jobs.ledger.store import LedgerStore
from flow_jobs.sinks import sink_for
from flow_jobs.sinks.base import Crowded, TargetUnreadable
from flow_jobs.spec.models import PipelineSpec


def check_window_config(spec_path: Path) -> AssetCheckResult:
    from flow_jobs.plan.sizing import estimate_state
    from flow_jobs.spec import SpecError, load_spec

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


def check_watermark_lag(spec: PipelineSpec, ledger: LedgerStore) -> AssetCheckResult:
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


def check_late_row_rate(spec: PipelineSpec, ledger: LedgerStore) -> AssetCheckResult:
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


def _crowded(
    spec: PipelineSpec, ledger: LedgerStore, columns: list[str], limit: int
) -> Crowded | AssetCheckResult:
    """One aggregate where the target's rows are (no row comes into Python: the sink's
    ``crowded``); the check's result where it cannot count them."""
    target = spec.target
    try:
        found = sink_for(target).crowded(target, ledger, columns, limit)
    except TargetUnreadable as e:
        return AssetCheckResult(passed=False, description=str(e))
    if found is None:
        return AssetCheckResult(
            passed=True, description=f"{target.kind} target: not read back, n/a"
        )
    return found


def _not_read_back(spec: PipelineSpec) -> AssetCheckResult | None:
    """A target whose rows are only appended: the checks on its rows do not apply."""
    if spec.target.append_only is None:
        return None
    return AssetCheckResult(passed=True, description=f"{spec.target.kind} target: append-only, n/a")


def check_natural_key_unique(spec: PipelineSpec, ledger: LedgerStore) -> AssetCheckResult:
    if (appended := _not_read_back(spec)) is not None:
        return appended
    key = ledger.natural_key(spec.name)
    if key is None:
        return AssetCheckResult(passed=True, description="no run recorded yet: nothing written")
    repeated = _crowded(spec, ledger, key, 1)
    if isinstance(repeated, AssetCheckResult):
        return repeated
    keys, extra = repeated.groups, repeated.extra
    return AssetCheckResult(
        passed=keys == 0,
        description=f"{keys} natural keys ({', '.join(key)}) repeated, {extra} extra rows",
        metadata={"duplicate_keys": keys, "extra_rows": extra},
    )


def check_top_n_bounded(spec: PipelineSpec, ledger: LedgerStore) -> AssetCheckResult:
    """[transform.window.top_n]: no window (and partition_by values) holds more than n
    rows in the target."""
    w = spec.window
    assert w.top_n is not None
    if (appended := _not_read_back(spec)) is not None:
        return appended
    n, within = w.top_n.n, [w.window_start_column, w.window_end_column, *w.top_n.partition_by]
    crowded = _crowded(spec, ledger, within, n)
    if isinstance(crowded, AssetCheckResult):
        return crowded
    over, most = crowded.groups, crowded.most
    return AssetCheckResult(
        passed=over == 0,
        description=f"{over} windows ({', '.join(within)}) hold more than top_n = {n} rows"
        + (f" (up to {most})" if over else ""),
        metadata={"windows_over": over, "most_rows": most, "n": n},
    )


def check_target_fresh(spec: PipelineSpec, ledger: LedgerStore) -> AssetCheckResult:
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


def applies(name: str, spec: PipelineSpec) -> bool:
    """Whether a ledger check is one of the pipeline's (top_n_bounded: with top_n, and
    not ``with_ties``, whose windows may rightly hold more than n rows)."""
    if name == "top_n_bounded":
        top = spec.window.top_n if spec.has_window else None
        return top is not None and not top.with_ties
    return True


#: The checks that read the ledger (and target): name -> (description, function).
LEDGER_CHECKS: dict[str, tuple[str, Callable[[PipelineSpec, LedgerStore], AssetCheckResult]]] = {
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
    "top_n_bounded": (
        "no window (and partition) holds more than [transform.window.top_n] n rows",
        check_top_n_bounded,
    ),
}

#: The checks that watch a running pipeline: the monitoring schedule runs them while a
#: continuous run is open (an available-now run evaluates all of them as it ends).
MONITORING_CHECKS = ("watermark_lag", "target_fresh")
