"""Compile windows onto Spark's arbitrary-state API: the kinds Spark has no operator for,
and any window ``WindowSpec.engine`` puts there (it reopens, emits what Spark's operator
cannot, or holds an exact ``count_distinct``, capped while open).

The window input is projected to what the operator needs, grouped by the group keys and
handed to ``transformWithStateInPandas`` with ``flow_jobs.windows.processor``:

* ``flowop_t``: the event time in epoch milliseconds; the watermarked TIMESTAMP column
  stays in the input so Spark drops late rows (event-time mode);
* the tie-break of equal event times, the lane and position of
  ``flow_jobs.plan.ordering`` (Kafka topic and partition, offset; or a hash of the row);
* each column an aggregation reads, numeric and timestamp columns split into a value
  and a NULL flag (see ``flow_jobs.kernels.frame``).

The output schema (types from ``flow_jobs.aggregations.result_types``) matches
the native engine's, so targets do not care which engine produced a window.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    DataType,
    DecimalType,
    FractionalType,
    IntegerType,
    IntegralType,
    LongType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from flow_jobs.aggregations import AGGREGATORS, aggregation_input, result_types
from flow_jobs.kernels.frame import (
    LANE,
    NULL_SUFFIX,
    POSITION,
    TIME,
    VALUE_PREFIX,
    ColumnKind,
)
from flow_jobs.plan.deferred import deferred
from flow_jobs.plan.event_time import EVENT_TIME
from flow_jobs.spec.models import WindowSpec
from flow_jobs.windows.processor import WindowOperatorPlan, WindowProcessor

_ALL = "flowop_all"  # the single group when group_by is empty


def compile_state_window(
    timed: DataFrame, window: WindowSpec, pipeline: str, tie: tuple[Column, Column]
) -> DataFrame:
    """The window's output rows (its output mode: update for emit = "current"), from
    ``timed`` (the input with its event time: ``compile_window``); ``tie`` orders rows
    of equal event time (``flow_jobs.plan.ordering``)."""
    count_based = window.is_count_based
    inputs = [aggregation_input(a, i, timed) for i, a in enumerate(window.aggregations)]

    columns: dict[str, tuple[Column, DataType]] = {}
    aggregators = []
    for a in inputs:
        unit = AGGREGATORS[a.spec.agg]
        columns.update(unit.state_inputs(a, timed))
        aggregators.append(unit.state(a, unit.state_column(a), pipeline))
    projected_values, kinds = _encode(columns)

    group = window.group_by or [_ALL]
    framed = timed if window.group_by else timed.withColumn(_ALL, F.lit(""))
    projection = [
        *(F.col(c) for c in group),
        F.col(EVENT_TIME),
        F.unix_millis(F.col(EVENT_TIME)).alias(TIME),
        *(c.alias(n) for c, n in zip(tie, (LANE, POSITION), strict=True)),
        *projected_values,
    ]

    output_fields = [
        StructField(window.window_start_column, TimestampType()),
        StructField(window.window_end_column, TimestampType()),
        *([StructField(window.window_index_column, LongType())] if count_based else []),
        *(StructField(c, timed.schema[c].dataType) for c in window.group_by),
        *(
            StructField(name, dtype)
            for a in inputs
            for name, dtype in zip(a.spec.output_names(), result_types(a), strict=True)
        ),
        *([StructField(window.revision_column, IntegerType(), False)] if window.reopens else []),
    ]
    schema = StructType(output_fields)
    plan = WindowOperatorPlan(
        pipeline=pipeline,
        kind=window.kind,
        emit=window.emit,
        group_columns=tuple(window.group_by),
        columns=tuple(kinds),
        aggregators=tuple(aggregators),
        output_columns=tuple(schema.fieldNames()),
        family=window.state_family(),  # the family with its parameters
    )
    return (
        framed.select(*projection)
        .groupBy(*group)
        .transformWithStateInPandas(
            deferred(WindowProcessor(plan)),
            schema,
            "Update" if window.emit == "current" else "Append",
            "EventTime",
        )
    )


def _encode(columns: dict[str, tuple[Column, DataType]]) -> tuple[list[Column], list[ColumnKind]]:
    """Numeric and timestamp columns as (value with NULL as 0, NULL flag); the rest as is."""
    projected, kinds = [], []
    for name, (value, data_type) in columns.items():
        kind = _kind(data_type)
        # object values are saved in state as Arrow values of their Spark type
        arrow_type = to_arrow_type(data_type, timezone="UTC") if kind == "object" else None
        kinds.append(ColumnKind(name, kind, arrow_type))
        wire = VALUE_PREFIX + name
        if kind == "object":
            projected.append(value.alias(wire))
            continue
        if kind == "ts":
            number = F.unix_micros(value.cast(TimestampType()))
        else:
            number = value.cast("double" if kind == "float" else "bigint")
        projected += [
            F.coalesce(number, F.lit(0).cast(number_type(kind))).alias(wire),
            value.isNull().alias(wire + NULL_SUFFIX),
        ]
    return projected, kinds


def number_type(kind: str) -> str:
    return "double" if kind == "float" else "bigint"


def _kind(data_type: DataType) -> str:
    if isinstance(data_type, IntegralType):
        return "int"
    if isinstance(data_type, FractionalType) and not isinstance(data_type, DecimalType):
        return "float"
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        return "ts"
    return "object"  # strings, decimals, dates, booleans, binary, nested: Python objects
