"""The state store restarted under a continuous run (``LedgerStore.retrying``,
``RunLock.ensure``), against an embedded PostgreSQL 16 of the test's own (the pgserver
wheel), stopped with ``pg_ctl`` (fast, then immediate: a crash) and started again."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from flow_jobs.ledger.store import LedgerStore
from flow_jobs.runtime.runner import PipelineFailed, PipelineRunner
from flow_jobs.spec.models import PipelineSpec
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.faults import Postgres
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

#: The batch's first try finds the store away (the progress poller may log its own).
WAITING = "state store unreachable while taking the run lock again before writing batch"


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[Postgres]:
    server = Postgres(tmp_path / "pgdata")
    yield server
    server.cleanup()


def test_a_run_waits_out_state_store_restarts_and_stops_if_its_lock_was_taken_meanwhile(
    spark: SparkSession,
    broker: EmbeddedBroker,
    topic: str,
    workdir: Path,
    postgres: Postgres,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A continuous run on a state store of its own. Twice the store stops (fast, then
    immediate) before a phase of records comes and starts again a moment later: the
    batch's ledger write waits for it and goes through, the run lock (gone with its
    connection) is taken again, and the target is the reference windows, each once,
    with one ledger row per batch. Then the store restarts and another session takes
    the pipeline's lock before the run can: the next batch stops the run, naming the
    holder, with nothing of that batch written."""
    caplog.set_level(logging.INFO, logger="flow_jobs.ledger")
    phases = clicks_in_phases("pg-restarts", (120, 80, 80, 60))
    spec = make_spec(workdir, broker.bootstrap_servers, topic, phase_window(), name="pg-restarts")
    doc = spec.to_document()
    doc["runtime"] = {"trigger_interval_ms": 200, "retry_for_ms": 60_000}
    doc["state_store"] = {"url": postgres.url, "schema": "restarts"}
    spec = PipelineSpec.model_validate(doc)
    sent: list[dict[str, Any]] = []

    def produce(phase: list[dict[str, Any]]) -> None:
        send(broker.bootstrap_servers, topic, to_records(phase))
        sent.extend(phase)

    def expected() -> dict[tuple, dict[str, Any]]:
        return tumbling_reference(sent)

    def windows() -> dict[tuple, dict[str, Any]]:
        return windows_or_none(spec.target.path, spec.natural_key())

    produce(phases[0])
    run = ContinuousRun(PipelineRunner(spec, spark))
    holder: psycopg.Connection | None = None
    try:
        until(lambda: len(windows()) == len(expected()), 120, "phase 0 written")
        for i, (mode, phase) in enumerate(zip(("fast", "immediate"), phases[1:3], strict=True)):
            postgres.stop(mode)
            produce(phase)  # its batch finds the store away
            until(
                lambda i=i: caplog.text.count(WAITING) == i + 1,
                60,
                f"{mode}: the batch waits",
            )
            postgres.start()
            until(lambda: len(windows()) == len(expected()), 120, f"after the {mode} stop")
            assert run.thread.is_alive()
        written = windows()
        postgres.stop("fast")
        postgres.start()
        holder = psycopg.connect(postgres.url, autocommit=True, application_name="the thief")
        key = LedgerStore(postgres.url, "restarts").lock_key(spec.name)
        assert holder.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)
        produce(phases[3])
        run.thread.join(120)
        assert not run.thread.is_alive()
    finally:
        run.stop()
        if holder is not None:
            holder.close()
    [stopped] = run.failure
    assert isinstance(stopped, PipelineFailed)
    assert "'the thief' holds it" in str(stopped)
    assert "took the lock while the state store was away; this run stops before writing batch" in (
        str(stopped)
    )
    assert windows() == written  # nothing of the last batch
    sent[-len(phases[3]) :] = []
    assert_same_windows(written, expected())
    store = LedgerStore(postgres.url, "restarts")
    try:
        rows = store.recent_batches(spec.name, 1_000)
        ids = sorted(r["batch_id"] for r in rows)
        assert ids == list(range(ids[0], ids[0] + len(ids))), "one ledger row per batch"
    finally:
        store.close()
    lines = caplog.text  # each restart: logged once as the batch waits, once as it goes on
    assert lines.count(WAITING) == 2
    assert lines.count("(taking the run lock again before writing batch") == 2  # back after
    assert lines.count("the run lock's connection to the state store was lost") == 3


def test_a_ledger_call_waits_for_the_store_and_past_its_limit_names_the_setting(
    postgres: Postgres, caplog: pytest.LogCaptureFixture
) -> None:
    """``LedgerStore.retrying`` on the ledger's own reads and writes: the store stopped,
    a call tries again until it is back (logged once each way); stopped for longer
    than ``retry_for_ms``, it fails naming the key, never the URL's secrets."""
    from flow_jobs.io.waits import StoreUnreachable

    caplog.set_level(logging.INFO, logger="flow_jobs.ledger")
    store = LedgerStore(postgres.url, "waits", retry_for_ms=60_000)
    store.migrate()
    try:
        postgres.stop("immediate")
        # away longer than the pool waits for a connection (ledger.pool: 5 s)
        threading.Timer(6.5, postgres.start).start()
        assert store.retrying("reading", lambda: store.recent_batches("p")) == []
        assert caplog.text.count("state store unreachable while reading") == 1
        assert caplog.text.count("state store back after") == 1
        postgres.stop("fast")
        store.retry_for_ms = 1_000
        with pytest.raises(StoreUnreachable, match=r"raise \[runtime\] retry_for_ms"):
            store.retrying("reading", lambda: store.recent_batches("p"))
    finally:
        postgres.start()
        store.close()
