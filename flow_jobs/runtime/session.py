"""SparkSession set-up: one shared session per process, one child session per pipeline."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from flow_jobs.io.kafka_source import KafkaDataSource
from flow_jobs.io.lookup_sources import DeltaTableSource, PostgresTableSource
from flow_jobs.spec.models import SparkSpec

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
    for source in DATA_SOURCES:
        if manager.dataSourceExists(source.name()):
            continue
        python_source = jvm.org.apache.spark.sql.execution.datasources.v2.python
        builder = python_source.UserDefinedPythonDataSource(_wrap_function(sc, source))
        manager.registerDataSource(source.name(), builder)


def build_spark_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "flow-jobs",
) -> SparkSession:
    """The process's SparkSession (``getOrCreate``), with flow-jobs' defaults."""
    # Spark's Python workers run `python3` from PATH unless told otherwise; they need
    # this interpreter's packages (pyarrow, confluent-kafka, flow_jobs).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("FLOW_JOBS_SPARK_MASTER", "local[*]")
    )
    settings = {
        **DEFAULT_CONF,
        # Stateful queries fix their partition count in the checkpoint; a small
        # default suits a few cores (set [spark] shuffle_partitions on a cluster).
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("FLOW_JOBS_SPARK_LOG_LEVEL", "WARN"))
    register_sources(spark)
    return spark


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
}


def pipeline_session(spark: SparkSession, spark_spec: SparkSpec) -> SparkSession:
    """A child session: its own temp views and SQL conf, the shared SparkContext."""
    session = spark.newSession()
    register_sources(session)
    conf = {**PIPELINE_SQL_CONF, **spark_spec.conf}
    if spark_spec.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(spark_spec.shuffle_partitions)
    for key, value in conf.items():
        if session.conf.isModifiable(key):
            session.conf.set(key, value)
        elif spark.sparkContext.getConf().get(key) != value:
            log.warning(
                "[spark.conf] %s is a static setting and the SparkSession already runs; "
                "it applies only when flow-jobs starts the session itself",
                key,
            )
    return session


def session_for(spark_spec: SparkSpec) -> SparkSession:
    """The session the CLI uses: built from the spec's [spark] table."""
    conf = dict(spark_spec.conf)
    if spark_spec.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(spark_spec.shuffle_partitions)
    return build_spark_session(spark_spec.master, conf)
