"""The PySpark ``DataSource`` for ``format("flow_kafka")``: as thin as PySpark's own
examples."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from flow_jobs.formats.framing import spark_ddl
from flow_jobs.kafka.combine import PARTIAL, CombinePlan, partial_type
from flow_jobs.kafka.json_decode import arrow_schema
from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.partitions import Offsets
from flow_jobs.kafka.planning import KafkaStreamReader
from flow_jobs.kafka.schema import (
    CORRUPT_RECORD,
    DECODED,
    KAFKA_COLUMNS_DDL,
    SOURCE_FORMAT,
    UNDECODED,
)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("flow_kafka").option("topic", ...)...``"""

    @classmethod
    def name(cls) -> str:
        return SOURCE_FORMAT

    def schema(self) -> str:
        reader = self.options.get("reader_schema")
        if reader:  # a registry format (flow_jobs.formats)
            from flow_jobs.formats import format_module

            payload = format_module(self.options["payload_format"]).payload_schema(reader)
            decoded = spark_ddl(pa.struct([*payload, pa.field(CORRUPT_RECORD, pa.string())]))
            ddl = f"{KAFKA_COLUMNS_DDL}, {DECODED} {decoded}, {UNDECODED} BOOLEAN"
            return self._with_partial(ddl, payload)
        payload = self.options.get("json_schema")
        if not payload:
            return KAFKA_COLUMNS_DDL
        fields = ", ".join(
            f"{_quote(f['name'])}: {_DDL_TYPES[f['type']]}" for f in json.loads(payload)["fields"]
        )
        ddl = (
            f"{KAFKA_COLUMNS_DDL}, {DECODED} STRUCT<{fields}, {CORRUPT_RECORD}: STRING>, "
            f"{UNDECODED} BOOLEAN"
        )
        schema = arrow_schema(payload)
        assert schema is not None, "the reader decodes JSON payloads Arrow reads"
        return self._with_partial(ddl, schema)

    def _with_partial(self, ddl: str, payload: pa.Schema) -> str:
        """The reader's schema with the partial aggregates' column, where it folds."""
        combine = self.options.get("combine")
        if not combine:
            return ddl
        partial = partial_type(CombinePlan.from_json(combine), payload)
        return f"{ddl}, {PARTIAL} {spark_ddl(partial)}"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaSourceOptions.from_options(dict(self.options)))


#: Spark's JSON type names of the types Arrow decodes (``json_decode``), as DDL.
_DDL_TYPES = {
    "string": "STRING",
    "long": "BIGINT",
    "integer": "INT",
    "short": "SMALLINT",
    "byte": "TINYINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
}


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def offsets_json(offsets: Offsets) -> str:
    return json.dumps(offsets, sort_keys=True)
