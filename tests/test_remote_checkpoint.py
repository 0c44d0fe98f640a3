"""A checkpoint behind a URI keeps every guarantee a local one gives (issue 29, item 3).

flow-jobs reads Spark's offset log, commit log and its own marker files from the
checkpoint (``flow_jobs.io.checkpoint_files``). Here the checkpoint is a ``viewfs://``
URI (the ``mounted`` fixture: Hadoop's view file system over a local folder), which
goes through Hadoop's ``FileSystem`` as ``hdfs://`` or ``s3a://`` would: the ledger's
watermarks and offsets, late rows stamped and dead-lettered, pre-aggregation's mark,
the checkpoint's claim, and a reset that never overwrites a window an earlier lineage
closed (docs/spec-reference.md, ``[checkpoint]``) — each compared with a local path.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flow_jobs.io.checkpoint_files import (
    HadoopCheckpointFiles,
    LocalCheckpointFiles,
    checkpoint_files,
    gateway_file,
    publish_driver_gateway,
    withdraw_driver_gateway,
)
from tests.conftest import MountedStorage

# -- the files -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "viewfs"])
def test_checkpoint_files_behave_alike_on_a_path_and_behind_a_uri(
    where: str, spark: SparkSession, mounted: MountedStorage, workdir: Path
) -> None:
    if where == "local":
        folder = workdir / "local" / "q1"
        files = checkpoint_files(str(folder))
        assert isinstance(files, LocalCheckpointFiles)
        retired_at = str(folder.parent / "q1.v0-x")
    else:
        folder = mounted.folder / "q1"
        files = checkpoint_files(mounted.uri("q1"), spark)
        assert isinstance(files, HadoopCheckpointFiles)
        retired_at = mounted.uri("q1.v0-x")

    assert not files.exists()
    with pytest.raises(FileNotFoundError):
        files.names("offsets")
    with pytest.raises(FileNotFoundError):
        files.read_text("offsets/0")
    assert files.move_aside(".v0-x") is None  # nothing to move

    files.write_text("offsets/0", 'v1\n{"batchWatermarkMs":0}\n')
    files.write_text("offsets/1", 'v1\n{"batchWatermarkMs":5}\n')
    files.write_text("marker.json", "first\n")
    files.write_text("marker.json", "é, replaced\n")  # over the one there
    assert files.exists() and files.exists("offsets/1") and not files.exists("offsets/2")
    assert sorted(files.names("offsets")) == ["0", "1"]
    assert files.read_text("offsets/1") == 'v1\n{"batchWatermarkMs":5}\n'
    assert files.read_text("marker.json") == "é, replaced\n"
    # The files are where Spark writes the checkpoint, and no staging file is left.
    assert (folder / "marker.json").read_text(encoding="utf-8") == "é, replaced\n"
    assert sorted(n for n in os.listdir(folder) if not n.startswith(".")) == [
        "marker.json",
        "offsets",
    ]
    # Without a session at hand, the default session's Hadoop configuration: the same.
    assert checkpoint_files(files.location).read_text("offsets/0").startswith("v1\n")

    assert files.move_aside(".v0-x") == retired_at
    assert not folder.exists()
    assert (folder.parent / "q1.v0-x" / "offsets" / "1").is_file()


def test_a_missing_file_system_is_an_error_naming_the_key_not_a_missing_file(
    spark: SparkSession,
) -> None:
    """``s3a://`` without Hadoop's S3A connector (not on this machine's Spark): an
    OSError naming ``checkpoint.location``, never FileNotFoundError (which the callers
    take for "no such batch yet")."""
    uri = "s3a://bucket/flow/cp"
    with pytest.raises(OSError) as failed:
        checkpoint_files(uri, spark).read_text("offsets/0")
    assert not isinstance(failed.value, FileNotFoundError)
    assert f"checkpoint.location {uri}" in str(failed.value)


def test_the_reader_process_reads_a_remote_checkpoint_through_the_published_gateway(
    spark: SparkSession, mounted: MountedStorage
) -> None:
    """The Kafka reader plans in a Python process of its own: it reaches the driver's
    JVM through the gateway the run publishes, in a file only this user reads; py4j's
    debug log (which echoes every command) never shows the token."""
    uri = mounted.uri("q1")
    checkpoint_files(uri, spark).write_text("offsets/0", 'v1\n{"batchWatermarkMs":7}\n')
    path = publish_driver_gateway(spark, uri)
    assert path == gateway_file(uri)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = json.loads(path.read_text())["auth_token"]
    child = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)\n"
        "from flow_jobs.io.checkpoint_files import ReaderCheckpoint\n"
        f"reader = ReaderCheckpoint({uri!r})\n"
        "print(reader.files().read_text('offsets/0'), end='')\n"
        "reader.close()\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", child], capture_output=True, text=True, timeout=120
        )
    finally:
        withdraw_driver_gateway(uri)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == 'v1\n{"batchWatermarkMs":7}\n'
    assert token not in done.stdout + done.stderr
    assert not path.exists()
