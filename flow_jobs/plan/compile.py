"""Compile a spec into one streaming DataFrame.

sources -> dead-letter tap -> [SQL pre-stage with lookups] -> window
sources -> dead-letter tap -> join [-> window, with chain = ["join", "window"]]
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.errors import ParseException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from pyspark.sql.utils import AnalysisException

from flow_jobs.aggregations import AGGREGATORS
from flow_jobs.aggregations.partials import Merge
from flow_jobs.errors import PlanError
from flow_jobs.io.checkpoint_files import LOCATION_KEY, checkpoint_files, idle_file
from flow_jobs.io.combine import CombinePlan
from flow_jobs.io.dead_letters import DeadLetterTable
from flow_jobs.operators.dedup import BUCKETS
from flow_jobs.plan.combine import checkpoint_merges, describe, foldable, shape_folds
from flow_jobs.plan.dedup import deduplicate
from flow_jobs.plan.diversions import divert_after_sql
from flow_jobs.plan.event_time import EventTime
from flow_jobs.plan.joins import compile_join
from flow_jobs.plan.lookups import Lookup, register_lookups
from flow_jobs.plan.prestage import NotInGrammar, PreStage, analyze
from flow_jobs.plan.sources import (
    SourceWatermark,
    carried_by_sources,
    compile_source,
    payload_schema,
    source_carries,
    source_event_time,
)
from flow_jobs.plan.temporal import compile_temporal_join
from flow_jobs.plan.windows import CompiledWindow, compile_window
from flow_jobs.spec.models import KAFKA_COLUMN, DedupSpec, PipelineSpec


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
    natural_key: tuple[str, ...]  # what the target MERGEs on
    nullable_key: tuple[str, ...]  # natural-key columns that may hold NULL
    lookups: tuple[Lookup, ...] = ()
    #: where the run publishes idle sources for their readers (None: no idleness)
    idle_file: str | None = None
    #: the window merges partials from the reader: the run marks its checkpoint
    pre_aggregates: bool = False


def compile_pipeline(
    spark: SparkSession,
    spec: PipelineSpec,
    dead_letters: DeadLetterTable,
    checkpoint: str | None = None,
    per_source_watermarks: bool = True,
) -> CompiledPipeline:
    """Build the query; ``spark`` should be this pipeline's own session (temp views).
    ``checkpoint`` is the query's: the sources read each batch's watermark from it.
    ``per_source_watermarks = False`` takes the window's watermark after the SQL, as
    before them (the fastest source's): ``make bench`` measures what they cost."""
    if spec.transform.join is not None:
        return _compile_join_pipeline(spark, spec, dead_letters, checkpoint)
    if spec.transform.temporal_join is not None:
        joined = compile_temporal_join(spark, spec, dead_letters, checkpoint)
        return CompiledPipeline(
            spec,
            joined.frame,
            "append",
            _operators(spec),
            joined.natural_key,
            (),
            idle_file=joined.idle_file,
        )
    window = spec.window
    event_time = EventTime.of_window(window)
    # Late rows are taken out per row at the sources, before the SQL (plan.late_rows);
    # arrival times are never late. Rows past a reopening window's allowed lateness are
    # late like any other, and dropped.
    timed = window.time_mode == "event"
    late_data = ("drop" if window.reopens else window.late_data) if timed else None
    per_source = timed and per_source_watermarks
    watermark = _source_watermark(spark, spec, checkpoint) if per_source else None
    folding = _folding(spark, spec, checkpoint)
    combine = folding.plan
    views = {}
    for i, source in enumerate(spec.sources):
        view = views[source.name] = compile_source(
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
        dedup = spec.dedup_of(source.name)
        if dedup is not None:
            view = views[source.name] = _deduplicated(
                spec, dedup, view, event_time, watermark, dead_letters
            )
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
    return _windowed(spec, compiled, lookups, idle, combine is not None, folding.line)


@dataclass(frozen=True)
class _Folding:
    """Whether the window pre-aggregates in the reader (``flow_jobs.plan.combine``)."""

    plan: CombinePlan | None  # None: it does not, or the checkpoint does not take it
    prestage: PreStage | None  # [transform].sql as the reader evaluates it
    line: str  # validate --plan's: how, or why not


def _folding(spark: SparkSession, spec: PipelineSpec, checkpoint: str | None) -> _Folding:
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
    line = describe(decision)
    if isinstance(decision, str) or checkpoint is None:
        return _Folding(None, stage, line)
    try:
        merges = checkpoint_merges(decision, checkpoint_files(checkpoint, spark))
    except OSError as e:  # the plan depends on the checkpoint: never guess it
        raise PlanError(LOCATION_KEY, str(e).removeprefix(f"{LOCATION_KEY} ")) from e
    return _Folding(decision if merges else None, stage, line)


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


def _deduplicated(
    spec: PipelineSpec,
    dedup: DedupSpec,
    view: DataFrame,
    event_time: EventTime,
    watermark: SourceWatermark | None,
    dead_letters: DeadLetterTable,
) -> DataFrame:
    """A source's view without its duplicates (``flow_jobs.plan.dedup``), on the
    source's own watermark."""
    key, source = spec.dedup_key(dedup), spec.dedup_source(dedup)
    time = source_event_time(view, event_time)
    if watermark is None or time is None:
        raise PlanError(
            key,
            f"deduplication orders {source!r}'s records by their event time, which must be "
            f"a column of every source ({event_time.column!r} is computed in [transform].sql)",
        )
    tap = dead_letters.tap(source, part="duplicates")
    return deduplicate(view, dedup, key, source, time, _topics(spec), tap)


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


def _windowed(
    spec: PipelineSpec,
    compiled: CompiledWindow,
    lookups: list[Lookup] | None = None,
    idle: str | None = None,
    pre_aggregates: bool = False,
    folding: str | None = None,
) -> CompiledPipeline:
    """A windowed pipeline (over sources or a join): keyed by window and group;
    ``folding``: validate --plan's pre-aggregation line (None: a window after a join)."""
    columns = compiled.frame.columns
    assert columns == spec.output_columns(), (columns, spec.output_columns())
    return CompiledPipeline(
        spec,
        compiled.frame,
        compiled.output_mode,
        _operators(spec, folding),
        tuple(spec.natural_key()),
        tuple(spec.window.group_by),
        tuple(lookups or ()),
        idle,
        pre_aggregates,
    )


def _compile_join_pipeline(
    spark: SparkSession,
    spec: PipelineSpec,
    dead_letters: DeadLetterTable,
    checkpoint: str | None,
) -> CompiledPipeline:
    joined = compile_join(spark, spec, dead_letters, checkpoint)
    if not spec.has_window:
        return CompiledPipeline(
            spec,
            joined.frame.select(*joined.columns),
            "append",
            _operators(spec),
            joined.natural_key,
            joined.nullable_key,
        )
    window = spec.window
    join = spec.transform.join
    assert join is not None
    # Only a preserved side's time is on every joined row (a NULL time would put a row
    # in no window, silently): inner keeps both, left/right theirs, full neither.
    preserved = {"inner": ("left", "right"), "left": ("left",), "right": ("right",)}
    usable = {
        name: hidden
        for name, hidden in joined.side_times.items()
        if any(hidden.endswith(f"_{side}_time") for side in preserved.get(join.how, ()))
    }
    time = usable.get(window.event_time_column)
    if time is None and join.how == "full":
        raise PlanError(
            "transform.window.event_time_column",
            "a window after a full outer join has no event time on every row (either side "
            "may be missing); window a left or right join on its preserved side",
        )
    if time is None:
        raise PlanError(
            "transform.window.event_time_column",
            f"{window.event_time_column!r}: a window after a join groups on one side's event "
            f"time present on every row, the only times the join's watermarks follow; use "
            f"one of {', '.join(sorted(usable))}",
        )
    return _windowed(spec, compile_window(joined.frame, window, spec.name, watermarked_time=time))


def _topics(spec: PipelineSpec) -> tuple[str, ...]:
    return tuple(s.topic for s in spec.sources)


def _pre_stage(spark: SparkSession, spec: PipelineSpec, folding: _Folding) -> DataFrame:
    sql = spec.transform.sql
    if not sql:
        return spark.table(spec.sources[0].name)
    if folding.plan is not None and folding.prestage is not None:
        # The SQL as the reader evaluates it, letting partials through (plan.prestage).
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


_SOURCE_CHOICES = (
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
)


def _operators(spec: PipelineSpec, folding: str | None = None) -> tuple[OperatorChoice, ...]:
    """Which Spark operator each spec feature compiles to, in pipeline order."""
    join, temporal = spec.transform.join, spec.transform.temporal_join
    pre_stage: tuple[OperatorChoice, ...] = ()
    if temporal is not None:
        retention = (
            f"a current version leaves once older than the watermark - {temporal.retention_ms} ms"
            if temporal.retention_ms is not None
            else "a current version stays until a later one or a tombstone ends it"
        )
        fate = "dead-lettered with their bytes" if temporal.late_data == "dlq" else "dropped"
        pre_stage = (
            OperatorChoice(
                f"{temporal.how} temporal join of {temporal.stream_source} on "
                f"{', '.join(temporal.stream_keys)} with the versions of "
                f"{temporal.versions_source}",
                f"transformWithStateInPandas (event-time timers) over {BUCKETS} hash buckets "
                "of the keys, rows carried as JSON strings: the versions kept per key, each "
                "stream record held until the watermark (the lower of both sources', "
                f"withWatermark({temporal.lateness_ms} ms) on each; an idle one raised "
                f"after {temporal.source_idleness_ms} ms) reaches it, then joined with the "
                "last version at or before its time (a tombstone ends one); a superseded "
                f"version leaves once the watermark passes its successor; {retention}; "
                f"late rows taken out at each source, per row, counted, then {fate}",
            ),
        )
    elif join is not None:
        lower, upper = join.bounds
        pre_stage = (
            *(_dedup_operator(spec, d) for d in spec.transform.dedup),
            OperatorChoice(
                f"{join.how} join on {', '.join(join.left_keys)} = {', '.join(join.right_keys)}",
                f"Spark stream-stream join (symmetric hash join), right time - left time in "
                f"[{lower}, {upper}] ms; withWatermark({join.lateness_ms} ms) on each side "
                "evicts state and releases outer rows; rows at or below the previous "
                "batch's watermark are taken out at each side's source, per row, counted, "
                "then "
                + ("dead-lettered with their bytes" if join.late_data == "dlq" else "dropped"),
            ),
        )
    else:
        pre_stage = (
            *(_dedup_operator(spec, d) for d in spec.transform.dedup),
            OperatorChoice(
                "[transform].sql",
                "Spark SQL over the source views" if spec.transform.sql else "(none)",
            ),
            *(
                OperatorChoice(
                    f"lookup {lookup.name} ({lookup.kind})",
                    f"batch DataFrame, cached, re-read every {lookup.refresh_interval_ms} ms; "
                    "a stream-static join in the SQL",
                )
                for lookup in spec.transform.lookups
            ),
        )
    if not spec.has_window:
        key = (
            "the row id (the stream record's Kafka position)"
            if temporal is not None
            else "the join keys, both event times and the row id"
        )
        target = OperatorChoice(
            f"target {spec.target.kind}",
            f"foreachBatch -> deltalake MERGE on {key}, txn (app id, batch id)",
        )
        return (*_SOURCE_CHOICES, *pre_stage, target)
    return (*_SOURCE_CHOICES, *pre_stage, *_window_operators(spec, folding))


def _dedup_operator(spec: PipelineSpec, dedup: DedupSpec) -> OperatorChoice:
    source = spec.dedup_source(dedup)
    fate = "dead-lettered with their bytes" if dedup.on_duplicate == "dlq" else "dropped"
    return OperatorChoice(
        f"dedup {source} on ({', '.join(dedup.keys)}) within {dedup.within_ms} ms",
        f"transformWithStateInPandas (event-time timers) over {BUCKETS} hash buckets of the "
        "keys, each row carried as one JSON string: each record held until the watermark "
        "reaches it, then, in (event time, Kafka "
        "position) order, the first of its keys passes and a later one within "
        f"within_ms of the last that passed is a duplicate, counted (observe), then {fate}",
    )


def _window_operators(spec: PipelineSpec, folding: str | None) -> tuple[OperatorChoice, ...]:
    w = spec.window
    native = w.engine == "native"
    late = (
        "none: every row is stamped with its arrival time"
        if w.time_mode == "processing"
        else "withWatermark(event_time); rows at or below the previous batch's watermark "
        "(Spark's late rule) are taken out at each source, per row, counted there "
        "(observe), then "
        + ("dead-lettered with their bytes" if w.late_data == "dlq" else "dropped")
    )
    emit = (
        "output mode update: every trigger, the windows it changed"
        if w.emit == "current"
        else "output mode append: each window once, when it closes"
    )
    kind = w.operator_text  # the family's (flow_jobs.windows)
    lateness = f"lateness_ms = {w.lateness_ms}, late_data = {w.late_data}"
    if spec.supersedes_sessions:
        emit += "; each row replaces the group's rows its bounds overlap (deleted in the MERGE)"
    if w.reopens:
        lateness += f", allowed_lateness_ms = {w.allowed_lateness_ms}"
        late = (
            f"withWatermark(event_time, {w.watermark_delay_ms} ms = lateness + allowed "
            "lateness); rows at or below the previous batch's watermark are taken out at "
            "each source, per row, counted there (observe), then dropped"
        )
        emit = (
            "output mode append: each window when the watermark + allowed_lateness_ms "
            f"passes its end, then again ({w.revision_column} + 1) in each batch that "
            "corrects it, until the watermark passes its end; the MERGE keeps the last"
        )
    ranked: tuple[OperatorChoice, ...] = ()
    if w.top_n is not None:
        top = w.top_n
        within = ", ".join(["window", *top.partition_by])
        how = (
            "foreachBatch: a batch's rows ranked with Arrow within (" + within + ") by "
            f"{', '.join(top.order_by)}, then the group keys (NULL last, NaN above every "
            f"number); the first {top.n} written"
        )
        if w.emit == "current":
            how += (
                "; every group's current row of each open window kept in the state store "
                "(window_standings), each touched partition ranked from it, and its rows "
                "that left the top deleted in the same commit"
            )
        ranked = (OperatorChoice(f"top_n = {top.n}", how),)
    return (
        OperatorChoice(f"window kind = {w.kind}", kind),
        *((OperatorChoice("pre-aggregation", folding),) if folding else ()),
        OperatorChoice(lateness, late),
        OperatorChoice(f"emit = {w.emit}", emit),
        *(
            OperatorChoice(
                f"{a.as_} = {a.agg}({a.column or ''})",
                AGGREGATORS[a.agg].native_form if native else AGGREGATORS[a.agg].state_form,
            )
            for a in w.aggregations
        ),
        *ranked,
        OperatorChoice("state", "Spark state store (RocksDB provider) in the checkpoint"),
        OperatorChoice(
            f"target {spec.target.kind}",
            f"foreachBatch -> deltalake MERGE on ({', '.join(spec.natural_key())}), "
            "txn (app id, batch id)",
        ),
    )
