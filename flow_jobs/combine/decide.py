"""Which windows pre-aggregate in the Kafka reader (``flow_jobs.kafka.combine``): each
aggregator says which partial parts it merges (``Aggregator.partial_parts``, ``folds``),
and each part how it folds in the reader and merges in Spark
(``flow_jobs.partial_parts``); this module knows none of them by name.

A window pre-aggregates when everything it reads comes from one JSON (or registry-format)
source that Arrow decodes, straight or through a ``[transform].sql`` that is a simple
projection and filter (``flow_jobs.combine.sql``: the reader evaluates it), without
lookups: a window on the native engine in event time whose family says how rows fold
(``WindowSpec.pane_folding``: per pane, or per session), the event time an
epoch-milliseconds field of the payload
(or ``_event_ts``), group keys of a type Spark and Arrow group alike (STRING, integers,
BOOLEAN: a DOUBLE key has NaN and -0.0 rules of its own), and only aggregators that merge
partial parts, over payload fields or columns the SQL computes, of types they fold (built
in: count, sum, avg, min, max, first and last; sum / avg over integers or DOUBLE, min /
max over those or STRING; behind SQL, a part ordering equal times by Kafka position, as
first / last do, only where it keeps ``_kafka``). The keys and the event time must be
payload fields the SQL passes on (a key may be renamed). Anything else runs as before;
``flow-jobs validate --plan`` says which, and why.

Spark then aggregates each row as a partial of one where the reader did not fold it
(each part's ``of_row``): ``count`` is the sum of ``n``, ``sum`` the ``try_sum`` of
partial sums, ``avg`` the sum of DOUBLE sums over the sum of counts, ``min`` / ``max``
the extreme of partial extremes, ``first`` / ``last`` the lowest / highest
``struct(event time, lane, offset, value)``.
These aggregation buffers differ from the plain ones, so the choice belongs to the
checkpoint: a new checkpoint takes it (``pre_aggregate = true``, the default) and the
run marks it as its query starts (``flow_pre_aggregate`` in the checkpoint folder); a
checkpoint that ran before without the mark keeps the plain aggregation for good. With
``pre_aggregate = false`` a marked checkpoint keeps the merging aggregation and the
reader folds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    IntegerType,
    IntegralType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from flow_jobs.aggregations import AGGREGATORS
from flow_jobs.combine.sql import SPARK_TYPES, PreStage
from flow_jobs.io.checkpoint_files import CheckpointFiles, logged_batches
from flow_jobs.kafka.combine import CombinePlan
from flow_jobs.kafka.json_decode import arrow_schema
from flow_jobs.partial_parts import PartialPart, in_struct_order, plug_in_modules
from flow_jobs.plan_lines import PlanLine
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.models import KAFKA_COLUMN, PipelineSpec

#: A checkpoint whose windows merge partials carries this file.
MARKER = "flow_pre_aggregate"

_KEY_TYPES = (StringType, LongType, IntegerType, ShortType, ByteType, BooleanType)


def shape_folds(spec: PipelineSpec, payload: StructType | None) -> str | None:
    """Why the window cannot pre-aggregate whatever its SQL does, or None if it may."""
    w, t = spec.transform.window, spec.transform
    if w is None or t.stages()[0] is not w:
        return "only a window over a source folds (not a join)"
    if t.lookups:
        return "[transform].sql joins a lookup"
    if spec.operators():
        table = spec.operators()[0].key.partition("[")[0]
        return f"[[{table}]] runs on the records one by one before the window"
    source = spec.sources[0]
    if w.engine != "native":
        return f"the window runs on Spark's state API ({w.state_reason})"
    if payload is None:
        return "the source has no payload schema"
    if not (source.registry_format or source.decoder == "auto"):
        return "the source is decoded by from_json alone (decoder)"
    if w.time_mode != "event":
        return "only windows in event time fold"
    if w.pane_folding() is None:
        return f'kind = "{w.kind}" windows do not fold: their bounds are not panes or sessions'

    if source.format == "json" and arrow_schema(payload.json()) is None:
        return "Arrow does not decode the source's schema"
    return None


def foldable(
    spec: PipelineSpec, payload: StructType | None, prestage: PreStage | str | None = None
) -> CombinePlan | str:
    """The reader's plan for ``spec`` if its window can pre-aggregate, else why not
    (``payload``: the first source's payload schema; ``prestage``: its ``[transform].sql``
    as ``flow_jobs.combine.sql`` reads it, or why it cannot be evaluated in the reader)."""
    reason = shape_folds(spec, payload)
    if reason is not None:
        return reason
    if isinstance(prestage, str):
        return f"[transform].sql: {prestage}"
    w = spec.window
    folding = w.pane_folding()
    assert payload is not None and folding is not None
    types: dict[str, DataType] = {f.name: f.dataType for f in payload.fields}

    def origin(name: str) -> str | None:  # the payload field an output column reads as is
        return prestage.reference(name) if prestage is not None else name

    time = w.event_time_column
    if origin(time) != time:
        return f"[transform].sql does not pass {time} on as it is"
    if time != EVENT_TS and not isinstance(types.get(time), IntegralType):
        return f"the event time {time} is not epoch milliseconds of the payload"
    keys = [origin(k) for k in w.group_by]
    for k, src in zip(w.group_by, keys, strict=True):
        if src is None or not isinstance(types.get(src), _KEY_TYPES):
            return f"group key {k} is not a payload field of type STRING, integer or BOOLEAN"
    fields: dict[str, dict[str, PartialPart]] = {}
    positional: list[str] = []  # aggregations ordering equal event times by Kafka position
    for a in w.aggregations:
        unit = AGGREGATORS[a.agg]
        value = _column_type(a.column, types, prestage)
        if unit.partial_parts is None or (a.column is not None and value is None):
            return f"{a.as_} = {a.agg}({a.column or ''}) does not fold"
        if not unit.folds(value):
            return f"{a.as_} = {a.agg}({a.column or ''}) does not fold over {value}"
        if a.column is not None:
            fields.setdefault(a.column, {}).update((p.name, p) for p in unit.partial_parts)
            if any(p.orders_by_position for p in unit.partial_parts):
                positional.append(f"{a.as_} = {a.agg}({a.column})")
    if prestage is not None and positional and origin(KAFKA_COLUMN) != KAFKA_COLUMN:
        return (
            f"{positional[0]} orders equal event times by Kafka position, which "
            f"[transform].sql keeps only with {KAFKA_COLUMN} in its SELECT"
        )
    stage = None
    if prestage is not None:
        stage = prestage.stage(set(types), list(fields))
        clash = set(stage.types()) & set(keys)
        if clash:
            return f"[transform].sql computes {sorted(clash)[0]}, also a group key's field"
    return CombinePlan(
        time,
        folding.pane_ms,
        w.max_event_time_skew_ms,
        tuple(k for k in keys if k is not None),
        tuple((f, tuple(in_struct_order(ps))) for f, ps in fields.items()),
        fold=w.pre_aggregate,
        stage=stage,
        gap_ms=folding.gap_ms,
        imports=plug_in_modules(p for ps in fields.values() for p in ps.values()),
    )


def _column_type(
    column: str | None, types: dict[str, DataType], prestage: PreStage | None
) -> DataType | None:
    """The type of an aggregated column: the payload field's, or the SQL's output's where
    the reader computes it (None: no column, or not one the reader has)."""
    if column is None:
        return None
    if prestage is None:
        return types.get(column)
    e = prestage.outputs.get(column)
    if e is None or e["type"] not in SPARK_TYPES:
        return None
    return SPARK_TYPES[e["type"]]


def checkpoint_merges(plan: CombinePlan, checkpoint: CheckpointFiles | None) -> bool:
    """Whether the query on ``checkpoint`` merges partials: a marked checkpoint does; a new
    one does when ``pre_aggregate`` is on (the run marks it as its query starts:
    ``mark_checkpoint``); one that ran without the mark does not (its state holds the
    plain aggregation's buffers). Reads only: compiling (``validate --plan`` too) leaves
    the checkpoint as it is."""
    if checkpoint is None:
        return False
    if checkpoint.exists(MARKER):
        return True
    try:
        ran = bool(logged_batches(checkpoint, "offsets"))
    except FileNotFoundError:
        ran = False
    return plan.fold and not ran


def mark_checkpoint(checkpoint: CheckpointFiles) -> None:
    """Mark a checkpoint whose query merges partials (before the query starts on it)."""
    if not checkpoint.exists(MARKER):
        checkpoint.write_text(
            MARKER,
            "partial aggregates from the Kafka reader (flow_jobs.combine.decide)\n",
        )


@dataclass(frozen=True)
class ReaderFolding:
    """The window's pre-aggregation in the reader, as compiled: ``decision`` is what the
    spec allows (``foldable``: a plan, or why not), ``merges`` whether the checkpoint
    takes partials (``checkpoint_merges``; None: compiled without a checkpoint), and
    ``prestage`` the ``[transform].sql`` as the reader evaluates it."""

    decision: CombinePlan | str
    merges: bool | None
    prestage: PreStage | None
    sql: str | None

    @property
    def plan(self) -> CombinePlan | None:
        """What the query runs with: the plan where the checkpoint takes partials."""
        return self.decision if isinstance(self.decision, CombinePlan) and self.merges else None

    def describe(self) -> list[PlanLine]:
        lines = [PlanLine("pre-aggregation", self._folding())]
        if self.sql:
            lines.append(PlanLine("[transform].sql", self._sql()))
        return lines

    def _folding(self) -> str:
        decision, plan = self.decision, self.plan
        if isinstance(decision, str):
            return f"off: {decision}; Spark aggregates every record"
        if plan is None:
            why = (
                "pre_aggregate = false"
                if not decision.fold
                else "compiled without a checkpoint"
                if self.merges is None
                else "this checkpoint ran without it: its state holds the plain aggregation's "
                "buffers (a new checkpoint folds)"
            )
            return f"off ({why}); Spark aggregates every record"
        if not plan.fold:
            return (
                "off (pre_aggregate = false): the reader folds nothing, and Spark's "
                "aggregation keeps merging partial buffers, as this checkpoint's state holds"
            )
        keys = ", ".join(plan.keys) or "no key"
        behind = " after evaluating [transform].sql on them" if plan.stage is not None else ""
        unit = (
            f"session of records at most {plan.gap_ms} ms apart"
            if plan.gap_ms
            else f"{plan.pane_ms} ms pane"
        )
        return (
            f"on: the Kafka reader folds each block of decoded records{behind} into one "
            f"partial per ({unit}, {keys}) with Arrow; Spark's aggregation merges the "
            "partials with the rows it did not fold"
        )

    def _sql(self) -> str:
        plan = self.plan
        if plan is None or self.prestage is None:
            return "Spark SQL over the source views"
        if plan.fold:
            return (
                "evaluated in the Kafka reader with Arrow on the records it folds, from "
                "Spark's optimized plan of it; by Spark, the same expressions, on the rest"
            )
        return "by Spark, the expressions of its optimized plan (the reader folds nothing)"
