"""End to end through Dagster itself: ``dg dev`` serves the checkout's project
(definitions.py), a run is launched through its GraphQL API, processes the data, records
its metadata and evaluates the asset's checks."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from flow_jobs.io.delta import read_delta
from flow_jobs.ledger.store import LedgerStore
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.dagster_ui import (
    DagsterDev,
    await_run,
    dagster_client,
    launch_asset_run,
    query,
)
from flow_jobs_dev.producer import Record
from flow_jobs_dev.service import free_port
from tests.support import make_spec, random_clicks, send, to_records

ROOT = Path(__file__).parent.parent
ASSET = """
query Asset($key: AssetKeyInput!) {
  assetNodes(assetKeys: [$key]) {
    assetMaterializations(limit: 1) {
      runId
      metadataEntries { label ... on IntMetadataEntry { intValue } }
    }
    assetChecksOrError {
      ... on AssetChecks {
        checks {
          name
          executionForLatestMaterialization { runId status evaluation { success } }
        }
      }
    }
  }
}"""


def test_a_run_launched_through_dagster_graphql_succeeds_with_its_checks(
    broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    events = random_clicks(random.Random(4), 300, step_ms=200)
    send(broker.bootstrap_servers, topic, to_records(events))
    window = {
        "kind": "tumbling",
        "duration_ms": 10_000,
        "event_time_column": "ts",
        "lateness_ms": 1_000,
        "group_by": ["user_id"],
        "aggregations": [{"agg": "count", "as": "n"}],
    }
    spec = make_spec(workdir, broker.bootstrap_servers, topic, window, name="graphql-e2e")
    doc = spec.to_document()
    doc["checks"] = {"watermark_lag_max_s": 10**10}  # the sample data is from 2023
    pipelines = workdir / "pipelines"
    pipelines.mkdir()
    (pipelines / "e2e.toml").write_text(PipelineSpec.model_validate(doc).to_toml())

    port = free_port()
    home = workdir / "dagster_home"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "FLOW_JOBS_PIPELINES_DIR": str(pipelines),
        "FLOW_JOBS_SPARK_MASTER": "local[2]",
    }
    log = (workdir / "dagster.log").open("wb")
    server = DagsterDev(ROOT, port, env, log_level="info", output=log)
    try:
        repository = server.start().repository
        client = dagster_client(port)
        run_id = launch_asset_run(client, repository, "target", "available_now")
        status = await_run(client, run_id)
        assert status == "SUCCESS", (workdir / "dagster.log").read_text()[-5000:]

        key = {"path": ["target"]}
        (node,) = query(client, ASSET, key=key)["assetNodes"]
        (materialization,) = node["assetMaterializations"]
        assert materialization["runId"] == run_id
        values = {m["label"]: m.get("intValue") for m in materialization["metadataEntries"]}
        assert values["input_rows"] == len(events)
        assert values["windows_emitted"] > 0
        checks = {c["name"]: c["executionForLatestMaterialization"] for c in
                  node["assetChecksOrError"]["checks"]}  # fmt: skip
        assert set(checks) == {
            "window_config_valid",
            "watermark_lag",
            "late_row_rate",
            "natural_key_unique",
            "target_fresh",
        }
        for name, execution in checks.items():
            assert execution is not None, f"{name} was not evaluated"
            assert execution["runId"] == run_id
            assert execution["evaluation"]["success"], (name, execution)

        # A continuous run, terminated from Dagster once it has written a batch: the
        # query stops after the batch in flight, which is committed, nothing half-done.
        ledger = LedgerStore(
            os.environ["FLOW_STATE_STORE_URL"], os.environ["FLOW_STATE_STORE_SCHEMA"]
        )
        before = len(ledger.recent_batches("graphql-e2e", 100))
        more = random_clicks(random.Random(5), 100, step_ms=200, start_ms=events[-1]["ts"] + 1)
        send(broker.bootstrap_servers, topic, [
            Record(r.value, (i + len(events)) % 2, r.key, r.timestamp_ms)
            for i, r in enumerate(to_records(more))
        ])  # fmt: skip
        continuous = launch_asset_run(client, repository, "target", "continuous")
        deadline = time.monotonic() + 300
        while len(ledger.recent_batches("graphql-e2e", 100)) <= before:
            assert time.monotonic() < deadline, "the continuous run wrote no batch"
            time.sleep(0.5)
        client.terminate_run(continuous)  # raises unless TerminateRunSuccess
        assert await_run(client, continuous) == "CANCELED"
        batches = ledger.recent_batches("graphql-e2e", 100)
        assert [b["batch_id"] for b in batches] == list(range(len(batches)))
        commits = workdir / "checkpoint" / "commits"
        assert (commits / str(batches[-1]["batch_id"])).exists()  # committed, not in flight
        assert batches[-1]["end_offsets"] == {"clicks": {topic: {"0": 200, "1": 200}}}
        target = read_delta(str(workdir / "target")).to_pylist()
        keys = [(r["window_start"], r["window_end"], r["user_id"]) for r in target]
        assert len(keys) == len(set(keys))
    finally:
        server.stop()  # dg dev, its webserver, daemon, code servers and runs
        log.close()
