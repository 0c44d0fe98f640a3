"""``make lint`` holds the engine to its layers (``.importlinter``): the tree as it is
keeps them, and one import that climbs a layer, even inside a function, breaks them; so
does one that brings driver-side code into the Kafka reader, which Spark's Python
processes import. No module of the engine is over 400 lines."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--config", str(root / ".importlinter"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tree_keeps_its_layers() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 kept, 0 broken" in done.stdout


def _lint_with(tmp_path: Path, module: str, imported: str) -> subprocess.CompletedProcess[str]:
    """Lint a copy of the tree in which ``module`` (a path under flow_jobs/) imports
    ``imported`` inside a function."""
    shutil.copytree(ROOT / "flow_jobs", tmp_path / "flow_jobs", ignore=_pycache)
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    source = tmp_path / "flow_jobs" / module
    source.write_text(source.read_text() + f"\n\ndef _added() -> None:\n    {imported}\n")
    return _lint(tmp_path)


def test_an_import_up_a_layer_breaks_them(tmp_path: Path) -> None:
    done = _lint_with(tmp_path, "spec/base.py", "from flow_jobs.runtime import runner")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "flow_jobs.spec is not allowed to import flow_jobs.runtime" in done.stdout
    assert "flow_jobs.spec.base -> flow_jobs.runtime.runner" in done.stdout


def test_driver_side_code_in_the_reader_breaks_them(tmp_path: Path) -> None:
    done = _lint_with(tmp_path, "kafka/read.py", "from flow_jobs.io import delta")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "flow_jobs.kafka is not allowed to import flow_jobs.io.delta" in done.stdout
    assert "1 broken" in done.stdout


def test_the_architecture_map_lists_the_layers_of_the_contract() -> None:
    """docs/architecture.md, "The layers", is the contract's list, line for line."""
    config = (ROOT / ".importlinter").read_text()
    listed = config.split("layers =\n", 1)[1].split("\n\n", 1)[0]
    layers = [line.strip() for line in listed.splitlines() if line.strip()]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = doc.split("## The layers", 1)[1].split("```\n", 2)[1]
    assert block.splitlines() == layers


def _pycache(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


def test_no_engine_module_is_over_400_lines() -> None:
    """A module that outgrows 400 lines holds more than one thing: split it."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "flow_jobs").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > 400
    }
    assert long == {}
