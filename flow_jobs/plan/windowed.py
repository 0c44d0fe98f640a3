"""A window over the sources: ``[transform.window]`` as the first stage.

sources -> dead-letter tap -> [operators] -> [SQL pre-stage with lookups] -> window

The core's ``compile_pipeline`` reaches it through ``PIPELINES["window"]``
(``flow_jobs.plan.window_stage`` registers it); a window
after a join is the join's (``flow_jobs.joins``)."""

from __future__ import annotations

from pyspark.errors import ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from pyspark.sql.utils import AnalysisException

from flow_jobs.aggregations.partials import Merge
from flow_jobs.combine.decide import (
    ReaderFolding,
    checkpoint_merges,
    foldable,
    mark_checkpoint,
    shape_folds,
)
from flow_jobs.combine.sql import NotInGrammar, PreStage, analyze
from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.errors import PlanError
from flow_jobs.io.checkpoint_files import LOCATION_KEY, checkpoint_files, idle_file
from flow_jobs.operators.registry import Compiled, OperatorInput, compile_operator
from flow_jobs.plan.event_time import EventTime
from flow_jobs.plan.lookups import register_lookups
from flow_jobs.plan.pipelines import CompiledPipeline, PipelineInput, windowed
from flow_jobs.plan.source_schemas import payload_schema
from flow_jobs.plan.sources import (
    SourceWatermark,
    carried_by_sources,
    compile_source,
    source_carries,
    source_event_time,
)
from flow_jobs.plan.time_reasons import divert_after_sql
from flow_jobs.plan.windows import compile_window
from flow_jobs.plan_lines import Described
from flow_jobs.spec.models import KAFKA_COLUMN, PipelineSpec
from flow_jobs.spec.operators import SourceOperator


def compile_windowed(given: PipelineInput) -> CompiledPipeline:
    """The window over the sources, after their operators and the SQL."""
    spark, spec, checkpoint = given.spark, given.spec, given.checkpoint
    dead_letters = given.dead_letters
    window = spec.window
    event_time = EventTime.of_window(window)
    # Late rows are taken out per row at the sources, before the SQL (plan.late_rows);
    # arrival times are never late. Rows past a reopening window's allowed lateness are
    # late like any other, and dropped.
    timed = window.time_mode == "event"
    late_data = ("drop" if window.reopens else window.late_data) if timed else None
    per_source = timed and given.per_source_watermarks
    watermark = _source_watermark(spark, spec, checkpoint) if per_source else None
    folding = _folding(spark, spec, checkpoint)
    combine = folding.plan
    views = {}
    parts: list[Described] = []
    for i, source in enumerate(spec.sources):
        compiled_source = compile_source(
            spark,
            source,
            i,
            event_time,
            spec.name,
            dead_letters.tap(source.name),
            late_data,
            checkpoint,
            watermark,
            combine if i == 0 else None,
        )
        parts.append(compiled_source)
        view = views[source.name] = compiled_source.frame
        for op in spec.operators_of(source.name):  # a dedup, a plug-in's: by kind
            applied = _operator(spec, op, view, event_time, watermark, dead_letters)
            parts.append(applied)
            view = views[source.name] = applied.frame
        view.createOrReplaceTempView(source.name)
    if late_data == "dlq":
        _check_late_rows_reach_the_dead_letters(spec, views)
    lookups = register_lookups(spark, spec.transform.lookups)
    frame = _pre_stage(spark, spec, folding)
    if (
        spec.transform.sql
        and event_time.mode == "event"
        and not carried_by_sources(event_time.column, views)
    ):
        # The SQL computes the event time: check it there (NULL, range, skew).
        topics = tuple((s.topic, s.name) for s in spec.sources)
        tap = dead_letters.tap("transform.sql", topics)
        frame = divert_after_sql(frame, event_time, tap)
    compiled = compile_window(
        frame,
        window,
        spec.name,
        source_watermarks=watermark is not None,
        topics=_topics(spec),
        merge=Merge(combine) if combine is not None else None,
    )
    idle = watermark.idle_file if watermark else None
    parts += [folding, *lookups, compiled]
    marks = (mark_checkpoint,) if combine is not None else ()
    return windowed(spec, compiled, parts, lookups, idle, combine is not None, marks)


def _folding(spark: SparkSession, spec: PipelineSpec, checkpoint: str | None) -> ReaderFolding:
    """The reader's pre-aggregation, where the window allows it and the checkpoint takes
    it; behind ``[transform].sql`` where Spark's plan of it is in the reader's grammar."""
    payload = _first_payload(spec)
    prestage: PreStage | str | None = None
    if spec.transform.sql and shape_folds(spec, payload) is None:
        assert payload is not None
        try:
            prestage = analyze(spark, spec.transform.sql, spec.sources[0].name, payload)
        except NotInGrammar as e:
            prestage = str(e)
    decision = foldable(spec, payload, prestage)
    stage = prestage if isinstance(prestage, PreStage) else None
    sql = spec.transform.sql
    if isinstance(decision, str) or checkpoint is None:
        return ReaderFolding(decision, None, stage, sql)
    try:
        merges = checkpoint_merges(decision, checkpoint_files(checkpoint, spark))
    except OSError as e:  # the plan depends on the checkpoint: never guess it
        raise PlanError(LOCATION_KEY, str(e).removeprefix(f"{LOCATION_KEY} ")) from e
    return ReaderFolding(decision, merges, stage, sql)


def _first_payload(spec: PipelineSpec) -> StructType | None:
    """The first source's payload schema: JSON's as declared, a registry format's as its
    reader schema gives it (None: raw, or not valid, which ``compile_source`` names)."""
    source = spec.sources[0]
    if source.format == "raw" or (source.format == "json" and not source.schema_ddl):
        return None
    try:
        return payload_schema(source, 0)
    except PlanError:
        return None


def _source_watermark(
    spark: SparkSession, spec: PipelineSpec, checkpoint: str | None
) -> SourceWatermark | None:
    """A watermark per source when every source carries the event-time column (the
    pipeline's is then their minimum); None where ``[transform].sql`` computes it, and
    the window takes one watermark after the SQL. Idleness matters only between sources:
    with two or more, an idle one sends heartbeats (``flow_jobs.runtime.idleness``)."""
    column = spec.window.event_time_column
    if not all(source_carries(spark, s, column) for s in spec.sources):
        return None
    idle = idle_file(checkpoint) if checkpoint and len(spec.sources) > 1 else None
    return SourceWatermark(spec.window.watermark_delay_ms, idle)


def _operator(
    spec: PipelineSpec,
    op: SourceOperator,
    view: DataFrame,
    event_time: EventTime,
    watermark: SourceWatermark | None,
    dead_letters: DeadLetterTable,
) -> Compiled:
    """A source's view through one of its operators (``flow_jobs.operators.registry``),
    on the source's own watermark where it has one."""
    time = source_event_time(view, event_time) if watermark is not None else None
    given = OperatorInput(
        view,
        op.source,
        op.key,
        event_time.column,
        time,
        None,
        spec.window.watermark_delay_ms,
        _topics(spec),
        lambda part: dead_letters.tap(op.source, part=part),
    )
    return compile_operator(op.spec, given)


def _check_late_rows_reach_the_dead_letters(
    spec: PipelineSpec, views: dict[str, DataFrame]
) -> None:
    """``late_data = "dlq"`` promises every late row in the dead letters: refuse a plan
    where the sources cannot single them out (Spark would drop them, uncounted there)."""
    column = spec.window.event_time_column
    if not carried_by_sources(column, views):
        raise PlanError(
            "transform.window.late_data",
            f'"dlq" finds late rows at the sources, before [transform].sql, but the event '
            f"time {column!r} is computed in the SQL: take it from a source column, or use "
            '"drop"',
        )


def _topics(spec: PipelineSpec) -> tuple[str, ...]:
    return tuple(s.topic for s in spec.sources)


def _pre_stage(spark: SparkSession, spec: PipelineSpec, folding: ReaderFolding) -> DataFrame:
    sql = spec.transform.sql
    if not sql:
        return spark.table(spec.sources[0].name)
    if folding.plan is not None and folding.prestage is not None:
        # The SQL as the reader evaluates it, letting partials through (flow_jobs.combine.sql).
        w = spec.window
        kafka = [KAFKA_COLUMN] if folding.prestage.reference(KAFKA_COLUMN) == KAFKA_COLUMN else []
        columns = [*w.group_by, w.event_time_column, *(a.column for a in w.aggregations)]
        names = list(dict.fromkeys([c for c in columns if c is not None] + kafka))
        return folding.prestage.frame(spark, names)
    try:
        frame = spark.sql(sql)
    except (AnalysisException, ParseException) as e:
        views = ", ".join(s.name for s in spec.sources)
        raise PlanError("transform.sql", f"{e.getMessage()} (source views: {views})") from None
    if not frame.isStreaming:
        raise PlanError("transform.sql", "reads none of the source views; nothing would stream")
    return frame
