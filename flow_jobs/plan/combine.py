"""Which windows pre-aggregate in the Kafka reader (``flow_jobs.io.combine``): each
aggregator says which partial parts it merges (``Aggregator.partial_parts``, ``folds``);
how Spark merges them is ``flow_jobs.aggregations.partials``.

A window pre-aggregates when everything it reads comes straight from one JSON source that
Arrow decodes: no ``[transform].sql`` nor lookups, a tumbling or hopping window on the
native engine in event time, the event time an epoch-milliseconds field of the payload
(or ``_event_ts``), group keys of a type Spark and Arrow group alike (STRING, integers,
BOOLEAN: a DOUBLE key has NaN and -0.0 rules of its own), and only count, sum, avg, min,
max, first and last over payload fields (sum / avg over integers or DOUBLE, min / max
over those or STRING). Anything else runs as before; ``flow-jobs validate --plan`` says
which.

Spark then aggregates each row as a partial of one where the reader did not fold it:
``count`` is the sum of ``n``, ``sum`` the ``try_sum`` of partial sums, ``avg`` the sum
of DOUBLE sums over the sum of counts, ``min`` / ``max`` the extreme of partial extremes,
``first`` / ``last`` the lowest / highest ``struct(event time, lane, offset, value)``.
These aggregation buffers differ from the plain ones, so the choice belongs to the
checkpoint: a new checkpoint takes it (``pre_aggregate = true``, the default) and the
run marks it as its query starts (``flow_pre_aggregate`` in the checkpoint folder); a
checkpoint that ran before without the mark keeps the plain aggregation for good. With
``pre_aggregate = false`` a marked checkpoint keeps the merging aggregation and the
reader folds nothing.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    IntegerType,
    IntegralType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from flow_jobs.aggregations import AGGREGATORS
from flow_jobs.io.checkpoint_files import CheckpointFiles, logged_batches
from flow_jobs.io.combine import CombinePlan
from flow_jobs.io.json_decode import arrow_schema
from flow_jobs.spec.models import EVENT_TS, PipelineSpec
from flow_jobs.windows import FixedWindow

#: A checkpoint whose windows merge partials carries this file.
MARKER = "flow_pre_aggregate"

_KEY_TYPES = (StringType, LongType, IntegerType, ShortType, ByteType, BooleanType)


def foldable(spec: PipelineSpec, payload: StructType | None) -> CombinePlan | None:
    """The reader's plan for ``spec`` if its window can pre-aggregate, else None
    (``payload``: the source's declared schema)."""
    w, t = spec.transform.window, spec.transform
    if w is None or t.join is not None or t.sql or t.lookups or payload is None:
        return None
    source = spec.sources[0]
    if w.engine != "native" or not (source.registry_format or source.decoder == "auto"):
        return None  # JSON by from_json alone: no Arrow rows to fold
    if not isinstance(w, FixedWindow) or w.time_mode != "event":
        return None  # a set of panes: tumbling and hopping windows
    if source.format == "json" and arrow_schema(payload.json()) is None:
        return None
    types = {f.name: f.dataType for f in payload.fields}
    time = w.event_time_column
    if time != EVENT_TS and not isinstance(types.get(time), IntegralType):
        return None
    if not all(isinstance(types.get(k), _KEY_TYPES) for k in w.group_by):
        return None
    fields: dict[str, set[str]] = {}
    for a in w.aggregations:
        unit = AGGREGATORS[a.agg]
        value = types.get(a.column) if a.column is not None else None
        if unit.partial_parts is None or (a.column is not None and value is None):
            return None
        if not unit.folds(value):
            return None
        if a.column is not None:
            fields.setdefault(a.column, set()).update(unit.partial_parts)
    return CombinePlan(
        time,
        w.pane_ms,
        w.max_event_time_skew_ms,
        tuple(w.group_by),
        tuple((f, tuple(sorted(parts))) for f, parts in fields.items()),
        fold=w.pre_aggregate,
    )


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
            MARKER, "partial aggregates from the Kafka reader (flow_jobs.plan.combine)\n"
        )


def describe(spec: PipelineSpec, payload: Any) -> str | None:
    """The ``validate --plan`` line of a window that pre-aggregates, or None."""
    plan = foldable(spec, payload)
    if plan is None:
        return None
    keys = ", ".join(plan.keys) or "no key"
    state = "on" if plan.fold else "off (pre_aggregate = false)"
    return (
        f"{state}: the Kafka reader folds each block of decoded records into one partial "
        f"per ({plan.pane_ms} ms pane, {keys}) with Arrow; Spark merges the partials "
        "(new checkpoints; one that ran without it keeps the plain aggregation)"
    )
