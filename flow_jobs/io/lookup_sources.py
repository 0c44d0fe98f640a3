"""Static lookup tables read as PySpark batch data sources (Delta, Postgres).

Spark reads CSV and Parquet itself; Delta (the delta-spark jars) and Postgres (the JDBC
driver) would need JVM jars that the package registries do not carry, so these two are
small Python data sources over ``deltalake`` and ``psycopg``. Each is a single input
partition (lookups are small, broadcast to every task) read in full every time Spark
executes the scan, which is what makes a lookup refreshable: re-cache it, and the next
micro-batch sees the table as it is then.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from flow_jobs.io.postgres import connect_postgres

DELTA_FORMAT = "flow_delta_table"
POSTGRES_FORMAT = "flow_postgres_table"


class _DeltaReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from flow_jobs.io.delta import read_delta

        yield from read_delta(self.path).to_batches()


class DeltaTableSource(DataSource):
    """``spark.read.format("flow_delta_table").schema(...).option("path", p).load()``"""

    @classmethod
    def name(cls) -> str:
        return DELTA_FORMAT

    def reader(self, schema: StructType) -> DataSourceReader:
        return _DeltaReader(dict(self.options))


def delta_schema(path: str) -> StructType:
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    from flow_jobs.io.delta import normalize_schema

    return from_arrow_schema(normalize_schema(pa.schema(DeltaTable(path).schema().to_arrow())))


# -- Postgres ----------------------------------------------------------------------------
_PG_TYPES: dict[str, DataType] = {
    "smallint": ShortType(),
    "integer": IntegerType(),
    "bigint": LongType(),
    "real": FloatType(),
    "double precision": DoubleType(),
    "boolean": BooleanType(),
    "text": StringType(),
    "character varying": StringType(),
    "character": StringType(),
    "date": DateType(),
    "timestamp without time zone": TimestampNTZType(),
    "timestamp with time zone": TimestampType(),
    "bytea": BinaryType(),
}


def _split_table(table: str) -> tuple[str, str]:
    schema, _, name = table.rpartition(".")
    return schema or "public", name


def postgres_schema(url: str, table: str) -> StructType:
    """The table's columns as Spark types (anything unmapped is read as its text)."""

    schema, name = _split_table(table)
    with connect_postgres(url, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT column_name, data_type, numeric_precision, numeric_scale "
            "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
            "ORDER BY ordinal_position",
            (schema, name),
        ).fetchall()
    if not rows:
        raise LookupError(f"Postgres table {table} does not exist or has no columns")
    fields = []
    for column, data_type, precision, scale in rows:
        if data_type == "numeric":
            spark_type: DataType = DecimalType(min(precision or 38, 38), scale or 0)
        else:
            spark_type = _PG_TYPES.get(data_type, StringType())
        fields.append(StructField(column, spark_type))
    return StructType(fields)


class _PostgresReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.url = options["url"]
        self.table = options["table"]
        self.schema = schema

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from psycopg import sql
        from pyspark.sql.pandas.types import to_arrow_schema

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        schema, name = _split_table(self.table)
        columns = [
            sql.SQL("{}::text").format(sql.Identifier(f.name))
            if isinstance(f.dataType, StringType)
            else sql.Identifier(f.name)
            for f in self.schema.fields
        ]
        query = sql.SQL("SELECT {} FROM {}.{}").format(
            sql.SQL(", ").join(columns), sql.Identifier(schema), sql.Identifier(name)
        )
        with connect_postgres(self.url, connect_timeout=10) as conn:
            rows = conn.execute(query).fetchall()
        names = self.schema.fieldNames()
        yield pa.RecordBatch.from_pylist(
            [dict(zip(names, r, strict=True)) for r in rows], arrow_schema
        )


class PostgresTableSource(DataSource):
    """``spark.read.format("flow_postgres_table").schema(...).option("url", u)...``"""

    @classmethod
    def name(cls) -> str:
        return POSTGRES_FORMAT

    def reader(self, schema: StructType) -> DataSourceReader:
        return _PostgresReader(dict(self.options), schema)
