"""A spec changed in a way its checkpoint cannot resume under is refused before Spark
starts, naming the ``flow-jobs reset`` that works for it; run as printed, from where the
user ran the refused command, that reset works, and so does the next run."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from dagster import Failure
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.io.checkpoint_claim import CHECKPOINT_MARKER, IncompatibleSpec
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from tests.support import CLICK_SCHEMA, random_clicks, send, to_records


def spec_doc(bootstrap: str, topic: str, duration_ms: int) -> dict[str, Any]:
    """A spec as a user writes one: relative paths, the default checkpoint."""
    return {
        "name": "sensor-sessions",
        "sources": [{"name": "clicks", "topic": topic, "bootstrap_servers": bootstrap,
                     "schema": CLICK_SCHEMA}],
        "transform": {"window": {"kind": "tumbling", "duration_ms": duration_ms,
                                 "event_time_column": "ts", "lateness_ms": 1_000,
                                 "group_by": ["user_id"],
                                 "aggregations": [{"agg": "count", "as": "n"}]}},
        "target": {"kind": "delta", "path": "./data/sensor_sessions"},
        "spark": {"master": "local[1]", "shuffle_partitions": 1,
                  "conf": {"spark.ui.enabled": "false"}},
    }  # fmt: skip


def flow_jobs(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "flow_jobs.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_refused_change_names_a_reset_that_works_where_it_was_run(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runs around the refusal go through the CLI in this process (the suite's
    session; where Spark starts is not what this tests), the refusal and the reset in a
    process of their own without Java."""
    events = random_clicks(random.Random(47), 200, step_ms=300)
    send(broker.bootstrap_servers, topic, to_records(events))
    project = tmp_path / "sensors"  # not pipelines/: nothing is looked up by name
    project.mkdir()
    monkeypatch.chdir(project)
    spec = project / "sessions.toml"
    spec.write_text(tomli_w.dumps(spec_doc(broker.bootstrap_servers, topic, 10_000)))
    assert main(["run", "sessions.toml", "--available-now", "-q"]) == 0
    assert "200 rows in" in capsys.readouterr().out

    spec.write_text(tomli_w.dumps(spec_doc(broker.bootstrap_servers, topic, 5_000)))
    # No Java where this run looks for it: a refusal that started Spark would fail on that.
    no_java = {"JAVA_HOME": str(tmp_path / "no-java")}
    refused = flow_jobs(project, "run", "sessions.toml", "--available-now", env=no_java)
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert refused.stderr.splitlines() == [
        "error: pipeline sensor-sessions: the spec changed in ways its checkpoint (state "
        f"version 0, fingerprint {_fingerprint(project)}) cannot resume under — "
        "transform.window.duration_ms: 10000 -> 5000. Revert the change, or run "
        "`flow-jobs reset sensor-sessions --spec sessions.toml` to start a new checkpoint "
        "generation (the old checkpoint is kept; the new one re-reads its sources from "
        "starting_offsets and MERGEs into the same target)"
    ]
    command = re.search(r"`(flow-jobs reset [^`]+)`", refused.stderr)
    assert command is not None
    reset = flow_jobs(project, *shlex.split(command.group(1))[1:], env=no_java)
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.startswith("pipeline sensor-sessions: state version 1 starts with")

    capsys.readouterr()
    assert main(["run", "sessions.toml", "--available-now", "-q"]) == 0
    assert "200 rows in" in capsys.readouterr().out  # the new generation re-reads the topic


def _fingerprint(project: Path) -> str:
    marker = project / ".flow" / "sensor-sessions" / "checkpoint" / CHECKPOINT_MARKER
    return str(json.loads(marker.read_text())["fingerprint"])


def test_a_checkpoint_of_another_spec_is_refused_before_spark_everywhere(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker's refusal (the ledger kept elsewhere), from the facade (no spec file)
    and from Dagster (the file it loaded), before a SparkSession is asked for."""
    from pyspark import SparkContext

    from assets.run import refuse_incompatible_spec
    from flow_jobs import run_pipeline

    context = SparkContext._active_spark_context  # None, unless another test made one

    monkeypatch.setenv("FLOW_STATE_STORE_URL", postgres_url)
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", "t_marker_" + os.urandom(4).hex())
    doc = spec_doc("127.0.0.1:9", "clicks", 10_000)
    doc["checkpoint"] = {"location": str(tmp_path / "checkpoint")}
    spec = PipelineSpec.model_validate(doc)
    (tmp_path / "checkpoint").mkdir()
    marker = {"pipeline": "sensor-sessions", "fingerprint": "0123456789abcdef"}
    (tmp_path / "checkpoint" / CHECKPOINT_MARKER).write_text(json.dumps(marker))

    with pytest.raises(IncompatibleSpec) as refused:
        run_pipeline(spec, available_now=True)
    assert "run `flow-jobs reset sensor-sessions --spec SPEC.toml` with the state store" in str(
        refused.value
    )
    assert SparkContext._active_spark_context is context
    with pytest.raises(Failure) as failed:
        refuse_incompatible_spec(spec, Path("/srv/dagster/specs/sensor sessions.toml"))
    assert (
        "`flow-jobs reset sensor-sessions --spec '/srv/dagster/specs/sensor sessions.toml'`"
        in str(failed.value.description)
    )
