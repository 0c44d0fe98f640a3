"""The Dagster code location loads one asset per shipped spec."""

from __future__ import annotations

from pathlib import Path

from assets.pipelines import asset_name
from flow_jobs.spec import load_spec


def test_definitions_has_one_asset_per_spec() -> None:
    import definitions

    specs = sorted(Path(definitions.PIPELINES_DIR).glob("*.toml"))
    keys = {k.to_user_string() for k in definitions.defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {asset_name(load_spec(p)) for p in specs}


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
