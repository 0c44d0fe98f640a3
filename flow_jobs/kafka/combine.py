"""Pre-aggregation in the Kafka reader: a block of decoded records becomes one partial
aggregate per (pane, group) before Spark sees it.

Spark's streaming aggregation already aggregates partially before its shuffle, but it
does so on every row the source hands it, and a string in an aggregation buffer (first /
last) turns its hash aggregation into a sort aggregation, ~3.8x slower here
(BENCHMARKS.md). The reader holds the decoded records as Arrow columns anyway, so it
folds them with Arrow's hash aggregation (C++) into partials, and Spark merges partials:
a block of 500,000 clicks over 1,000 users in one 60 s window reaches Spark as 1,000
rows. It is what Flink calls local-global aggregation, done where the data already is.

What makes it exact, whatever the cut (``tests/test_combine.py`` checks each rule):

* **Only rows Spark would aggregate are folded.** A row is folded only if Arrow decoded
  it, its event time is present and in range, it is not ahead of the micro-batch's
  processing time by more than ``max_event_time_skew_ms`` (the batch's
  ``batchTimestampMs``, what ``current_timestamp()`` is in that batch, read from the
  offset log like the late watermark), and it is not late (event time after the previous
  batch's watermark). Every other row passes through as it is, to the checks and
  dead-letter tap of ``flow_jobs.plan.sources``. Without the offset log's stamps (a
  source read without a checkpoint) nothing is folded.
* **Panes, not windows.** Rows fold per pane of gcd(duration, hop) (the duration for a
  tumbling window): every window boundary is a pane boundary, so a pane lies wholly
  inside each window that holds any of its rows, and the partial's event time, the
  highest of its rows, puts it in exactly those windows through Spark's own ``window()``.
  That highest time is also what Spark's watermark takes the maximum of.
* **Sessions, for a session window.** A group's rows of the block, in event-time order,
  fold into one partial while each is at most the gap after the one before: what
  Spark's ``session_window`` merges them into, [first, last + gap). The partial carries
  its lowest time (``start``) beside the highest, and the window gives it the session
  [start, highest + gap) (``flow_jobs.plan.windows``), which Spark merges with the
  other rows' and partials' sessions as it would have merged the rows': a union of
  overlapping (or touching) intervals does not depend on the order it is taken in.
* **Mergeable parts**: rows (``n``), and per aggregated field the parts its aggregators
  merge, each a ``flow_jobs.partial_parts.PartialPart`` that folds itself
  with Arrow's hash aggregation: non-NULL values (``nn``), sums (``sum``; ``dsum`` as
  DOUBLE for ``avg``, which Spark sums as DOUBLE), minima and maxima with Spark's NaN rule
  (NaN above every number: Arrow skips NaN, so it is put back), and for first / last the
  row's (event time, offset, value) at the lowest / highest (event time, offset) among
  non-NULL values; Spark compares them with its own rows' by (event time, lane, offset).
* **Behind a simple ``[transform].sql``** (``CombinePlan.stage``, ``flow_jobs.kafka.prestage``)
  a folding row is one the SQL's filter keeps (TRUE); the aggregated columns are the
  SQL's. A row the filter drops (FALSE or NULL) would still count at its source and move
  its watermark in Spark, so it folds too, into a partial marked not kept (``KEPT``) with
  NULL keys and values, which Spark counts and then filters out. Whatever the stage
  cannot evaluate exactly (an Arrow error) leaves the chunk to Spark.
* **No overflow.** A chunk whose integers could take a block's sum out of BIGINT
  (|value| x (block rows + chunk rows) >= 2^62) is not folded: Spark's ``try_sum`` then
  sees its rows one by one, as before (each part says whether it could: ``may_overflow``).

This module holds what the driver and the reader agree on: the plan (``CombinePlan``) and
the partial struct it lays out (``partial_type``); the folding itself is
``flow_jobs.kafka.folding`` (``Folder``). The reader (``flow_jobs.kafka.read.read_folded``)
builds full Kafka rows (key, value, headers, ...) only for the records that pass through;
a folded record's bytes are never copied.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass

import pyarrow as pa

from flow_jobs.kafka.prestage import Stage
from flow_jobs.partial_parts import (
    TIMESTAMP_US,
    PartialPart,
    in_struct_order,
    partial_part,
)

#: The reader's column holding a row's partial aggregate (NULL on a record passed through).
PARTIAL = "_partial"

_TS = TIMESTAMP_US
#: With a filtering pre-stage: FALSE on a partial of records the filter drops (they count
#: as the source's records and move its watermark, as in Spark, then leave).
KEPT = "kept"
#: A session partial's lowest event time (its highest is the partial row's event time).
START = "start"


@dataclass(frozen=True)
class CombinePlan:
    """What the reader folds: the payload's event-time field (epoch ms) or ``_event_ts``,
    the pane, the skew bound, the group keys, and per aggregated field the names of the
    parts it needs (``flow_jobs.partial_parts``); with ``stage``, the simple
    ``[transform].sql`` the rows go through first (``flow_jobs.kafka.prestage``: the keys and
    the time are payload fields it passes on, an aggregated field may be a column it
    computes)."""

    time_field: str
    pane_ms: int
    skew_ms: int
    keys: tuple[str, ...]
    fields: tuple[tuple[str, tuple[str, ...]], ...]
    #: False: the query merges partials (its checkpoint's layout) but the reader folds none
    fold: bool = True
    stage: Stage | None = None
    #: > 0: a session window's gap; rows fold per session of the block, not per pane
    gap_ms: int = 0
    #: the modules registering parts from outside flow_jobs, imported where the plan is
    #: read (the reader's processes know only the built-in parts by themselves)
    imports: tuple[str, ...] = ()

    @property
    def filters(self) -> bool:
        return self.stage is not None and self.stage.where is not None

    def slot(self, field: str) -> int:
        return [f for f, _ in self.fields].index(field)

    def parts(self, slot: int) -> list[PartialPart]:
        """The parts field ``slot`` needs, in their order in the partial struct."""
        return [partial_part(n) for n in in_struct_order(self.fields[slot][1])]

    def to_json(self) -> str:
        return json.dumps(
            {
                "time_field": self.time_field,
                "pane_ms": self.pane_ms,
                "skew_ms": self.skew_ms,
                "keys": list(self.keys),
                "fields": [[f, list(parts)] for f, parts in self.fields],
                "fold": self.fold,
                "stage": None if self.stage is None else self.stage.to_json(),
                "gap_ms": self.gap_ms,
                "imports": list(self.imports),
            }
        )

    @staticmethod
    def from_json(text: str) -> CombinePlan:
        d = json.loads(text)
        imports = tuple(d.get("imports", ()))
        for module in imports:  # they register their parts as they are imported
            importlib.import_module(module)
        return CombinePlan(
            d["time_field"],
            int(d["pane_ms"]),
            int(d["skew_ms"]),
            tuple(d["keys"]),
            tuple((f, tuple(parts)) for f, parts in d["fields"]),
            bool(d.get("fold", True)),
            Stage.from_json(d["stage"]) if d.get("stage") else None,
            int(d.get("gap_ms", 0)),
            imports,
        )

    def field_type(self, name: str, payload: pa.Schema) -> pa.DataType:
        """An aggregated field's type: computed by the stage, or the payload's."""
        computed = self.stage.types() if self.stage is not None else {}
        return computed[name] if name in computed else payload.field(name).type


def partial_type(plan: CombinePlan, payload: pa.Schema) -> pa.StructType:
    """The partial struct: ``n`` (and for a session, ``start``: its lowest event time),
    then per field ``<part><slot>`` for each part it needs."""
    fields = [pa.field("n", pa.int64())]
    if plan.gap_ms:
        fields.append(pa.field(START, _TS))
    for i, (name, _) in enumerate(plan.fields):
        value = plan.field_type(name, payload)
        fields += [pa.field(f"{p.name}{i}", p.arrow_type(value)) for p in plan.parts(i)]
    if plan.filters:
        fields.append(pa.field(KEPT, pa.bool_()))
    return pa.struct(fields)
