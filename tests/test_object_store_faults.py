"""The object store under a Delta target going away mid-run (``flow_jobs.io.waits``):
moto's S3-compatible server behind a TCP proxy (``flow_jobs_dev.faults``)
that refuses and cuts every connection, then accepts again, the server keeping its
objects."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from pyspark.sql import SparkSession

from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.faults import TcpProxy
from tests.conftest import S3Bucket
from tests.support import (
    ContinuousRun,
    assert_same_windows,
    clicks_in_phases,
    make_spec,
    phase_window,
    send,
    to_records,
    tumbling_reference,
    until,
    windows_or_none,
)

WAITING = "object store unreachable while writing batch"


def test_a_run_waits_out_the_object_store_and_writes_each_window_once(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    s3: S3Bucket,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A continuous run into a Delta table (and dead letters) on S3. Twice the object
    store goes away before a phase of records comes and is back a moment later: the
    batch's write (dead letters, MERGE, ledger row) waits and goes through, and the
    table is the reference windows, each once, with one ledger row per batch and one
    Delta commit per batch that wrote rows."""
    caplog.set_level(logging.INFO, logger="flow_jobs.io.waits")
    backend = urlparse(s3.endpoint)
    proxy = TcpProxy(backend.hostname or "127.0.0.1", backend.port or 80).up()
    via_proxy = {**s3.storage_options, "AWS_ENDPOINT_URL": proxy.endpoint}
    prefix = f"faults-{random.randrange(10**9)}"
    doc = make_spec(
        workdir, broker.bootstrap_servers, topic, phase_window(), name="s3-faults"
    ).to_document()
    doc["target"] = {
        "kind": "delta",
        "path": s3.uri(f"{prefix}/windows"),
        "storage_options": via_proxy,
    }
    doc["dead_letter"] = {"path": s3.uri(f"{prefix}/dead"), "storage_options": via_proxy}
    doc["runtime"] = {"trigger_interval_ms": 200, "retry_for_ms": 60_000}
    spec = PipelineSpec.model_validate(doc)
    phases = clicks_in_phases("s3-faults", (120, 80, 80))
    sent: list[dict[str, Any]] = []

    def produce(phase: list[dict[str, Any]]) -> None:
        send(broker.bootstrap_servers, topic, to_records(phase))
        sent.extend(phase)

    def expected() -> dict[tuple, dict[str, Any]]:
        return tumbling_reference(sent)

    def windows() -> dict[tuple, dict[str, Any]]:  # from the server, not the proxy
        return windows_or_none(spec.target.path, spec.natural_key(), s3.storage_options)

    produce(phases[0])
    run = ContinuousRun(PipelineRunner(spec, spark))
    failure = run.failure
    try:
        until(lambda: len(windows()) == len(expected()), 120, "phase 0 written")
        for i, phase in enumerate(phases[1:]):
            proxy.down()
            produce(phase)  # its batch finds the object store away
            until(lambda i=i: caplog.text.count(WAITING) == i + 1 or failure, 90, "waiting")
            assert not failure, failure
            proxy.up()
            until(lambda: len(windows()) == len(expected()) or failure, 120, "written")
            assert not failure, failure
    finally:
        run.stop()
        proxy.down()
    assert not failure, failure
    assert_same_windows(windows(), expected())
    assert caplog.text.count("object store back after") == 2
    store = LedgerStore.for_spec(spec)
    rows = store.recent_batches(spec.name, 1_000)
    ids = sorted(r["batch_id"] for r in rows)
    assert ids == list(range(ids[0], ids[0] + len(ids))), "one ledger row per batch"
    from deltalake import DeltaTable

    table = DeltaTable(spec.target.path, storage_options=s3.storage_options)
    merges = [h for h in table.history() if h.get("operation") == "MERGE"]
    wrote = [r for r in rows if r["output_rows"]]
    assert len(merges) == len(wrote), "one commit per batch that wrote rows"
