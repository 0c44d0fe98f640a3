"""Shared fixtures: one SparkSession and one embedded broker per test run."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.embedded.broker import EmbeddedBroker
from flow_jobs.runtime.session import build_spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_spark_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.driver.memory": "2g",
        },
        app_name="flow-jobs-tests",
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as b:
        yield b


@pytest.fixture
def topic(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> str:
    """A fresh two-partition topic named after the test."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:60]
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    broker.create_topic(name, partitions=2)
    return name


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path


def _reachable(url: str) -> bool:
    import psycopg

    try:
        psycopg.connect(url, connect_timeout=2).close()
        return True
    except psycopg.OperationalError:
        return False


MACHINE_POSTGRES = os.environ.get(
    "FLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


@pytest.fixture(scope="session")
def embedded_postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL 16 started from the pgserver wheel."""
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()


@pytest.fixture(scope="session")
def postgres_url(request: pytest.FixtureRequest) -> str:
    """The machine's PostgreSQL when it answers, else the embedded one."""
    if _reachable(MACHINE_POSTGRES):
        return MACHINE_POSTGRES
    return str(request.getfixturevalue("embedded_postgres_url"))


@pytest.fixture(autouse=True)
def state_store_env(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str | None]:
    """Every test's pipelines keep their ledger in a schema of their own (pipeline names
    repeat across tests), in the shared test Postgres. Pure-logic tests start none."""
    if not _needs_spark(request):
        yield None
        return
    url = str(request.getfixturevalue("postgres_url"))
    schema = "t_" + uuid.uuid4().hex[:12]
    monkeypatch.setenv("FLOW_STATE_STORE_URL", url)
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", schema)
    yield schema


def _needs_spark(request: pytest.FixtureRequest) -> bool:
    return "spark" in request.fixturenames or "broker" in request.fixturenames
