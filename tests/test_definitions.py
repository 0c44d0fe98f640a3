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
