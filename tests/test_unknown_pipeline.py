"""``state show``, ``reset`` and ``inspect`` of a pipeline nobody knows: exit 1 and one
line saying so, with the names that are known and what to do; a known pipeline that
has no batches yet is not an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tomli_w

from flow_jobs.cli import main
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.spec.models import PipelineSpec


def test_an_unknown_pipeline_exits_1_naming_the_known_ones(
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema = "t_unknown_" + os.urandom(4).hex()
    monkeypatch.setenv("FLOW_STATE_STORE_URL", postgres_url)
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", schema)
    monkeypatch.setenv("FLOW_JOBS_PIPELINES_DIR", str(tmp_path / "specs"))
    doc = {
        "name": "sensor-sessions",
        "sources": [{"name": "readings", "topic": "readings", "bootstrap_servers": "b:9092",
                     "schema": "sensor STRING, ts BIGINT"}],
        "transform": {"window": {"kind": "tumbling", "duration_ms": 1000,
                                 "event_time_column": "ts", "group_by": ["sensor"],
                                 "aggregations": [{"agg": "count", "as": "n"}]}},
        "target": {"kind": "delta", "path": str(tmp_path / "target")},
        "checkpoint": {"location": str(tmp_path / "checkpoint")},
    }  # fmt: skip
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "sessions.toml").write_text(tomli_w.dumps(doc))

    store = LedgerStore(postgres_url, schema)
    store.migrate()
    for command in (["state", "show"], ["reset"]):
        assert main([*command, "no-such-pipeline"]) == 1
        out = capsys.readouterr()
        assert out.out == ""
        assert out.err.splitlines() == [
            f"error: pipeline no-such-pipeline is not in the state store (schema {schema}; "
            f"it knows no pipeline yet): check the name, or give the spec file (flow-jobs "
            f"{' '.join(command)} no-such-pipeline --spec SPEC.toml) if its state store is "
            "another one; a pipeline is registered by its first run"
        ]

    store.open_pipeline(PipelineSpec.model_validate(doc))  # what a run's start does
    assert main(["state", "show", "no-such-pipeline"]) == 1
    assert "(schema " + schema + "; it knows sensor-sessions)" in capsys.readouterr().err
    assert main(["state", "show", "sensor-sessions"]) == 0  # known, no batch yet
    assert capsys.readouterr().out.splitlines() == [
        f"pipeline sensor-sessions: ledger {schema}.batches in {postgres_url} (psql it, or --psql)",
        f"pipeline sensor-sessions: no batches in the ledger ({schema})",
    ]

    assert main(["inspect", "no-such-pipeline"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: no spec named 'no-such-pipeline' in {tmp_path / 'specs'}/ (found: "
        "sensor-sessions); give the spec file (flow-jobs inspect PATH.toml) or --spec PATH.toml"
    ]
