"""Spark's checkpoint as files, wherever it lives: a local path or any URI Spark writes.

flow-jobs reads what Spark keeps in a query's checkpoint (the offset log
``offsets/<batch id>`` with its ``batchWatermarkMs`` / ``batchTimestampMs`` line, the
commit log ``commits/``, the query's ``metadata``) and keeps marker files of its own
there (``flow-jobs-pipeline.json``, ``flow_pre_aggregate``); a reset moves the whole
checkpoint aside. ``CheckpointFiles`` is that handful of operations over a checkpoint's
root, so a URI behaves exactly like a local path. Spark's logs are listed
(``logged_batches``) and an offset-log entry parsed (``read_offset_entry``) here only,
and the file where the driver tells the readers which sources are idle
(``idle_file``) is placed here:

* a plain path or a ``file://`` URI goes through the local file system (no JVM needed:
  the CLI's ``reset`` and ``inspect`` run without a SparkSession there);
* any other URI (``hdfs://``, ``s3a://``, ``abfss://``, ``viewfs://``…) goes through
  Hadoop's ``FileSystem`` in Spark's JVM, with the Hadoop configuration Spark's own
  checkpoint uses: a session's ``sessionState().newHadoopConf()``, the SparkContext's
  Hadoop configuration (``spark.hadoop.*`` given when the session was built) plus the
  session's SQL settings (un-prefixed Hadoop keys among them). Without a session at hand
  it is the JVM's default session's: a pipeline's session
  (``flow_jobs.runtime.session.pipeline_session``) sets only SQL settings Spark lets a
  session change, never a Hadoop key, so for a file system both are the same.

Spark's Kafka reader plans micro-batches in a process with no py4j gateway: for a remote
checkpoint it reads these files through the driver's JVM
(``flow_jobs.io.checkpoint_gateway``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from flow_jobs.locations import local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The spec key every error about the checkpoint's storage names.
LOCATION_KEY = "checkpoint.location"

_T = TypeVar("_T")


class CheckpointFiles(ABC):
    """A checkpoint's root: names are relative to it (``"offsets/3"``). A missing file or
    folder raises ``FileNotFoundError``; any other failure an ``OSError`` naming the
    location, never a silent answer."""

    def __init__(self, location: str) -> None:
        self.location = location

    @abstractmethod
    def names(self, folder: str) -> list[str]:
        """The names in sub-folder ``folder``."""

    @abstractmethod
    def read_text(self, name: str) -> str:
        """A whole (small) file, as UTF-8."""

    @abstractmethod
    def exists(self, name: str = "") -> bool:
        """Whether ``name`` (the root itself when empty) exists."""

    @abstractmethod
    def write_text(self, name: str, text: str) -> None:
        """Write a whole file, creating its folders: into a staging file first, renamed
        over ``name`` once complete, so a reader never sees half of it."""

    @abstractmethod
    def move_aside(self, suffix: str) -> str | None:
        """Rename the whole checkpoint, beside it, to its name followed by ``suffix``; its
        new location, or None when there is no checkpoint to move."""

    def __str__(self) -> str:
        return self.location

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"


class LocalCheckpointFiles(CheckpointFiles):
    """A checkpoint on this machine's file system (a plain path or ``file://``)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        path = local_path(location)
        assert path is not None, location
        self.root = Path(path)

    def __str__(self) -> str:
        return str(self.root.resolve())

    def names(self, folder: str) -> list[str]:
        return [p.name for p in (self.root / folder).iterdir()]

    def read_text(self, name: str) -> str:
        return (self.root / name).read_text(encoding="utf-8")

    def exists(self, name: str = "") -> bool:
        return (self.root / name).exists()

    def write_text(self, name: str, text: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        staging.write_text(text, encoding="utf-8")
        os.replace(staging, path)

    def move_aside(self, suffix: str) -> str | None:
        root = self.root.resolve()
        if not root.exists():
            return None
        retired = root.with_name(root.name + suffix)
        shutil.move(str(root), str(retired))
        return str(retired)


class HadoopCheckpointFiles(CheckpointFiles):
    """A checkpoint behind any URI Spark writes, through Hadoop's ``FileSystem`` in a
    Spark JVM (``jvm``: a py4j view of it; ``conf``: the Hadoop configuration)."""

    def __init__(self, location: str, jvm: Any, conf: Any) -> None:
        super().__init__(location)
        self._jvm = jvm
        self._root = self._call("parse it", lambda: jvm.org.apache.hadoop.fs.Path(location))
        self._fs = self._call(
            "open its file system (is the scheme's Hadoop connector, e.g. hadoop-aws for "
            "s3a://, on Spark's classpath?)",
            lambda: self._root.getFileSystem(conf),
        )

    def _path(self, name: str) -> Any:
        if not name:
            return self._root
        return self._jvm.org.apache.hadoop.fs.Path(self._root, name)

    def _call(self, what: str, call: Callable[[], _T], name: str = "") -> _T:
        """A JVM call; a Java ``FileNotFoundException`` becomes ``FileNotFoundError``,
        any other JVM error an ``OSError`` naming the location and the cause."""
        from py4j.protocol import Py4JError, Py4JJavaError

        where = f"{self.location}/{name}" if name else self.location
        try:
            return call()
        except Py4JJavaError as e:
            cause = e.java_exception
            if self._jvm.py4j.reflection.TypeUtil.isInstanceOf(
                "java.io.FileNotFoundException", cause
            ):
                raise FileNotFoundError(errno.ENOENT, "no such file or folder", where) from None
            message = f"{cause.getClass().getName()}: {cause.getMessage()}"
            raise OSError(f"{LOCATION_KEY} {where}: cannot {what}: {message}") from None
        except Exception as e:
            # py4j's own errors (a lost connection), and the JVM errors PySpark's
            # handler turns into its own types (IllegalArgumentException for a URI
            # Hadoop rejects); anything else is ours and goes on as it is.
            if not isinstance(e, Py4JError) and not type(e).__module__.startswith("pyspark"):
                raise
            first = (str(e).strip().splitlines() or [repr(e)])[0]
            raise OSError(f"{LOCATION_KEY} {where}: cannot {what}: {first}") from None

    def names(self, folder: str) -> list[str]:
        def listing() -> list[str]:
            # One call per entry: py4j hands a Java array over element by element (an
            # offset log keeps Spark's minBatchesToRetain, 100, entries).
            return [status.getPath().getName() for status in self._fs.listStatus(path)]

        path = self._path(folder)
        return self._call("list it", listing, folder)

    def read_text(self, name: str) -> str:
        def read() -> bytes:
            stream = self._fs.open(self._path(name))
            try:
                data = self._jvm.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream)
            finally:
                stream.close()
            return bytes(data)

        return self._call("read it", read, name).decode("utf-8")

    def exists(self, name: str = "") -> bool:
        return bool(self._call("look it up", lambda: self._fs.exists(self._path(name)), name))

    def write_text(self, name: str, text: str) -> None:
        target = self._path(name)
        staging = self._jvm.org.apache.hadoop.fs.Path(
            target.getParent(), f".{target.getName()}.{uuid.uuid4().hex}.tmp"
        )

        def write() -> None:
            out = self._fs.create(staging, False)
            try:
                out.write(bytearray(text.encode("utf-8")))
            finally:
                out.close()
            if self._fs.rename(staging, target):
                return
            # Hadoop's rename does not replace a file (HDFS, the local file system):
            # the one there goes first, so a reader may briefly find none.
            self._fs.delete(target, False)
            if not self._fs.rename(staging, target):
                self._fs.delete(staging, False)
                raise OSError(f"{LOCATION_KEY} {self.location}/{name}: rename refused")

        self._call("write it", write, name)

    def move_aside(self, suffix: str) -> str | None:
        if not self.exists():
            return None
        parent, name = self._root.getParent(), self._root.getName()
        retired = self._jvm.org.apache.hadoop.fs.Path(parent, name + suffix)
        if not self._call("move it", lambda: self._fs.rename(self._root, retired)):
            raise OSError(
                f"{LOCATION_KEY} {self.location}: Hadoop's file system refused to rename "
                f"it to {retired.toString()} (is the name taken?)"
            )
        return str(retired.toString())


def default_hadoop_conf(jvm: Any) -> Any:
    """The Hadoop configuration of the JVM's default session (the one ``getOrCreate``
    built), else the SparkContext's: what a pipeline's query writes its checkpoint with
    (module note)."""
    session = jvm.org.apache.spark.sql.SparkSession.getDefaultSession()
    if session.isDefined():
        return session.get().sessionState().newHadoopConf()
    return jvm.org.apache.spark.SparkContext.getOrCreate().hadoopConfiguration()


@dataclass(frozen=True)
class OffsetLogEntry:
    """One entry of Spark's offset log, ``offsets/<batch id>``: a version line, the
    batch's metadata (``batchWatermarkMs``: the watermark the batch runs under;
    ``batchTimestampMs``: its ``current_timestamp()``), then one line per source in the
    plan's order, each its offsets as JSON or ``-`` (``None`` here) for a source with
    none yet. The one parser of that layout, for the reader and the driver alike."""

    metadata: dict[str, Any]
    sources: tuple[Any, ...]

    @property
    def watermark_ms(self) -> int:
        return int(self.metadata.get("batchWatermarkMs") or 0)

    @property
    def timestamp_ms(self) -> int | None:
        stamp = self.metadata.get("batchTimestampMs")
        return int(stamp) if isinstance(stamp, int) else None


def idle_file(checkpoint: str) -> str:
    """Where the driver publishes a query's idle sources for its Kafka readers (JSON):
    beside the checkpoint's folders where it is local, else in the temp folder."""
    folder = local_path(checkpoint)
    if folder is None:
        digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
        folder = os.path.join(tempfile.gettempdir(), "flow-jobs-idle", digest)
    return os.path.join(folder, "flow_idle_sources.json")


def logged_batches(files: CheckpointFiles, log: str) -> list[int]:
    """The micro-batch ids in one of Spark's logs (``offsets``: planned, ``commits``:
    committed), ascending; raises ``FileNotFoundError`` where the log is not there yet."""
    return sorted(int(n) for n in files.names(log) if n.isdigit())


def read_offset_entry(files: CheckpointFiles, batch: int) -> OffsetLogEntry | None:
    """Micro-batch ``batch``'s offset log entry; None when there is none (never written,
    or purged: Spark keeps the last ``minBatchesToRetain``) or it is cut short."""
    if batch < 0:
        return None
    try:
        lines = files.read_text(f"offsets/{batch}").splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 2:
        return None
    sources = tuple(None if line.strip() in ("", "-") else json.loads(line) for line in lines[2:])
    return OffsetLogEntry(json.loads(lines[1]), sources)


def checkpoint_files(location: str, spark: SparkSession | None = None) -> CheckpointFiles:
    """The files of the checkpoint at ``location``: local ones directly, any other URI
    through the Spark JVM of ``spark`` (with that session's Hadoop configuration) or of
    this process's SparkContext (with the default session's)."""
    if local_path(location) is not None:
        return LocalCheckpointFiles(location)
    if spark is not None:
        jvm = spark.sparkContext._jvm
        return HadoopCheckpointFiles(
            location, jvm, spark._jsparkSession.sessionState().newHadoopConf()
        )
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None or context._jvm is None:
        raise OSError(
            f"{LOCATION_KEY} {location}: a checkpoint behind a URI is read through "
            "Spark's Hadoop FileSystem, and this process runs no SparkSession"
        )
    return HadoopCheckpointFiles(location, context._jvm, default_hadoop_conf(context._jvm))
