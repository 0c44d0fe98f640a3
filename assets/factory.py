"""Specs to Dagster definitions: each spec parsed once into its own ``Definitions``
(its target and dead-letter assets, checks, sensor, schedules), a folder's merged with
``Definitions.merge``. The Kafka topics they read are declared once for the whole code
location (``with_topics``): several pipelines, from several components, read one topic,
and Dagster refuses two definitions of one asset that differ (a component adds its own
file to each one's metadata)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster import (
    AssetChecksDefinition,
    AssetKey,
    AssetSelection,
    Definitions,
    define_asset_job,
)

from assets.asset import pipeline_asset, topic_spec
from assets.checks import pipeline_checks
from assets.inspect import inspect_job
from assets.naming import TOPIC_PREFIX
from assets.schedules import monitoring_schedule, pipeline_schedule
from assets.sensors import pipeline_sensor
from flow_jobs.spec import SPEC_SUFFIXES, load_spec

CHECKS_JOB = "flow_jobs_checks"


def pipeline_definitions(spec_path: Path) -> Definitions:
    """One spec's definitions. An invalid spec fails loading the code location, loudly,
    naming the file and the key."""
    spec = load_spec(spec_path)
    schedules = [s for s in (pipeline_schedule(spec), monitoring_schedule(spec)) if s]
    return Definitions(
        assets=[pipeline_asset(spec, spec_path)],
        asset_checks=pipeline_checks(spec, spec_path),
        # Listed, so that dg's component loader (which rewrites definitions' metadata)
        # keeps one job per schedule rather than a copy per user of it.
        jobs=[*(s.job for s in schedules), inspect_job(spec)],
        sensors=[pipeline_sensor(spec)] if spec.orchestration.sensor else [],
        schedules=schedules,
    )


def spec_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).iterdir() if p.suffix in SPEC_SUFFIXES)


def folder_definitions(folder: Path) -> Definitions:
    """Every spec in ``folder`` (``*.toml``, ``*.sql``)."""
    return Definitions.merge(Definitions(), *(pipeline_definitions(p) for p in spec_files(folder)))


def with_topics(defs: Definitions) -> Definitions:
    """``defs`` and an external asset for each Kafka topic its pipelines read."""
    readers: dict[AssetKey, set[str]] = {}
    for assets in defs.assets or ():
        for spec in getattr(assets, "specs", ()):
            for dep in spec.deps:
                if dep.asset_key.path[0] == TOPIC_PREFIX:
                    readers.setdefault(dep.asset_key, set()).add(spec.key.to_user_string())
    topics = [topic_spec(key, sorted(names)) for key, names in sorted(readers.items())]
    return Definitions.merge(defs, Definitions(assets=topics))


def with_check_definitions(defs: Definitions) -> Definitions:
    """``defs`` with each asset check an ``AssetChecksDefinition`` again.

    dg's component loader adds its metadata (the defs.yaml, the component) to every
    definition it loads (``Definitions.with_definition_metadata_update``), and Dagster
    1.13 rebuilds each check there as a plain ``AssetsDefinition``; the repository then
    converts it back through an argument in beta (``execution_type``), which warned
    (``BetaWarning``) in every process loading the code location (Dagster's comment on
    ``Definitions.asset_checks`` calls it their bug, dagster-io/dagster#22064). Rebuilt
    with the public ``AssetChecksDefinition.create`` from the same op, check specs (the
    loader's metadata in them), subsetting and resources (the loader's checks are whole,
    never subsets), there is nothing to convert."""
    checks = [
        checks_def
        if isinstance(checks_def, AssetChecksDefinition)
        else AssetChecksDefinition.create(
            keys_by_input_name=checks_def.node_keys_by_input_name,
            node_def=checks_def.node_def,
            check_specs_by_output_name=checks_def.node_check_specs_by_output_name,
            can_subset=checks_def.can_subset,
            resource_defs=checks_def.resource_defs,
        )
        for checks_def in defs.asset_checks or ()
    ]
    return Definitions(
        assets=defs.assets,
        asset_checks=checks,
        schedules=defs.schedules,
        sensors=defs.sensors,
        jobs=defs.jobs,
        resources=defs.resources,
        executor=defs.executor,
        loggers=defs.loggers,
        metadata=defs.metadata,
        component_tree=defs.component_tree,
    )


def checks_job() -> Any:
    """Every check of the code location alone, without materializing:
    ``dagster job execute -j flow_jobs_checks``."""
    return define_asset_job(CHECKS_JOB, selection=AssetSelection.all_asset_checks())
