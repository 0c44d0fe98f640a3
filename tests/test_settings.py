"""flow_jobs.settings: the environment, read when asked, secrets never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_jobs.settings import Settings


def test_settings_are_read_when_asked_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", "first")
    assert Settings.from_env().state_store_schema == "first"
    monkeypatch.setenv("FLOW_STATE_STORE_SCHEMA", "second")
    assert Settings.from_env().state_store_schema == "second"


def test_unset_and_empty_variables_take_the_defaults() -> None:
    settings = Settings.from_env({"FLOW_JOBS_SPARK_MASTER": "", "FLOW_METRICS_PORT": ""})
    assert settings.spark_master is None
    assert settings.metrics_port is None
    assert settings.spark_log_level == "WARN"
    assert settings.data_dir == Path(".")
    assert settings.deployment == "local"
    assert settings.state_store_url is None


def test_secrets_are_never_printed() -> None:
    settings = Settings.from_env(
        {
            "FLOW_STATE_STORE_URL": "postgresql://app:hunter2@db/x",
            "KAFKA_SASL_PASSWORD": "hunter2",
        }
    )
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)
    assert settings.state_store_url is not None
    assert settings.state_store_url.get_secret_value() == "postgresql://app:hunter2@db/x"


def test_a_bad_metrics_port_names_the_variable() -> None:
    assert Settings.from_env({"FLOW_METRICS_PORT": "9108"}).metrics_port == 9108
    with pytest.raises(ValueError, match="FLOW_METRICS_PORT = 'http'"):
        Settings.from_env({"FLOW_METRICS_PORT": "http"})
