"""Compile sliding, count-based and reopening windows onto Spark's arbitrary-state API.

The window input is projected to what the operator needs, grouped by the group keys and
handed to ``transformWithStateInPandas`` with ``flow_jobs.operators.processor``:

* ``flowop_t``: the event time in epoch milliseconds; the watermarked TIMESTAMP column
  stays in the input so Spark drops late rows (sliding windows, event-time mode);
* the arrival order: ``_kafka``'s topic, partition and offset (count windows require it:
  they number a group's events in arrival order), or else a hash of the row (sliding
  windows only use it to order events of equal time);
* each column an aggregation reads, numeric and timestamp columns split into a value
  and a NULL flag (see ``flow_jobs.operators.frame``).

The output schema (types from ``flow_jobs.plan.aggregations.result_types``) matches
the native engine's, so targets do not care which engine produced a window.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
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

from flow_jobs.operators.frame import (
    NULL_SUFFIX,
    ORDER_COLUMNS,
    TIE,
    TIME,
    VALUE_PREFIX,
    ColumnKind,
)
from flow_jobs.operators.processor import AggregatorSpec, WindowOperatorPlan, WindowProcessor
from flow_jobs.plan.aggregations import (
    AggregationInput,
    aggregation_input,
    hll_item,
    resolve_function,
    result_types,
)
from flow_jobs.plan.errors import PlanError
from flow_jobs.plan.windows import EVENT_TIME, CompiledWindow, with_event_time
from flow_jobs.spec.models import KAFKA_COLUMN, WindowSpec

_ALL = "flowop_all"  # the single group when group_by is empty


def compile_state_window(
    frame: DataFrame,
    window: WindowSpec,
    pipeline: str,
    watermarked_time: str | None = None,
    source_watermarks: bool = False,
) -> CompiledWindow:
    count_based = window.is_count_based
    timed = with_event_time(
        frame,
        window,
        watermark=not count_based,
        watermarked_time=watermarked_time,
        source_watermarks=source_watermarks,
    )
    inputs = [aggregation_input(a, i, timed) for i, a in enumerate(window.aggregations)]

    columns: dict[str, tuple[Column, DataType]] = {}
    specs = [_aggregator_spec(a, timed, columns) for a in inputs]
    projected_values, kinds = _encode(columns)

    group = window.group_by or [_ALL]
    framed = timed if window.group_by else timed.withColumn(_ALL, F.lit(""))
    projection = [
        *(F.col(c) for c in group),
        F.col(EVENT_TIME),
        F.unix_millis(F.col(EVENT_TIME)).alias(TIME),
        *_order_columns(framed, window),
        *projected_values,
    ]

    output_fields = [
        StructField(window.window_start_column, TimestampType()),
        StructField(window.window_end_column, TimestampType()),
        *([StructField(window.window_index_column, LongType())] if count_based else []),
        *(StructField(c, frame.schema[c].dataType) for c in window.group_by),
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
        duration_ms=window.duration_ms,
        count=window.count,
        stride=window.stride,
        emit=window.emit,
        group_columns=tuple(window.group_by),
        columns=tuple(kinds),
        aggregators=tuple(specs),
        output_columns=tuple(schema.fieldNames()),
        hop_ms=window.hop_ms,
        allowed_lateness_ms=window.allowed_lateness_ms if window.reopens else None,
    )
    output = (
        framed.select(*projection)
        .groupBy(*group)
        .transformWithStateInPandas(
            WindowProcessor(plan),
            schema,
            "Update" if window.emit == "current" else "Append",
            "None" if count_based else "EventTime",
        )
    )
    return CompiledWindow(output, "update" if window.emit == "current" else "append")


def _order_columns(frame: DataFrame, window: WindowSpec) -> list[Column]:
    if KAFKA_COLUMN in frame.columns:
        kafka = F.col(KAFKA_COLUMN)
        return [
            kafka.getField(field).alias(name)
            for field, name in zip(("topic", "partition", "offset"), ORDER_COLUMNS, strict=True)
        ]
    if window.is_count_based:
        raise PlanError(
            "transform.sql",
            f'kind = "{window.kind}" numbers each group\'s events in arrival order, which '
            f"comes from the source's {KAFKA_COLUMN} column: add {KAFKA_COLUMN} to the SELECT "
            "list of [transform].sql",
        )
    visible = [F.col(c) for c in frame.columns if not c.startswith("__flow")]
    return [F.xxhash64(*visible).alias(TIE)]


def _aggregator_spec(
    a: AggregationInput, frame: DataFrame, columns: dict[str, tuple[Column, DataType]]
) -> AggregatorSpec:
    """Register the input columns an aggregation reads; describe it for the operator."""
    agg = a.spec
    column = agg.column
    if agg.agg == "count_distinct" and agg.mode != "exact":
        assert a.value is not None and a.data_type is not None
        item = hll_item(a.value, a.data_type)
        column = f"__flow_hll_{a.index}"
        columns[column] = (item, frame.select(item.alias("x")).schema["x"].dataType)
    elif column is not None:
        columns[column] = (F.col(column), frame.schema[column].dataType)
    if agg.agg == "reduce" and column is None:
        for c in a.row_columns:
            columns[c] = (F.col(c), frame.schema[c].dataType)
    return AggregatorSpec(
        agg=agg.agg,
        column=column,
        outputs=tuple(agg.output_names()),
        lg_k=agg.precision,
        cap=agg.max_distinct_values_per_group or 0,
        initializer=resolve_function(agg.initializer, f"{a.key}.initializer")
        if agg.initializer
        else None,
        reducer=resolve_function(agg.reducer, f"{a.key}.reducer") if agg.reducer else None,
        row_columns=a.row_columns if agg.agg == "reduce" and agg.column is None else (),
    )


def _encode(columns: dict[str, tuple[Column, DataType]]) -> tuple[list[Column], list[ColumnKind]]:
    """Numeric and timestamp columns as (value with NULL as 0, NULL flag); the rest as is."""
    projected, kinds = [], []
    for name, (value, data_type) in columns.items():
        kind = _kind(data_type)
        kinds.append(ColumnKind(name, kind))
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
