"""The Dagster code location loads one asset per shipped spec."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

from dagster import AssetChecksDefinition, AssetKey

from assets.naming import asset_name, code_version, dead_letter_key, topic_key
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec


def test_definitions_has_one_asset_per_spec() -> None:
    import definitions

    specs = [load_spec(p) for p in sorted(Path(definitions.PIPELINES_DIR).glob("*.toml"))]
    graph = definitions.defs.resolve_asset_graph()
    topics = {topic_key(s) for spec in specs for s in spec.sources}
    targets = {AssetKey(asset_name(spec)) for spec in specs}
    dead = {dead_letter_key(spec) for spec in specs}
    assert set(graph.get_all_asset_keys()) == topics | targets | dead
    # The topics are external (nothing here materializes them), shared by the pipelines
    # reading them (four read `clicks`), upstream of the target and its dead letters.
    assert len(topics) < sum(len(spec.sources) for spec in specs)
    for key in topics:
        assert not graph.get(key).is_materializable
    for spec in specs:
        upstream = {topic_key(s) for s in spec.sources}
        for key in (AssetKey(asset_name(spec)), dead_letter_key(spec)):
            node = graph.get(key)
            assert node.parent_keys == upstream
            assert node.code_version == code_version(spec)
        checks = {k.name for k in graph.get(AssetKey(asset_name(spec))).check_keys}
        assert checks == {
            "window_config_valid",
            "watermark_lag",
            "late_row_rate",
            "natural_key_unique",
            "target_fresh",
        }


def test_loading_the_code_location_warns_of_nothing() -> None:
    """What a code server does with definitions.py's component folder: no BetaWarning
    (Dagster 1.13 turned the component's checks into plain assets definitions, then
    converted them back through a constructor argument in beta), no other warning, and
    every check an ``AssetChecksDefinition`` that kept the component's metadata."""
    import definitions

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        defs = importlib.reload(definitions).defs  # built again, not the cached repository
        defs.get_repository_def().asset_graph  # noqa: B018 (what a code server builds)
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []
    assert defs.asset_checks
    for checks_def in defs.asset_checks:
        assert isinstance(checks_def, AssetChecksDefinition)
        for spec in checks_def.check_specs:
            assert "dagster/component_origin" in spec.metadata


def test_a_spec_change_changes_the_code_version(tmp_path: Path) -> None:
    """The code version is the spec's fingerprint: a change the checkpoint depends on (a
    window's length) shows in the UI; a knob it does not (a trigger's size) does not."""
    shipped = Path(__file__).parent.parent / "pipelines" / "clicks_per_minute.toml"
    spec = load_spec(shipped)
    longer = spec.to_document()
    longer["transform"]["window"]["duration_ms"] *= 2
    knob = spec.to_document()
    knob["sources"][0]["max_offsets_per_trigger"] = 7
    assert code_version(PipelineSpec.model_validate(longer)) != code_version(spec)
    assert code_version(PipelineSpec.model_validate(knob)) == code_version(spec)


def test_the_deployment_variable_picks_the_resource_set() -> None:
    """``FLOW_JOBS_DEPLOYMENT=cluster`` takes the master and archive as ``EnvVar``s (read
    when a run starts, never at load); an unknown deployment is refused at load."""
    import os
    import subprocess
    import sys

    root = Path(__file__).parent.parent
    probe = (
        "import definitions as d; s = d.resources['spark']; "
        "print(type(s.master).__name__, type(s.archive).__name__)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOW_JOBS_SPARK_")}
    cluster = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=root,
        env={**env, "FLOW_JOBS_DEPLOYMENT": "cluster"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert cluster.stdout.split() == ["EnvVar", "EnvVar"]
    local = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, env=env, capture_output=True, text=True, check=True
    )
    assert local.stdout.split() == ["NoneType", "NoneType"]
    bogus = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=root,
        env={**env, "FLOW_JOBS_DEPLOYMENT": "prod"},
        capture_output=True,
        text=True,
    )
    assert bogus.returncode != 0
    assert "FLOW_JOBS_DEPLOYMENT='prod'" in bogus.stderr
