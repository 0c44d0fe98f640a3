"""Stream-stream joins: Spark's native time-bounded join with watermarks.

The rules: docs/spec-reference.md, "[transform.join]".

Each side is a source view with its event time as a watermarked TIMESTAMP
(``lateness_ms``); the condition pairs equal keys (SQL equality, and explicitly: a NULL
key never matches) within ``right time - left time`` in [lower, upper]. Spark's symmetric hash join
emits each (left, right) match once, when the second of the two arrives; it derives
from the bounds and both watermarks when a buffered row can no longer match, evicts it
(state stays bounded), and only then emits an outer join's unmatched row, with NULLs
on the other side. Spark's join drops an input row whose own side's event time is at or
below the previous batch's watermark, the same rule as the windows' (checked here batch
by batch): each side's source view takes such rows out first, row by row, counts them,
and drops or dead-letters them (``late_data``; ``flow_jobs.plan.late_rows``).

Output: every column of each view (but ``_kafka``) prefixed ``left_`` / ``right_``, or
the configured ``output_*_columns`` (renames allowed), then ``join_row_id``: a hash of
both sides' Kafka positions, so a replay or a fresh checkpoint MERGEs each joined row
onto itself. The natural key is the join keys, both event times and the row id.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from flow_jobs.dead_letters import DeadLetterTable
from flow_jobs.errors import PlanError
from flow_jobs.joins.spec import JoinSpec
from flow_jobs.operators.registry import Compiled, OperatorInput, compile_operator
from flow_jobs.plan.compiled_source import CompiledSource
from flow_jobs.plan.event_time import EventTime, event_time_of
from flow_jobs.plan.frame_columns import require_column, user_columns
from flow_jobs.plan.pipelines import CompiledPipeline, PipelineInput, windowed
from flow_jobs.plan.sources import compile_source
from flow_jobs.plan.windows import compile_window
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import KAFKA_COLUMN, PipelineSpec

ROW_ID = "join_row_id"
_SIDE_TIME = {"left": "__flow_left_time", "right": "__flow_right_time"}
_HOW = {"inner": "inner", "left": "leftOuter", "right": "rightOuter", "full": "fullOuter"}
_POSITION = ("topic", "partition", "offset")


@dataclass(frozen=True)
class CompiledJoin:
    frame: DataFrame  # output columns, then both sides' watermarked times (hidden)
    columns: tuple[str, ...]  # the output columns, in order
    natural_key: tuple[str, ...]
    #: natural-key columns an outer row can leave NULL (the other side's); the rest
    #: compare with plain equality, which lets the MERGE prune target files
    nullable_key: tuple[str, ...]
    #: output column name of a side's event-time column -> that side's watermarked time
    side_times: dict[str, str]
    join: JoinSpec
    sources: tuple[CompiledSource, ...]  # left, right
    #: each side's operators (``flow_jobs.operators.registry``), in order
    operators: tuple[Compiled, ...]

    def describe(self) -> list[PlanLine]:
        """Its sources', its sides' operators' and its own lines."""
        j = self.join
        lower, upper = j.bounds
        fate = "dead-lettered with their bytes" if j.late_data == "dlq" else "dropped"
        row_id = (
            f"{ROW_ID}: a hash of both sides' Kafka positions"
            if j.row_id is None
            else f"row id ({', '.join(j.row_id)})"
        )
        return [
            *(line for s in self.sources for line in s.describe()),
            *(line for o in self.operators for line in o.describe()),
            PlanLine(
                f"{j.how} join on {', '.join(j.left_keys)} = {', '.join(j.right_keys)}",
                "Spark's stream-stream join (symmetric hash join), right time - left time in "
                f"[{lower}, {upper}] ms, a NULL key never matching; withWatermark("
                f"{j.lateness_ms} ms) on each side evicts its buffered rows and releases "
                "outer rows; late rows taken out at each side's source, then "
                f"{fate}; {row_id}",
            ),
        ]


def _ms(value: int) -> Column:
    return F.expr(f"INTERVAL {abs(value)} MILLISECONDS")


def _event_time(j: JoinSpec, side: str) -> EventTime:
    return EventTime(
        j.side_event_time(side), j.time_mode, j.max_event_time_skew_ms, j.event_time_key(side)
    )


def _shift(time: Column, ms: int) -> Column:
    return time + _ms(ms) if ms >= 0 else time - _ms(ms)


def _side(
    spark: SparkSession,
    spec: PipelineSpec,
    side: str,
    dead_letters: DeadLetterTable,
    checkpoint: str | None,
) -> tuple[DataFrame, CompiledSource, list[Compiled]]:
    join = spec.transform.join
    assert join is not None
    name = join.left_source if side == "left" else join.right_source
    index = next(i for i, s in enumerate(spec.sources) if s.name == name)
    settings = _event_time(join, side)
    # Arrival times are never late (time_mode = "processing").
    late_data = join.late_data if settings.mode == "event" else None
    source = compile_source(
        spark,
        spec.sources[index],
        index,
        settings,
        spec.name,
        dead_letters.tap(name),
        late_data,
        checkpoint,
    )
    view = source.frame
    column = settings.column
    require_column(view, settings.key, column, f"{side}_source {name!r}")
    time = event_time_of(F.col(column), view.schema[column].dataType, settings.key, column)
    timed = view.withColumn(_SIDE_TIME[side], time).withWatermark(
        _SIDE_TIME[side], f"{join.lateness_ms} milliseconds"
    )
    applied: list[Compiled] = []
    for op in spec.operators_of(name):  # on the side's watermark, its time kept after each
        given = OperatorInput(
            timed,
            name,
            op.key,
            column,
            F.col(_SIDE_TIME[side]),
            _SIDE_TIME[side],
            join.lateness_ms,
            tuple(s.topic for s in spec.sources),
            lambda part: dead_letters.tap(name, part=part),
        )
        applied.append(compile_operator(op.spec, given))
        timed = applied[-1].frame
    return timed, source, applied


def _selection(join: JoinSpec, side: str, view: DataFrame) -> list[tuple[str, str]]:
    """(view column, output name) pairs for one side, in order."""
    key = f"transform.join.output_{side}_columns"
    configured = getattr(join, f"output_{side}_columns")
    if configured is None:
        return [(c, f"{side}_{c}") for c in user_columns(view.columns)]
    pairs = (
        list(configured.items()) if isinstance(configured, dict) else [(c, c) for c in configured]
    )
    for column, _ in pairs:
        require_column(view, key, column, f"the {side} source")
    return pairs


def _position(view: DataFrame, alias: str) -> list[Column]:
    if KAFKA_COLUMN in view.columns:
        return [F.col(f"{alias}.{KAFKA_COLUMN}.{p}") for p in _POSITION]
    return [F.col(f"{alias}.{p}") for p in _POSITION]  # a raw source's own columns


def compile_join(
    spark: SparkSession,
    spec: PipelineSpec,
    dead_letters: DeadLetterTable,
    checkpoint: str | None = None,
) -> CompiledJoin:
    """``checkpoint``: the query's, where the sources read each batch's watermark."""
    join = spec.transform.join
    assert join is not None
    left, left_source, left_ops = _side(spark, spec, "left", dead_letters, checkpoint)
    right, right_source, right_ops = _side(spark, spec, "right", dead_letters, checkpoint)
    for side, view, keys in (("left", left, join.left_keys), ("right", right, join.right_keys)):
        for i, k in enumerate(keys):
            require_column(view, f"transform.join.{side}_keys[{i}]", k, f"the {side} source")

    lower, upper = join.bounds
    l_time, r_time = F.col(f"l.{_SIDE_TIME['left']}"), F.col(f"r.{_SIDE_TIME['right']}")
    condition = (r_time >= _shift(l_time, lower)) & (r_time <= _shift(l_time, upper))
    for lk, rk in zip(join.left_keys, join.right_keys, strict=True):
        left_key, right_key = F.col(f"l.{lk}"), F.col(f"r.{rk}")
        # Spark's streaming join compares key rows bytewise, so NULL meets NULL; the
        # optimizer's IS NOT NULL filters hide that except in a full join, which may
        # filter neither side. Said explicitly, NULL keys never match (the spec
        # reference's join rules).
        condition = condition & (left_key == right_key) & left_key.isNotNull()
    joined = left.alias("l").join(right.alias("r"), condition, _HOW[join.how])

    left_pairs, right_pairs = _selection(join, "left", left), _selection(join, "right", right)
    outputs = [name for _, name in left_pairs + right_pairs]
    row_id = join.row_id or [ROW_ID]
    seen: set[str] = set()
    for name in [*outputs, *([ROW_ID] if join.row_id is None else [])]:
        if name in seen:
            raise PlanError(
                "transform.join.output_left_columns",
                f"output column {name!r} appears twice; rename one side's column",
            )
        seen.add(name)
    for i, name in enumerate(join.row_id or []):
        if name not in outputs:
            raise PlanError(f"transform.join.row_id[{i}]", f"{name!r} is not an output column")

    marker_l, marker_r = F.lit("L"), F.lit("R")
    row_hash = F.xxhash64(marker_l, *_position(left, "l"), marker_r, *_position(right, "r"))
    selected = [
        *(F.col(f"l.{c}").alias(n) for c, n in left_pairs),
        *(F.col(f"r.{c}").alias(n) for c, n in right_pairs),
        *([row_hash.alias(ROW_ID)] if join.row_id is None else []),
        l_time.alias(_SIDE_TIME["left"]),
        r_time.alias(_SIDE_TIME["right"]),
    ]
    columns = (*outputs, *([ROW_ID] if join.row_id is None else []))

    side_times = {}
    natural: list[str] = []
    nullable: list[str] = []
    sides = (("left", left_pairs, join.left_keys), ("right", right_pairs, join.right_keys))
    for side, pairs, keys in sides:
        names = dict(pairs)
        side_key = [names[k] for k in keys if k in names]
        time_column = join.side_event_time(side)
        if time_column in names:
            side_key.append(names[time_column])
            side_times[names[time_column]] = _SIDE_TIME[side]
        natural += side_key
        if join.how == "full" or join.how == ("right" if side == "left" else "left"):
            nullable += side_key
    natural += [n for n in row_id if n not in natural]
    if join.row_id is not None:
        nullable += [n for n in row_id if n not in nullable]  # the user's columns: unknown
    frame = joined.select(*selected)
    return CompiledJoin(
        frame,
        columns,
        tuple(natural),
        tuple(nullable),
        side_times,
        join,
        (left_source, right_source),
        (*left_ops, *right_ops),
    )


def compile_join_pipeline(given: PipelineInput) -> CompiledPipeline:
    """The join over its two sources, then the window over the joined stream where the
    spec chains one (``chain = ["join", "window"]``)."""
    spec = given.spec
    joined = compile_join(given.spark, spec, given.dead_letters, given.checkpoint)
    if not spec.has_window:
        return CompiledPipeline(
            spec,
            joined.frame.select(*joined.columns),
            "append",
            (joined,),
            joined.natural_key,
            joined.nullable_key,
            writes_new_rows=True,
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
    compiled = compile_window(joined.frame, window, spec.name, watermarked_time=time)
    return windowed(spec, compiled, (joined, compiled))
