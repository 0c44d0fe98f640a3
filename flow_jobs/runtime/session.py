"""SparkSession set-up: one shared session per process, one child session per pipeline."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from flow_jobs.errors import PlanError
from flow_jobs.io.lookup_sources import DeltaTableSource, PostgresTableSource
from flow_jobs.java import java_class, keep_lookups
from flow_jobs.kafka.source import KafkaDataSource
from flow_jobs.locations import is_uri
from flow_jobs.runtime import class_archive
from flow_jobs.runtime.jvm_output import launch_filtered_gateway
from flow_jobs.runtime.pack import ARCHIVE_ALIAS, PYTHON_NAME
from flow_jobs.settings import Settings
from flow_jobs.spec.models import PipelineSpec, SparkSpec

DATA_SOURCES = (KafkaDataSource, DeltaTableSource, PostgresTableSource)

log = logging.getLogger(__name__)

# py4j logs every JVM command with its arguments at DEBUG, Kafka client secrets passed as
# reader options included: never below INFO, whatever the root logger's level (Dagster
# can capture Python logs at DEBUG).
logging.getLogger("py4j").setLevel(logging.INFO)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

DEFAULT_CONF: dict[str, str] = {
    # Timestamps are UTC instants everywhere: window bounds, Delta columns, logs.
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # PySpark records the Python call site of every DataFrame call for error messages,
    # three JVM round trips a call: ~0.3 s of each run's plan, for call sites that are
    # flow-jobs' own code (the spec's SQL keeps its own error context). PySpark reads
    # the key once per process, at its first DataFrame call.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def register_sources(spark: SparkSession) -> None:
    """Register flow-jobs' Python data sources with this session.

    Seen with PySpark 4.2: ``newSession().dataSource.register`` answers "already exists"
    (it reaches the parent's registration) while the child session's own manager does
    not know the source, so we register with the session's manager directly.
    """
    from pyspark.sql.udf import _wrap_function

    manager = spark._jsparkSession.sessionState().dataSourceManager()
    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None
    python_source = "org.apache.spark.sql.execution.datasources.v2.python"
    for source in DATA_SOURCES:
        if manager.dataSourceExists(source.name()):
            continue
        defined = java_class(jvm, f"{python_source}.UserDefinedPythonDataSource")
        builder = defined(_wrap_function(sc, source))
        manager.registerDataSource(source.name(), builder)


#: An executor's PATH with an archive: its own ``bin`` first (relative: each executor
#: unpacks the archive in its working directory), then the usual system folders.
EXECUTOR_PATH = (
    f"./{ARCHIVE_ALIAS}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)


def archive_conf(archive: str) -> dict[str, str]:
    """The settings that ship ``flow-jobs pack``'s archive to executors and run their
    Python workers from it.

    PySpark's recipe sets ``PYSPARK_PYTHON=./environment/bin/python``; but the driver
    starts Python workers too (to plan our Kafka data source, and to pre-initialize a
    state-API processor), with the same executable, and would look for that relative
    path in its own folder. So the executable is a name, ``flow-jobs-python``, which
    Spark's JVMs resolve through their PATH: an executor's PATH starts with the unpacked
    archive's ``bin`` (where ``flow-jobs pack`` put that name), the driver's with a
    folder where it names this interpreter (``_driver_python_on_path``)."""
    path = Path(archive).expanduser().resolve()
    if not path.is_file():
        raise PlanError(
            "spark.archive", f"{archive!r}: no such file; build it with `flow-jobs pack`"
        )
    return {
        "spark.archives": f"{path.as_uri()}#{ARCHIVE_ALIAS}",
        "spark.executorEnv.PATH": EXECUTOR_PATH,
    }


def _driver_python_on_path() -> None:
    """Name this interpreter ``flow-jobs-python`` on the PATH the driver's JVM starts
    with, and make it the Python of Spark's workers (``PYSPARK_PYTHON``)."""
    digest = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"flow-jobs-{os.getuid()}" / digest
    link = folder / PYTHON_NAME
    # A script, not a symlink: Python finds its virtual environment (pyvenv.cfg) from
    # the path it is started by, which must be the environment's own.
    script = f'#!/bin/sh\nexec "{sys.executable}" "$@"\n'
    if link.is_symlink() or not link.is_file() or link.read_text() != script:
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / f".{PYTHON_NAME}.{os.getpid()}"
        staged.write_text(script)
        staged.chmod(0o755)
        os.replace(staged, link)  # atomic: a concurrent driver sees one or the other
    path = os.environ.get("PATH", "")
    if str(folder) not in path.split(os.pathsep):
        os.environ["PATH"] = f"{folder}{os.pathsep}{path}"
    os.environ["PYSPARK_PYTHON"] = PYTHON_NAME


def _spark_home_without_python_zips() -> None:
    """Point ``SPARK_HOME`` at this PySpark install minus its ``python/lib`` zips, so
    that the Python processes a local Spark starts import PySpark from site-packages.

    Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's
    PYTHONPATH. The zip holds no bytecode, so each fresh process compiles the PySpark
    modules it imports from source: 1.6-1.7 s against 0.5 s from site-packages for the
    process Spark starts to plan a Python data source, once per streaming query
    (measured in BENCHMARKS.md, "Where a small micro-batch's time goes"). The folder
    links every other entry of the install (``bin``, ``jars``, ...), so ``spark-submit``
    and the JVM are the same; only the zips are absent, and Python finds the same PySpark,
    the one this interpreter runs. Not done when the user set ``SPARK_HOME`` (their own
    Spark), nor with an archive (executors take PySpark from that zip: ``runtime.pack``).
    """
    if "SPARK_HOME" in os.environ:
        return
    import pyspark

    install = Path(pyspark.__file__).resolve().parent
    entries = sorted(e.name for e in install.iterdir() if e.name != "python")
    digest = hashlib.sha256("\0".join([str(install), *entries]).encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / f"flow-jobs-{os.getuid()}" / f"spark-home-{digest}"
    if not home.is_dir():  # never changed once made: a running JVM may be using it
        staged = home.with_name(f".{home.name}.{os.getpid()}")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for name in entries:
            (staged / name).symlink_to(install / name)
        try:
            staged.rename(home)
        except OSError:  # a concurrent driver made it first
            shutil.rmtree(staged, ignore_errors=True)
    os.environ["SPARK_HOME"] = str(home)


def _verbose(level: str) -> bool:
    """Whether Spark's log level asks for everything it says (``-v``)."""
    return level.upper() in ("INFO", "DEBUG", "TRACE", "ALL")


#: The driver JVM's log4j2 profile unless Spark's own is asked for (a verbose level).
QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")


def _quiet_start(settings: Mapping[str, str], master: str | None, level: str) -> dict[str, str]:
    """The settings (and environment) that keep a JVM's start-up notes out of a run's
    output: flow-jobs's log4j2 profile (no "Using Spark's default log4j profile", no
    native-hadoop warning), and on a local master the loopback address to bind to (no
    "hostname resolves to a loopback address"). A verbose level keeps Spark's own."""
    if _verbose(level):
        return {}
    if (master or "local[*]").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    option = f"-Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
    given = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" in given:
        return {}  # the user's own profile wins
    return {"spark.driver.extraJavaOptions": f"{given} {option}".strip()}


#: What ``signal.getsignal`` answers: a function, SIG_DFL / SIG_IGN, or None (set in C).
InterruptHandler = Callable[[int, FrameType | None], Any] | int | None


def _keep_interrupt_handler(handler: InterruptHandler) -> None:
    """Put back the SIGINT handler that PySpark's new SparkContext replaced with its own.

    PySpark's handler cancels every job through py4j from inside the signal handler,
    which runs on the main thread between two bytecodes: when the main thread is itself
    in a py4j call (a run awaiting its query, ``inspect`` reading state), the handler's
    call reads that thread's connection again, and Ctrl-C prints three tracebacks
    ("reentrant call", a Py4JError, KeyboardInterrupt) instead of stopping. flow-jobs'
    entry points answer SIGINT themselves: ``flow-jobs run`` and the demo stop after the
    batch in flight, a Dagster step on Dagster's interrupt."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return  # set outside Python (nothing to put back), or PySpark installed none
    signal.signal(signal.SIGINT, handler)


def build_spark_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "flow-jobs",
    archive: str | None = None,
) -> SparkSession:
    """The process's SparkSession (``getOrCreate``), with flow-jobs' defaults; with
    ``archive`` (or ``FLOW_JOBS_SPARK_ARCHIVE``), executors run the packed environment."""
    env = Settings.from_env()
    archive = archive or env.spark_archive
    if archive and SparkContext._active_spark_context is None:
        _driver_python_on_path()
    master = master or env.spark_master or "local[*]"
    if not archive and master.startswith("local") and SparkContext._active_spark_context is None:
        _spark_home_without_python_zips()
    # Spark's Python workers run `python3` from PATH unless told otherwise; they need
    # this interpreter's packages (pyarrow, confluent-kafka, flow_jobs).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Every Python process this driver's JVM starts (each query's source planner; in
    # local mode the workers too) imports numpy, whose OpenBLAS starts a thread per core
    # at import, and their start-up is CPU a few cores share (BENCHMARKS.md, "The
    # planners' numpy"); nothing of flow-jobs multiplies matrices. One thread, as Spark
    # gives its workers OMP_NUM_THREADS = spark.task.cpus. (This process has its numpy.)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    builder = SparkSession.builder.appName(app_name).master(master)
    settings = {
        **DEFAULT_CONF,
        # Stateful queries fix their partition count in the checkpoint; a small
        # default suits a few cores (set [spark] shuffle_partitions on a cluster).
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        **(archive_conf(archive) if archive else {}),
        **(conf or {}),
    }
    starting = SparkContext._active_spark_context is None
    if starting:
        settings.update(_quiet_start(settings, master, env.spark_log_level))
        shared = class_archive.java_options(env.class_archive, os.environ, settings)
        if shared:
            given = settings.get("spark.driver.extraJavaOptions", "")
            settings["spark.driver.extraJavaOptions"] = f"{given} {shared}".strip()
        if not _verbose(env.spark_log_level):
            conf = SparkConf().setAll(list(settings.items()))
            launch_filtered_gateway(conf.setAppName(app_name).setMaster(master))
    for key, value in settings.items():
        builder = builder.config(key, value)
    interrupt = signal.getsignal(signal.SIGINT)
    spark = builder.getOrCreate()
    if starting:
        _keep_interrupt_handler(interrupt)
    keep_lookups(spark.sparkContext._jvm)
    spark.sparkContext.setLogLevel(env.spark_log_level)
    _quiet_query_context_logs(env.spark_log_level)
    register_sources(spark)
    return spark


def _quiet_query_context_logs(level: str) -> None:
    """PySpark logs each analysis error it raises as a JSON record with the JVM's whole
    stack trace on stderr (its query-context loggers) before the caller sees the error;
    flow-jobs reports that error in one line naming the key, so these records go unless
    a verbose level asks for Spark's own logs."""
    if _verbose(level):
        return
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


#: SQL settings of every pipeline session, before the spec's [spark] conf. ANSI mode
#: (Spark 4's default) turns one bad value in [transform].sql (a string that does not
#: parse as a timestamp, a cast that does not fit) into a failed query, and the same
#: offsets fail again on every restart: a poison pill. Without it the value is NULL,
#: and a NULL event time is a dead letter (aggregates use try_sum / try_avg either way).
PIPELINE_SQL_CONF: dict[str, str] = {
    "spark.sql.ansi.enabled": "false",
    # Plans (explain, the UI, errors) show data source options; every librdkafka client
    # option (sasl.jaas.config, ssl.key.password, ...) is masked there, like URLs.
    "spark.sql.redaction.options.regex": r"(?i)url|^kafka\.",
    # Spark disables adaptive execution for streaming queries anyway, with a warning at
    # every start (two: "not supported in streaming", "not supported in stateful
    # workloads"); off from the start, nothing changes and nothing is said.
    "spark.sql.adaptive.enabled": "false",
}


#: Spark's checkpoint writer (offset and commit logs, state-store files) for a checkpoint
#: on a local or mounted file system. Spark's default writes through Hadoop's
#: ``FileContext``, whose local file system asks for each path's link status by
#: starting a ``readlink`` process (Hadoop's native library is not in the PySpark
#: wheel): ~32 ms per file, four or more files per micro-batch. Through ``FileSystem``
#: the same atomic write (a temporary file, then a rename) takes ~9 ms, measured here
#: (BENCHMARKS.md, "Where a small micro-batch's time goes"). A checkpoint has one
#: writer (the pipeline's run lock), which is all this manager needs.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def pipeline_session(
    spark: SparkSession, spark_spec: SparkSpec, local_checkpoint: bool = False
) -> SparkSession:
    """A child session: its own temp views and SQL conf, the shared SparkContext; with
    ``local_checkpoint`` (a plain path or ``file://``), the checkpoint writer for it."""
    session = spark.newSession()
    register_sources(session)
    local = {CHECKPOINT_FILE_MANAGER: LOCAL_CHECKPOINT_FILE_MANAGER} if local_checkpoint else {}
    conf = {**PIPELINE_SQL_CONF, **local, **spark_spec.conf}
    if spark_spec.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(spark_spec.shuffle_partitions)
    for key, value in conf.items():
        if _session_setting(session, key):
            session.conf.set(key, value)
        elif spark.sparkContext.getConf().get(key) != value:
            log.warning(
                "[spark.conf] %s is a static setting and the SparkSession already runs; "
                "it applies only when flow-jobs starts the session itself",
                key,
            )
    return session


def _session_setting(session: SparkSession, key: str) -> bool:
    """Whether a running session takes ``key`` for itself: a SQL setting that is not
    static. ``isModifiable`` also says no to SQL settings Spark registers as internal
    (the checkpoint writer, the RocksDB ones), which a session does take: its queries
    read them from its SQL conf and the Hadoop configuration it fills."""
    if session.conf.isModifiable(key):
        return True
    jvm = session.sparkContext._jvm
    assert jvm is not None
    static = java_class(jvm, "org.apache.spark.sql.internal.SQLConf").isStaticConfigKey(key)
    return key.startswith("spark.sql.") and not static


def session_for(spark_spec: SparkSpec) -> SparkSession:
    """The session the CLI uses: built from the spec's [spark] table."""
    conf = dict(spark_spec.conf)
    if spark_spec.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(spark_spec.shuffle_partitions)
    return build_spark_session(spark_spec.master, conf, archive=spark_spec.archive)


def refuse_unshared_paths(spec: PipelineSpec, master: str) -> None:
    """On a cluster, refuse a spec whose executors would write or read a plain path.

    Executors write the query's state under the checkpoint and read ``[[lookups]]``
    Delta tables; a plain path there means each node's own disk, where state would
    scatter and a restarted task would not find it. As a URI (``file:///`` for a mount
    every node shares, ``hdfs://``, ``s3a://``) the spec says the storage is shared.
    The dead-letter table is written by the driver (dead letters reach it with the
    micro-batch), and so is a target at a plain path: any path works for them (a Delta
    target's executors write a batch's files only to a URI there: ``plain_paths_shared``)."""
    if master.startswith("local"):
        return
    plain = [("checkpoint.location", spec.checkpoint_location())] + [
        (f"transform.lookups.{lookup.name}.path", lookup.path)
        for lookup in spec.transform.lookups
        if lookup.path is not None
    ]
    for key, location in plain:
        if not is_uri(location):
            raise PlanError(
                key,
                f"{location!r} is a plain path, and on a cluster (master {master}) "
                "executors use it from their own machines; name storage every node "
                "shares as a URI: file:///mnt/shared/... for a shared mount, hdfs://..., "
                "s3a://...",
            )


def plain_paths_shared(master: str) -> bool:
    """Whether every process of the session reaches a plain path as the driver does: a
    local master's executors run on the driver's machine."""
    return master.startswith("local")
