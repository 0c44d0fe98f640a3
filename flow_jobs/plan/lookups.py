"""``[[transform.lookups]]``: static tables for the SQL pre-stage, refreshed on a timer.

Each lookup is a batch DataFrame registered as a view under its name, for
``[transform].sql`` to join (a stream-static join). Spark re-executes a static side
for every micro-batch; a lookup is cached so it is read once, then re-read once
``refresh_interval_ms`` has passed (``0``: not cached, read by every micro-batch). The
runner refreshes on the driver, on its own clock (Spark plans each micro-batch, cached
data included, before the sink runs): micro-batches planned after a refresh see it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from flow_jobs.errors import PlanError
from flow_jobs.io.lookup_sources import (
    DELTA_FORMAT,
    POSTGRES_FORMAT,
    delta_schema,
    postgres_schema,
)
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import LookupSpec

log = logging.getLogger(__name__)


@dataclass
class Lookup:
    spec: LookupSpec
    frame: DataFrame
    #: When the cached snapshot's read began: it holds the table as of at least then.
    refreshed_at: float = field(default_factory=time.monotonic)

    @property
    def cached(self) -> bool:
        return self.spec.refresh_interval_ms > 0

    def describe(self) -> list[PlanLine]:
        spec = self.spec
        where = spec.table if spec.kind == "postgres" else spec.path
        read = (
            f"cached, re-read by the driver once {spec.refresh_interval_ms} ms have passed"
            if self.cached
            else "not cached: every micro-batch reads it"
        )
        reader = {
            "delta": f"{DELTA_FORMAT}, a Python data source over deltalake",
            "postgres": f"{POSTGRES_FORMAT}, a Python data source over psycopg",
        }.get(spec.kind, f"Spark's {spec.kind} reader")
        return [
            PlanLine(
                f"lookup {spec.name} ({spec.kind})",
                f"a batch DataFrame of {where} ({reader}), {read}; a stream-static join in the SQL",
            )
        ]

    def refresh_if_due(self, spark: SparkSession) -> bool:
        if not self.cached:
            return False
        if (time.monotonic() - self.refreshed_at) * 1000 < self.spec.refresh_interval_ms:
            return False
        started = time.monotonic()
        self.frame.unpersist(blocking=True)
        if self.spec.kind in ("csv", "parquet") and self.spec.path:
            spark.catalog.refreshByPath(self.spec.path)  # new files, not just new contents
        rows = self.frame.cache().count()
        self.refreshed_at = started
        log.info("lookup %s refreshed: %s rows", self.spec.name, rows)
        return True


def read_lookup(spark: SparkSession, spec: LookupSpec, index: int) -> DataFrame:
    key = f"transform.lookups[{index}]"
    try:
        if spec.kind == "parquet":
            return spark.read.options(**spec.options).parquet(spec.path)
        if spec.kind == "csv":
            reader = spark.read.options(**{"header": "true", **spec.options})
            if spec.schema_ddl:
                return reader.schema(spec.schema_ddl).csv(spec.path)
            return reader.option("inferSchema", "true").csv(spec.path)
        if spec.kind == "delta":
            assert spec.path is not None
            return (
                spark.read.format(DELTA_FORMAT)
                .schema(delta_schema(spec.path))
                .option("path", spec.path)
                .load()
            )
        assert spec.url is not None and spec.table is not None
        url = spec.url.get_secret_value()
        return (
            spark.read.format(POSTGRES_FORMAT)
            .schema(postgres_schema(url, spec.table))
            .option("url", url)
            .option("table", spec.table)
            .load()
        )
    except AnalysisException as e:
        raise PlanError(
            f"{key}.path", f"cannot read {spec.kind} {spec.path}: {e.getMessage()}"
        ) from None
    except Exception as e:
        where = "table" if spec.kind == "postgres" else "path"
        raise PlanError(f"{key}.{where}", f"cannot read the {spec.kind} lookup: {e}") from None


def register_lookups(spark: SparkSession, specs: list[LookupSpec]) -> list[Lookup]:
    lookups = []
    for i, spec in enumerate(specs):
        frame = read_lookup(spark, spec, i)
        lookup = Lookup(spec, frame)
        if lookup.cached:
            frame.cache().count()  # read now: a broken lookup fails the start, not a batch
        frame.createOrReplaceTempView(spec.name)
        lookups.append(lookup)
    return lookups
