"""Shared fixtures: one SparkSession and one embedded broker per test run."""

from __future__ import annotations

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
