"""Compile a spec into one streaming DataFrame: sources → SQL pre-stage → window."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.errors import ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.utils import AnalysisException

from flow_jobs.io.dead_letters import DeadLetterTable
from flow_jobs.plan.aggregations import AGGREGATORS
from flow_jobs.plan.errors import PlanError
from flow_jobs.plan.lookups import Lookup, register_lookups
from flow_jobs.plan.sources import compile_source
from flow_jobs.plan.windows import WINDOW_KINDS, compile_window
from flow_jobs.spec.models import PipelineSpec


@dataclass(frozen=True)
class OperatorChoice:
    """Which Spark operator a spec feature compiles to (printed by ``validate --plan``)."""

    feature: str
    operator: str


@dataclass(frozen=True)
class CompiledPipeline:
    spec: PipelineSpec
    frame: DataFrame
    output_mode: str
    operators: tuple[OperatorChoice, ...]
    lookups: tuple[Lookup, ...] = ()


def compile_pipeline(
    spark: SparkSession, spec: PipelineSpec, dead_letters: DeadLetterTable
) -> CompiledPipeline:
    """Build the query; ``spark`` should be this pipeline's own session (temp views)."""
    window = spec.window
    for i, source in enumerate(spec.sources):
        view = compile_source(
            spark, source, i, window, spec.name, dead_letters.staging(source.name)
        )
        view.createOrReplaceTempView(source.name)
    lookups = register_lookups(spark, spec.transform.lookups)
    frame = _pre_stage(spark, spec)
    compiled = compile_window(frame, window, spec.name)
    columns = compiled.frame.columns
    assert columns == spec.output_columns(), (columns, spec.output_columns())
    return CompiledPipeline(
        spec, compiled.frame, compiled.output_mode, _operators(spec), tuple(lookups)
    )


def _pre_stage(spark: SparkSession, spec: PipelineSpec) -> DataFrame:
    sql = spec.transform.sql
    if not sql:
        return spark.table(spec.sources[0].name)
    try:
        frame = spark.sql(sql)
    except (AnalysisException, ParseException) as e:
        views = ", ".join(s.name for s in spec.sources)
        raise PlanError("transform.sql", f"{e.getMessage()} (source views: {views})") from None
    if not frame.isStreaming:
        raise PlanError("transform.sql", "reads none of the source views; nothing would stream")
    return frame


def _operators(spec: PipelineSpec) -> tuple[OperatorChoice, ...]:
    w = spec.window
    native = w.engine == "native"
    late = (
        "none: count windows close when full, every event counts"
        if w.is_count_based
        else "withWatermark(event_time); Spark drops rows behind it and counts them "
        "(numRowsDroppedByWatermark)"
    )
    emit = (
        "output mode update: every trigger, the windows it changed"
        if w.emit == "current"
        else "output mode append: each window once, when it closes"
    )
    return (
        OperatorChoice(
            "sources",
            "Python data source flow_kafka (confluent-kafka), offsets in Spark's offset log; "
            "JSON decoded by from_json (JVM)",
        ),
        OperatorChoice(
            "bad records",
            "Arrow UDF tap in the scan stage -> staged parquet -> Delta MERGE on "
            "(source, topic, partition, offset)",
        ),
        OperatorChoice(
            "[transform].sql", "Spark SQL over the source views" if spec.transform.sql else "(none)"
        ),
        *(
            OperatorChoice(
                f"lookup {lookup.name} ({lookup.kind})",
                f"batch DataFrame, cached, re-read every {lookup.refresh_interval_ms} ms; "
                "a stream-static join in the SQL",
            )
            for lookup in spec.transform.lookups
        ),
        OperatorChoice(f"window kind = {w.kind}", WINDOW_KINDS[w.kind].compiles_to),
        OperatorChoice(f"lateness_ms = {w.lateness_ms}, late_data = {w.late_data}", late),
        OperatorChoice(f"emit = {w.emit}", emit),
        *(
            OperatorChoice(
                f"{a.as_} = {a.agg}({a.column or ''})",
                AGGREGATORS[a.agg].native if native else AGGREGATORS[a.agg].state,
            )
            for a in w.aggregations
        ),
        OperatorChoice("state", "Spark state store (RocksDB provider) in the checkpoint"),
        OperatorChoice(
            f"target {spec.target.kind}",
            f"foreachBatch -> deltalake MERGE on ({', '.join(spec.natural_key())}), "
            "txn (app id, batch id)",
        ),
    )
