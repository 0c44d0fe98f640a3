"""The driver's py4j gateway, shared with Spark's Kafka reader for a remote checkpoint.

Spark's Kafka reader plans micro-batches in a Python process of its own, spawned by the
driver's JVM, with no py4j gateway. For a remote checkpoint the run publishes the
driver's gateway (port and auth token) in a file only the user can read, keyed by the
checkpoint (``publish_driver_gateway``), and the reader connects to it
(``ReaderCheckpoint``), so both read the same files through the same JVM. It is apart
from ``flow_jobs.io.checkpoint_files`` (the files themselves, local or through Hadoop)
because it is a different concern: handing a secret between two processes, with the
folder permissions and the py4j logging that keep the token to this user.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import stat
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flow_jobs.io.checkpoint_files import (
    LOCATION_KEY,
    CheckpointFiles,
    HadoopCheckpointFiles,
    LocalCheckpointFiles,
    default_hadoop_conf,
)
from flow_jobs.locations import local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _private_folder() -> Path:
    """``<temp>/flow-jobs-<uid>/gateway``, created 0700; refused where someone else owns
    it or another user may write it (the files in it hold the driver's auth token)."""
    parent = Path(tempfile.gettempdir()) / f"flow-jobs-{os.getuid()}"
    folder = parent / "gateway"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (parent, folder):
        info = path.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise PermissionError(f"{path}: not a folder of this user's; remove it")
        if info.st_mode & 0o022:
            raise PermissionError(f"{path}: other users may write in it; chmod go-w it")
    folder.chmod(0o700)
    return folder


def gateway_file(location: str) -> Path:
    """Where the run publishes its driver's gateway for the checkpoint at ``location``."""
    digest = hashlib.sha256(location.encode()).hexdigest()[:16]
    return _private_folder() / f"{digest}.json"


def publish_driver_gateway(spark: SparkSession, location: str) -> Path | None:
    """Before a query on a remote checkpoint starts: the driver's py4j gateway (port and
    auth token) in a file only this user reads, for the Kafka reader's planning process
    (``ReaderCheckpoint``). None for a local checkpoint (the reader opens its files)."""
    if local_path(location) is not None:
        return None
    params = spark.sparkContext._gateway.gateway_parameters
    path = gateway_file(location)
    staging = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}")
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"port": params.port, "auth_token": params.auth_token}, f)
    os.replace(staging, path)
    return path


def withdraw_driver_gateway(location: str) -> None:
    """Once the query has stopped: the gateway's file goes (its token with it)."""
    if local_path(location) is not None:
        return
    with contextlib.suppress(FileNotFoundError):
        gateway_file(location).unlink()


def _keep_py4j_quiet() -> None:
    # py4j logs every command it sends at DEBUG, the auth command with its token among
    # them: never below INFO in a process that connects with one.
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver"):
        logger = logging.getLogger(name)
        if logger.level < logging.INFO:
            logger.setLevel(logging.INFO)


class ReaderCheckpoint:
    """The checkpoint's files as Spark's Kafka reader plans a batch, in the Python process
    the driver's JVM spawns for it: a local checkpoint directly; a remote one through the
    driver's JVM, over its py4j gateway (``publish_driver_gateway``), connected once, on
    first use, and closed by ``close`` (the reader's ``stop``)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._files: CheckpointFiles | None = None
        self._gateway: Any = None

    def files(self) -> CheckpointFiles:
        if self._files is None:
            if local_path(self.location) is not None:
                self._files = LocalCheckpointFiles(self.location)
            else:
                self._files = self._through_the_driver()
        return self._files

    def _through_the_driver(self) -> CheckpointFiles:
        from py4j.java_gateway import GatewayParameters, JavaGateway

        path = gateway_file(self.location)
        try:
            published = json.loads(path.read_text(encoding="utf-8"))
            port, token = int(published["port"]), str(published["auth_token"])
        except (OSError, ValueError, KeyError) as e:
            raise OSError(
                f"{LOCATION_KEY} {self.location}: the Kafka reader reads this checkpoint "
                "through the driver's JVM, and no run published its gateway "
                f"({type(e).__name__}); start queries on a remote checkpoint with "
                "flow-jobs' runner"
            ) from None
        _keep_py4j_quiet()
        gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=token, auto_convert=True)
        )
        try:
            files = HadoopCheckpointFiles(
                self.location, gateway.jvm, default_hadoop_conf(gateway.jvm)
            )
        except BaseException:
            gateway.close()
            raise
        self._gateway = gateway
        return files

    def close(self) -> None:
        """Close this process's connection (never the driver's gateway itself)."""
        gateway, self._gateway, self._files = self._gateway, None, None
        if gateway is not None:
            gateway.close()
