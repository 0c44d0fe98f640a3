"""Dagster entry point: what ``dg dev`` serves (``[tool.dg.project]`` in
pyproject.toml), and ``dagster dev -w workspace.yaml``. It only assembles.

The pipelines come from the component folder ``assets/defs/``: its ``pipelines``
component takes every ``pipelines/*.toml`` (``FLOW_JOBS_PIPELINES_DIR`` picks another
folder), and a ``defs.yaml`` added beside it adds more (``assets/component.py``). Per
spec: its target and dead-letter table, its checks, a new-offsets
sensor, a monitoring schedule and a schedule where the spec has one
(``assets/factory.py``); each Kafka topic they read is an external asset upstream
of them. Resources default to what the specs say (the embedded state
store when they name none); a deployment sets them from the environment
(``assets/deployment.py``):

* ``FLOW_JOBS_DEPLOYMENT``: ``local`` (default) or ``cluster`` (master and archive required);
* ``FLOW_JOBS_SPARK_MASTER``: the Spark master (default ``local[*]``);
* ``FLOW_JOBS_SPARK_ARCHIVE``: on a cluster, the executors' environment (``flow-jobs pack``);
* ``KAFKA_BOOTSTRAP_SERVERS`` and ``KAFKA_SASL_PASSWORD`` (secret, via ``EnvVar``);
* ``FLOW_STATE_STORE_URL`` (secret, via ``EnvVar``);
* ``FLOW_DELTA_ROOT``: where relative Delta target paths resolve.
"""

from __future__ import annotations

from pathlib import Path

from dagster import Definitions, load_from_defs_folder

from assets.deployment import deployment_resources
from assets.factory import checks_job, with_check_definitions, with_topics
from flow_jobs.settings import Settings

ROOT = Path(__file__).parent
PIPELINES_DIR = Settings.from_env().pipelines_dir or ROOT / "pipelines"

resources = deployment_resources()

defs = Definitions.merge(
    with_topics(with_check_definitions(load_from_defs_folder(path_within_project=ROOT))),
    Definitions(jobs=[checks_job()], resources=resources),
)
