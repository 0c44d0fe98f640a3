"""Rows carried through a state-API operator as JSON strings (the dedup's, the temporal
join's): every value back exactly, and keys compared as SQL ``GROUP BY`` compares them."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DoubleType, FloatType

#: to_json / from_json of the carried rows: every value back exactly (microseconds,
#: NULL fields kept as NULL).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "ignoreNullFields": "false"}


def key_json(
    view: DataFrame, names: Sequence[str], types: Sequence[DataType] | None = None
) -> Column:
    """A record's keys as one JSON string, equal where SQL ``GROUP BY`` groups: NaN is
    one value ("NaN"), NULL another, -0.0 is 0.0. With ``types`` (two sides' keys
    compared), each key is cast to its type and named by its place, not its name."""
    if types is None:
        keys = [grouped(F.col(k), view.schema[k].dataType) for k in names]
    else:
        keys = [
            grouped(F.col(k).cast(t), t).alias(f"k{i}")
            for i, (k, t) in enumerate(zip(names, types, strict=True))
        ]
    return F.to_json(F.struct(*keys), JSON_OPTIONS)


def grouped(column: Column, data_type: object) -> Column:
    """A key as SQL ``GROUP BY`` compares it: -0.0 is 0.0 (Spark's hash tells them
    apart, its grouping does not; NaN hashes as one value)."""
    if isinstance(data_type, FloatType | DoubleType):
        return F.when(column == 0, F.lit(0).cast(data_type)).otherwise(column)
    return column
