"""The flow-jobs Dagster component: ``dg`` loads the shipped pipelines through it, and a
user adds a pipeline with a spec file and a ``defs.yaml`` naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetKey
from dagster.components.testing import create_defs_folder_sandbox

from assets.factory import with_topics
from assets.naming import asset_name, dead_letter_key, topic_key
from flow_jobs.spec import load_spec
from flow_jobs.spec.models import PipelineSpec

ROOT = Path(__file__).parent.parent
SHIPPED = sorted((ROOT / "pipelines").glob("*.toml"))


def _dg(*args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "FLOW_JOBS_PIPELINES_DIR"}
    env.update(VIRTUAL_ENV=str(bin_dir.parent), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    return subprocess.run(
        [str(bin_dir / "dg"), *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_dg_checks_and_lists_the_shipped_pipelines() -> None:
    checked = _dg("check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr
    # Nor a word about components the project does not use ([tool.dg.cli] in
    # pyproject.toml): dagster-spark's scaffolder in preview, say.
    assert "Warning" not in checked.stdout + checked.stderr, checked.stderr
    listed = _dg("list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr
    defs = json.loads(listed.stdout)
    keys = {a["asset_key"] for a in defs["assets"]}
    specs = [load_spec(p) for p in SHIPPED]
    for spec in specs:
        assert asset_name(spec) in keys
        assert dead_letter_key(spec).to_user_string() in keys
        assert {topic_key(s).to_user_string() for s in spec.sources} <= keys
    assert len([c for c in defs["asset_checks"] if c["name"] == "watermark_lag"]) == len(specs)
    assert {"flow_jobs_checks"} <= {j["name"] for j in defs["jobs"]}
    assert sum(s["name"].endswith("_monitor") for s in defs["schedules"]) == len(specs)


def test_a_defs_yaml_naming_one_spec_adds_that_pipeline(tmp_path: Path) -> None:
    """A spec file and a ``defs.yaml`` naming it, beside the component of the shipped
    folder: one more pipeline, reading topics the others read too (declared once)."""
    shipped = ROOT / "pipelines" / "orders_payments_join.toml"
    doc = load_spec(shipped).to_document()
    doc["name"] = "orders-payments-copy"
    doc["target"]["path"] = str(tmp_path / "orders_copy")
    added = PipelineSpec.model_validate(doc)
    with create_defs_folder_sandbox() as sandbox:
        one = sandbox.defs_folder_path / "orders"
        one.mkdir(parents=True)
        (one / "orders.toml").write_text(added.to_toml())
        (one / "defs.yaml").write_text(
            "type: assets.component.FlowJobsPipelines\nattributes:\n  spec: orders.toml\n"
        )
        folder = sandbox.defs_folder_path / "all"
        folder.mkdir()
        (folder / "defs.yaml").write_text(
            "type: assets.component.FlowJobsPipelines\n"
            f"attributes:\n  specs_dir: {ROOT / 'pipelines'}\n"
        )
        with sandbox.build_all_defs() as defs:
            assets = with_topics(defs).assets or []
    keys = {spec.key for a in assets for spec in getattr(a, "specs", [a])}
    assert AssetKey(asset_name(added)) in keys and dead_letter_key(added) in keys
    pipelines = [k for k in keys if k.path[0] != "kafka"]
    assert len(pipelines) == 2 * (len(SHIPPED) + 1)  # target and dead letters each
    topics = {topic_key(s) for p in [*SHIPPED, shipped] for s in load_spec(p).sources}
    assert {k for k in keys if k.path[0] == "kafka"} == topics


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ("  spec: missing.toml\n", "spec = 'missing.toml': no file"),
        ("  specs_dir: nowhere\n", "specs_dir = 'nowhere': no folder"),
        ("  spec: a.toml\n  specs_dir: .\n", "set spec or specs_dir, not both"),
        ("  spec_dir: .\n", "spec_dir"),
    ],
)
def test_a_wrong_defs_yaml_fails_loading_and_says_why(attributes: str, message: str) -> None:
    with create_defs_folder_sandbox() as sandbox:
        one = sandbox.defs_folder_path / "wrong"
        one.mkdir(parents=True)
        (one / "defs.yaml").write_text(
            f"type: assets.component.FlowJobsPipelines\nattributes:\n{attributes}"
        )
        with pytest.raises(Exception) as failed, sandbox.build_all_defs():
            pass
        chain, error = [], failed.value
        while error is not None:
            chain.append(str(error))
            error = error.__cause__ or error.__context__
        assert any(message in text for text in chain), chain
