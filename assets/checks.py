"""A pipeline's asset checks: ``window_config_valid`` (the spec file alone) and the
ledger checks (``check_rules.LEDGER_CHECKS``) as one ``multi_asset_check``: the spec
resolved once, one state store (migrated once) for all of them, each still runnable
alone (``can_subset``). They run with the asset or without it (the ``flow_jobs_checks``
job, the monitoring schedule)."""

from collections.abc import Iterator
from pathlib import Path

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSpec,
    asset_check,
    multi_asset_check,
)

from assets.check_rules import LEDGER_CHECKS, applies, check_window_config
from assets.naming import target_key
from assets.resources import SPEC_RESOURCES, resolve
from flow_jobs.spec.models import PipelineSpec


def pipeline_checks(spec: PipelineSpec, spec_path: Path) -> list[AssetChecksDefinition]:
    key = target_key(spec)

    @asset_check(
        asset=key,
        name="window_config_valid",
        description="the spec file validates; the state-size upper bound is within "
        "[checks] state_budget_bytes",
    )
    def window_config_valid() -> AssetCheckResult:
        return check_window_config(spec_path)  # the file as it is now, not as loaded

    @multi_asset_check(
        name=f"{key.to_python_identifier()}_ledger_checks",
        specs=[
            AssetCheckSpec(name, asset=key, description=description)
            for name, (description, _rule) in LEDGER_CHECKS.items()
            if applies(name, spec)
        ],
        can_subset=True,
        required_resource_keys=set(SPEC_RESOURCES),
    )
    def ledger_checks(context: AssetCheckExecutionContext) -> Iterator[AssetCheckResult]:
        resolved = resolve(spec, context.resources)
        ledger = context.resources.state_store.store_for(resolved)
        for selected in sorted(context.selected_asset_check_keys, key=lambda k: k.name):
            result = LEDGER_CHECKS[selected.name][1](resolved, ledger)
            yield AssetCheckResult(
                asset_key=key,
                check_name=selected.name,
                passed=result.passed,
                severity=result.severity,
                description=result.description,
                metadata=result.metadata,
            )

    return [window_config_valid, ledger_checks]
