"""The core reaches each stage of ``[transform]`` (a window, the stream-stream join, the
temporal join) and each batch step (top-N) through their registries, by name, and names
none itself; the spec reads the joins' and the dedup's keys with their packages' models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from flow_jobs.append.spec import AppendSpec
from flow_jobs.joins.spec import JoinSpec
from flow_jobs.mirror.spec import MirrorSpec
from flow_jobs.plan.pipelines import PIPELINES
from flow_jobs.runtime.batch_steps import BATCH_STEPS
from flow_jobs.runtime.inspect import READINGS
from flow_jobs.spec.windows import WindowSpec
from flow_jobs.temporal_join.spec import TemporalJoinSpec
from flow_jobs.window_join.spec import WindowJoinSpec

ROOT = Path(__file__).resolve().parents[1]

#: The core: spec loading's rules, plan assembly, the runner, the batch sink, inspect and
#: the CLI's and Dagster's words. A stage's own package and spec model are not.
CORE = (
    "flow_jobs/plan/compile.py",
    "flow_jobs/plan/pipelines.py",
    "flow_jobs/spec/models.py",
    "flow_jobs/runtime/runner.py",
    "flow_jobs/runtime/progress.py",
    "flow_jobs/runtime/sink.py",
    "flow_jobs/runtime/inspect/__init__.py",
    "flow_jobs/runtime/inspect/report.py",
    "flow_jobs/dead_letters/table.py",
    "flow_jobs/one_line.py",
    "flow_jobs/cli_inspect.py",
)
#: How code names a join stage or top-N: its spec table, its spec model, its package,
#: top-N's ranking.
NAMING = re.compile(
    r"transform\.(join|temporal_join|window_join|mirror)\b"
    r"|\b(JoinSpec|TemporalJoinSpec|WindowJoinSpec|MirrorSpec)\b"
    r"|flow_jobs\.(joins|temporal_join|window_join|top_n|mirror)\b|\b(Ranking|Standings)\b"
)


def test_every_built_in_stage_compiles_and_is_inspected_through_its_registries() -> None:
    stages = {
        WindowSpec.STAGE, JoinSpec.STAGE, TemporalJoinSpec.STAGE, WindowJoinSpec.STAGE,
        AppendSpec.STAGE, MirrorSpec.STAGE,
    }  # fmt: skip
    assert stages == {"window", "join", "temporal_join", "window_join", "append", "mirror"}
    assert stages <= set(PIPELINES.names())
    assert stages <= set(READINGS.names())
    assert "top_n" in BATCH_STEPS.names()


def test_the_core_names_no_join_stage_nor_top_n() -> None:
    named = [
        f"{path}:{n}: {line.strip()}"
        for path in CORE
        for n, line in enumerate((ROOT / path).read_text().splitlines(), 1)
        if NAMING.search(line)
    ]
    assert named == []


#: What only a join's, a temporal join's or a dedup's model knows: their keys.
STAGE_KEYS = re.compile(
    r"\b(JoinSpec|TemporalJoinSpec|DedupSpec|left_keys|right_keys|stream_keys|version_keys"
    r"|within_ms)\b"
)


def test_the_spec_knows_no_join_nor_dedup_model() -> None:
    """The spec reads ``[transform.join]``, ``[transform.temporal_join]`` and
    ``[[transform.dedup]]`` with the models their packages register (``STAGE_SPECS``,
    ``OPERATOR_SPECS``); no module of ``flow_jobs/spec/`` knows their keys."""
    named = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "flow_jobs" / "spec").glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if STAGE_KEYS.search(line)
    ]
    assert named == []
    assert STAGE_KEYS.search("keys = join.left_keys if side")


def test_the_check_finds_a_stage_named_in_the_core() -> None:
    """The pattern above catches each way (the test could not fail otherwise)."""
    for line in (
        "join = spec.transform.join",
        "if spec.transform.temporal_join is not None:",
        "from flow_jobs.spec.models import JoinSpec",
        "from flow_jobs.joins.compile import compile_join",
        "from flow_jobs.temporal_join import processor",
        "if spec.transform.window_join is not None:",
        "from flow_jobs.top_n.ranking import Ranking, rank",
        "self.standings = Standings(store, name, version, ranking)",
    ):
        assert NAMING.search(line), line
    assert not NAMING.search("first = spec.transform.stages()[0]")


def test_loading_the_registries_imports_no_compile_step_nor_inspect() -> None:
    """Every ``validate`` and every Dagster load loads the registries: the built-ins
    register their compile steps and readings to be imported on first use."""
    code = (
        "import sys; from flow_jobs.plugins import load_builtins; load_builtins(); "
        "print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = set(done.stdout.split())
    heavy = {
        "pandas",
        "flow_jobs.plan.windowed",
        "flow_jobs.joins.compile",
        "flow_jobs.temporal_join.compile",
        "flow_jobs.window_join.compile",
        "flow_jobs.append.compile",
        "flow_jobs.top_n.step",
        "flow_jobs.dedup.compile",
        "flow_jobs.runtime.inspect",
    }
    assert loaded & heavy == set()
    assert {"flow_jobs.joins.plugin", "flow_jobs.top_n.plugin"} <= loaded
