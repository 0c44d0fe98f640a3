"""Shared fixtures: one SparkSession and one embedded broker per test run."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flow_jobs.runtime.session import build_spark_session
from flow_jobs_dev.broker import EmbeddedBroker
from flow_jobs_dev.service import free_port
from tests.forked_workers import ForkedWorkers
from tests.jvm_classes import JVM_OPTIONS, SHARED_CLASSES

# pytest-xdist runs its workers with COLUMNS=80 for their own reports; the CLI sizes
# its piped tables by $COLUMNS (flow_jobs.tables), so the suite sees what a user's pipe
# sees without it.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


# Every Spark driver JVM the suite starts (the session's, and those of the CLI runs,
# Dagster runs and cluster drivers it starts as processes) compiles with C1 only and
# collects with one thread: its work is many small queries, which C2's compiler threads
# and G1's helpers only add CPU to on two cores (BENCHMARKS.md, "The suite's own JVMs").
# Each maps Spark's classes from the archive `make test` builds (tests/jvm_classes.py),
# where there is one. None of these changes what a query computes. SPARK_SUBMIT_OPTS
# reaches the JVM that spark-submit starts without a "Picked up ..." line on stderr,
# which the CLI tests read.
CLASS_ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    f"{JVM_OPTIONS} {SHARED_CLASSES.format(archive=CLASS_ARCHIVE)}"
    if CLASS_ARCHIVE.exists()
    else JVM_OPTIONS,
)
# Without the suite's archive, the CLI runs it starts would each write one of their own
# into the user's cache as their JVM exits (flow_jobs.runtime.class_archive): not here;
# tests/test_class_archive.py gives its runs a folder of their own.
os.environ.setdefault("FLOW_JOBS_CLASS_ARCHIVE", "off")

# A suite started in the background (as CI may start it) has SIGINT ignored, and every
# process it starts would inherit that: its tests would not see what a user's terminal
# gives them. Python's own handler, as in a foreground run.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The signals a test may leave changed for the tests after it (in this process).
KEPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_kept() -> Iterator[None]:
    """Put back SIGINT's and SIGTERM's handlers as they were. Dagster's in-process
    execution maps SIGTERM to SIGINT's handler and leaves it so: where that was "ignore",
    every process started after inherits an ignored SIGTERM (Spark's standalone JVMs
    then outlived their SIGTERM, 30 s each)."""
    saved = {s: signal.getsignal(s) for s in KEPT_SIGNALS}
    try:
        yield
    finally:
        for number, handler in saved.items():
            if handler is not None and signal.getsignal(number) != handler:
                signal.signal(number, handler)


@pytest.fixture(autouse=True)
def _signals_as_they_were() -> Iterator[None]:
    with signals_kept():
        yield


#: The suite's longest files, longest first (measured: BENCHMARKS.md, "How long make test
#: takes"). ``make test`` hands whole files to its two workers in collection order
#: (``--dist loadfile --no-loadscope-reorder``); started last, one of these kept a worker
#: busy for a minute or more while the other had nothing left. The rest keep their order.
LONGEST_FILES = (
    "test_window_kinds.py",
    "test_cluster.py",
    "test_joins.py",
    "test_combine.py",
    "test_first_hour.py",
    "test_avro_sources.py",
    "test_timers.py",
    "test_demo.py",
    "test_inspect_buffers.py",
    "test_dagster_e2e.py",
    "test_dead_letters.py",
    "test_late_rows.py",
    "test_spark_contracts.py",
    "test_crash_recovery.py",
    "test_state_store.py",
    "test_cli.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


#: The shared session evaluates with Spark's interpreted operators and expressions, not
#: generated code. Its queries are many and small: compiling each one's classes (in the
#: stream thread and again in tasks) cost more than it gave back, 9% of the CPU of the
#: files measured (BENCHMARKS.md, "The shared session interprets"). Spark holds both paths to
#: the same results (its own suite runs each expression both ways). What users run
#: stays covered: every process the suite starts (the CLI, Dagster, the demo, the
#: cluster's driver) generates code as Spark does by default, and the Spark contracts
#: (tests/test_spark_contracts.py) set the default back for themselves (CODEGEN_DEFAULTS).
INTERPRETED = {
    "spark.sql.codegen.wholeStage": "false",
    # internal to Spark, "for tests": NO_CODEGEN skips the expressions' code generation
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
#: Spark's defaults of the two settings above.
CODEGEN_DEFAULTS = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The suite's session. Its queries' planners and state-schema workers are forked
    from a process that has imported them (tests/forked_workers.py) unless
    ``FLOW_TEST_FORKED_WORKERS=0``."""
    forked = None
    if os.environ.get("FLOW_TEST_FORKED_WORKERS", "1") != "0":
        forked = ForkedWorkers(tmp_path_factory.mktemp("forked-workers"))
    try:
        with forked.as_python() if forked else nullcontext():
            session = build_spark_session(
                "local[2]",
                {
                    "spark.sql.shuffle.partitions": "2",
                    "spark.ui.enabled": "false",
                    "spark.driver.memory": "2g",
                    **INTERPRETED,
                },
                app_name="flow-jobs-tests",
            )
        yield session
        session.stop()
    finally:
        if forked:
            forked.close()


@pytest.fixture
def generated_code(spark: SparkSession) -> Iterator[None]:
    """Spark's default code path on the shared session, for a test of Spark itself."""
    for key, value in CODEGEN_DEFAULTS.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in CODEGEN_DEFAULTS:
            spark.conf.unset(key)  # back to the session's INTERPRETED


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


@dataclass(frozen=True)
class MountedStorage:
    """A ``viewfs://`` URI root that Hadoop's view file system maps onto a local folder:
    a checkpoint there goes through Hadoop's ``FileSystem`` as on HDFS or S3 (object
    storage needs connector jars this machine cannot fetch), its files land in
    ``folder``."""

    root: str  # viewfs://<authority>/ckpt
    folder: Path

    def uri(self, name: str) -> str:
        return f"{self.root}/{name}"


@pytest.fixture
def mounted(spark: SparkSession, tmp_path: Path) -> Iterator[MountedStorage]:
    """A fresh mount per test: Hadoop caches a ``FileSystem`` per scheme and authority,
    so each test mounts under an authority of its own, on the SparkContext's Hadoop
    configuration (every session's Hadoop configuration starts from it)."""
    authority = f"t{uuid.uuid4().hex[:12]}"
    folder = tmp_path / "mounted"
    folder.mkdir()
    key = f"fs.viewfs.mounttable.{authority}.link./ckpt"
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set(key, folder.as_uri())
    yield MountedStorage(f"viewfs://{authority}/ckpt", folder)
    conf.unset(key)


@dataclass(frozen=True)
class S3Bucket:
    """A bucket on a real S3-compatible endpoint, and the delta-rs storage options (an IAM
    user's key pair: the endpoint checks every request's signature) that reach it."""

    endpoint: str
    name: str
    storage_options: dict[str, str] = field(repr=False)

    @property
    def secret(self) -> str:
        return self.storage_options["AWS_SECRET_ACCESS_KEY"]

    def uri(self, path: str) -> str:
        return f"s3://{self.name}/{path}"

    def client(self) -> Any:
        """A boto3 S3 client with the same credentials."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.storage_options["AWS_REGION"],
            aws_access_key_id=self.storage_options["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.secret,
        )

    def keys(self, prefix: str) -> list[str]:
        listed = self.client().list_objects_v2(Bucket=self.name, Prefix=prefix)
        return [o["Key"] for o in listed.get("Contents", [])]


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Bucket]:
    """moto's S3-compatible server (``moto.server``, HTTP) on a free loopback port, one
    bucket, and request signing enforced from then on (moto's IAM auth), so a wrong
    secret is refused with 403 as by S3 itself.

    The server runs in a child process, not as ``ThreadedMotoServer`` in this one: a
    deltalake call waiting on an in-process server starves the server's thread
    (measured with deltalake 1.6.6: each such call hung until delta-rs's 180 s retry
    timeout)."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _await_http(f"{endpoint}/moto-api/", server, log)
        admin = {
            "endpoint_url": endpoint,
            "region_name": "us-east-1",
            "aws_access_key_id": "admin",
            "aws_secret_access_key": "admin",
        }
        iam = boto3.client("iam", **admin)
        iam.create_user(UserName="flow-jobs")
        allow_s3 = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(
            UserName="flow-jobs", PolicyName="s3", PolicyDocument=json.dumps(allow_s3)
        )
        key = iam.create_access_key(UserName="flow-jobs")["AccessKey"]
        bucket = "flow-jobs-tests"
        boto3.client("s3", **admin).create_bucket(Bucket=bucket)
        # From now on every request must carry a valid signature of a known key.
        request = urllib.request.Request(
            f"{endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        yield S3Bucket(
            endpoint,
            bucket,
            {
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
                "AWS_ALLOW_HTTP": "true",  # the endpoint is plain HTTP on loopback
            },
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


def _await_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with {process.returncode}: see {log}")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"moto server did not answer on {url}: see {log}") from None
            time.sleep(0.1)


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
