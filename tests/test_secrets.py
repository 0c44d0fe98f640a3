"""No secret in any output of a failing run: spec errors, connection errors, lookups,
the CLI, logs and Spark plans are all grepped for one known password."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.cli import main
from flow_jobs.runtime.runner import PipelineRunner
from flow_jobs.secrets import redact
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.service import free_port
from tests.support import make_spec

SECRET = "S3cr3t-pw-4711"
WINDOW: dict[str, Any] = {
    "kind": "tumbling",
    "duration_ms": 10_000,
    "event_time_column": "ts",
    "group_by": ["user_id"],
    "aggregations": [{"agg": "count", "as": "n"}],
}


def _closed_url(scheme: str = "postgresql") -> str:
    return f"{scheme}://flow:{SECRET}@127.0.0.1:{free_port()}/flow"


def _assert_clean(*outputs: str) -> None:
    for text in outputs:
        assert SECRET not in text, text[-2000:]


def _spec_file(workdir: Path, name: str, **extra: Any) -> Path:
    doc = make_spec(workdir, "127.0.0.1:9", "t", WINDOW, name=name).to_document()
    doc.update(extra)
    import tomli_w

    path = workdir / f"{name}.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def test_redact_masks_url_and_dsn_passwords() -> None:
    assert redact(f"postgresql://app:{SECRET}@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert SECRET not in redact(f"host=db password={SECRET} dbname=x")
    assert SECRET not in redact(f"sasl.jaas.config=... password='{SECRET}';")
    assert redact("s3a://bucket/path and postgresql://db/x") == (
        "s3a://bucket/path and postgresql://db/x"
    )


def test_spec_and_cli_errors_never_print_the_password(
    workdir: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = f"postgresql://app:{SECRET}@db/x"
    # A URL where a table belongs: pydantic echoes the input of a wrong type.
    as_string = _spec_file(workdir, "as-string", state_store=url)
    assert main(["validate", str(as_string)]) == 1
    out = capsys.readouterr()
    assert "state_store" in out.err and "app:***@db" in out.err
    _assert_clean(out.out, out.err, caplog.text)

    # `state show` never takes the URL on the command line, and names what to use.
    assert main(["state", "show", "some-pipeline", "--url", url]) == 2
    out = capsys.readouterr()
    assert "FLOW_STATE_STORE_URL" in out.err and "--url-file" in out.err
    _assert_clean(out.out, out.err, caplog.text)

    # The URL from a file (or the environment) reaches psycopg; its errors are masked.
    for bad in (_closed_url(), _closed_url("postgres+psycopg"), f"host=db password={SECRET} x"):
        url_file = workdir / "url"
        url_file.write_text(bad)
        assert main(["state", "show", "some-pipeline", "--url-file", str(url_file)]) == 1
        out = capsys.readouterr()
        assert out.err.startswith("error: state store:"), out.err
        _assert_clean(out.out, out.err, caplog.text)


@pytest.mark.parametrize("failing", ["broker", "state-store"])
def test_a_failing_run_prints_no_secret_anywhere(
    failing: str, broker: EmbeddedBroker, topic: str, workdir: Path
) -> None:
    """One subprocess, as a user runs it, with -v: every byte of stdout and stderr
    (Spark's and the JVM's included) is searched. It fails before its query at the
    broker (an address nothing answers on, the SASL password in the client config) or,
    with a broker that answers, at the state store (the password in its URL)."""
    address = "127.0.0.1:9" if failing == "broker" else broker.bootstrap_servers
    source = make_spec(workdir, address, topic, WINDOW).to_document()["sources"][0]
    spec = _spec_file(
        workdir,
        "unreachable",
        state_store={"url": _closed_url()},
        sources=[
            {
                **source,
                "connect_timeout_ms": 2_000,
                "client_config": {"sasl.password": SECRET, "sasl.username": "flow"},
            }
        ],
    )
    done = subprocess.run(
        [sys.executable, "-m", "flow_jobs.cli", "-v", "run", str(spec), "--available-now"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    said = {
        "broker": "error: source 'clicks': no Kafka broker answered",
        "state-store": "error: state store:",
    }
    assert said[failing] in done.stderr, done.stderr[-3000:]
    _assert_clean(done.stdout, done.stderr)


def test_lookup_errors_and_plans_never_print_the_password(
    spark: SparkSession, workdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    base = make_spec(workdir, "127.0.0.1:9", "t", WINDOW, name="lookup-secret").to_document()
    base["sources"][0]["client_config"] = {"sasl.jaas.config": f"x password='{SECRET}';"}
    from flow_jobs.spec.models import PipelineSpec

    with_lookup = {
        **base,
        "transform": {
            **base["transform"],
            "sql": "SELECT c.* FROM clicks c LEFT JOIN users u USING (user_id)",
            "lookups": [
                {"name": "users", "kind": "postgres", "url": _closed_url(), "table": "users"}
            ],
        },
    }
    with pytest.raises(Exception) as error:
        PipelineRunner(PipelineSpec.model_validate(with_lookup), spark)
    _assert_clean(str(error.value), repr(error.value), caplog.text)

    runner = PipelineRunner(PipelineSpec.model_validate(base), spark)
    plan = runner.compiled.frame._jdf.queryExecution().toString()
    assert "sasl.jaas.config" in plan or "kafka." in plan or "flow_kafka" in plan
    _assert_clean(plan)
