"""``[transform.append]``: each row of one source, through ``[transform].sql``, written
once.

The rules: docs/spec-reference.md, "[transform.append]". The source's view is registered
under its name and ``[transform].sql`` runs over it (without SQL, its columns but
``_kafka``). No state and no watermark: a row is never late. A row is named by a hash
of its record's Kafka position, ``row_id``, which this step adds to the SQL's SELECT
list (sqlglot; the SQL must then select from the source alone, without GROUP BY,
DISTINCT, a join or a union), unless the spec names ``row_id`` columns of its own: the
target MERGEs on it, so a replayed batch or a fresh checkpoint writes each row once.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from pyspark.sql import DataFrame
from sqlglot import exp

from flow_jobs.append.spec import ROW_ID, AppendSpec
from flow_jobs.errors import PlanError
from flow_jobs.plan.compiled_source import CompiledSource
from flow_jobs.plan.frame_columns import require_column
from flow_jobs.plan.keyed_sides import kafka_position
from flow_jobs.plan.pipelines import CompiledPipeline, PipelineInput
from flow_jobs.plan.sources import compile_lone_source
from flow_jobs.plan_lines import PlanLine
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.models import KAFKA_COLUMN

_POSITION = ("topic", "partition", "offset")


@dataclass(frozen=True)
class CompiledAppend:
    frame: DataFrame
    natural_key: tuple[str, ...]
    append: AppendSpec
    sql: str | None
    sources: tuple[CompiledSource, ...]

    def describe(self) -> list[PlanLine]:
        row = (
            f"{ROW_ID}: a hash of the record's Kafka position (added to the SELECT list)"
            if self.append.row_id is None
            else f"row id ({', '.join(self.append.row_id)})"
        )
        sql = (
            [PlanLine("[transform].sql", "Spark SQL over the source's view, in the JVM")]
            if self.sql
            else []
        )
        return [
            *(line for s in self.sources for line in s.describe()),
            *sql,
            PlanLine(
                "append each row once",
                f"{'the SQL' if self.sql else 'the source'}'s rows, no state and no watermark "
                f"(no row is late); {row}, the target's natural key, so a replayed batch or "
                "a fresh checkpoint writes a row once",
            ),
        ]


def with_position(sql: str, source: str, in_kafka: bool = True) -> tuple[str, bool]:
    """``sql`` with ``row_id`` (the record's Kafka position, hashed) added to its SELECT
    list, and whether it selects ``*`` (whose ``_kafka`` and ``_event_ts`` the output
    drops); ``in_kafka``: the position is in ``_kafka`` (a raw source has it as columns
    of its own)."""
    key = "transform.sql"
    try:
        select = sqlglot.parse_one(sql, read="spark")
    except sqlglot.errors.ParseError as e:
        raise PlanError(key, f"cannot be read: {e}") from None
    refused = [k for k in ("group", "having", "distinct", "joins", "limit", "order", "with_")
               if select.args.get(k)]  # fmt: skip
    source_node = select.args.get("from_") if isinstance(select, exp.Select) else None
    table = source_node.this if source_node is not None else None
    if (
        refused
        or not isinstance(table, exp.Table)
        or table.name != source
        or select.find(exp.Window) is not None
    ):
        why = f" ({refused[0].upper()})" if refused else ""
        raise PlanError(
            key,
            f"[transform.append] names each row by its record's Kafka position, which it "
            f"adds to a SELECT ... FROM {source} [WHERE ...]; this SQL is not one{why}: set "
            "transform.append.row_id to the output columns that name a row",
        )
    alias = table.alias_or_name
    at = f"{alias}.{KAFKA_COLUMN}" if in_kafka else alias
    position = ", ".join(f"{at}.{p}" for p in _POSITION)
    star = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and e.is_star)
               for e in select.expressions)  # fmt: skip
    select = select.select(sqlglot.parse_one(f"xxhash64({position}) AS {ROW_ID}", read="spark"))
    return select.sql(dialect="spark"), star


def compile_append(given: PipelineInput) -> CompiledAppend:
    spark, spec = given.spark, given.spec
    append = spec.transform.append
    assert append is not None
    source = spec.sources[0]
    compiled = compile_lone_source(given, "transform.append", append.max_event_time_skew_ms)
    view = compiled.frame
    sql = spec.transform.sql
    drop = {KAFKA_COLUMN}
    if sql is None:
        frame = view
        drop.add(EVENT_TS)
        if append.row_id is None:
            frame = frame.withColumn(ROW_ID, kafka_position(frame))
    else:
        view.createOrReplaceTempView(source.name)
        if append.row_id is None:
            sql, star = with_position(sql, source.name, KAFKA_COLUMN in view.columns)
            if star:
                drop.add(EVENT_TS)
        frame = spark.sql(sql)
    frame = frame.drop(*(c for c in frame.columns if c in drop or c.startswith("__flow")))
    if append.row_id is None and frame.columns.count(ROW_ID) != 1:
        raise PlanError(
            "transform.sql", f"the SQL selects a column {ROW_ID!r}, the name of the row id; "
            "rename it, or set transform.append.row_id"
        )  # fmt: skip
    natural = tuple(append.row_id or [ROW_ID])
    for i, column in enumerate(natural if append.row_id else ()):
        require_column(frame, f"transform.append.row_id[{i}]", column, "the output")
    return CompiledAppend(frame, natural, append, spec.transform.sql, (compiled,))


def compile_append_pipeline(given: PipelineInput) -> CompiledPipeline:
    """The rows of the SQL (or of the source), appended once each."""
    compiled = compile_append(given)
    return CompiledPipeline(
        given.spec, compiled.frame, "append", (compiled,), compiled.natural_key, (),
        # each record once, by its Kafka position; a row_id of the spec's may repeat
        writes_new_rows=compiled.append.row_id is None,
    )  # fmt: skip
