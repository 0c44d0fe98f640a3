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
* **Mergeable parts**: rows (``n``), non-NULL values (``nn``), sums (``sum``; ``dsum`` as
  DOUBLE for ``avg``, which Spark sums as DOUBLE), minima and maxima with Spark's NaN rule
  (NaN above every number: Arrow skips NaN, so it is put back), and for first / last the
  row's (event time, offset, value) at the lowest / highest (event time, offset) among
  non-NULL values; Spark compares them with its own rows' by (event time, lane, offset).
* **Behind a simple ``[transform].sql``** (``CombinePlan.stage``, ``flow_jobs.io.prestage``)
  a folding row is one the SQL's filter keeps (TRUE); the aggregated columns are the
  SQL's. A row the filter drops (FALSE or NULL) would still count at its source and move
  its watermark in Spark, so it folds too, into a partial marked not kept (``KEPT``) with
  NULL keys and values, which Spark counts and then filters out. Whatever the stage
  cannot evaluate exactly (an Arrow error) leaves the chunk to Spark.
* **No overflow.** A chunk whose integers could take a block's sum out of BIGINT
  (|value| x (block rows + chunk rows) >= 2^62) is not folded: Spark's ``try_sum`` then
  sees its rows one by one, as before.

The reader (``flow_jobs.kafka.read.read_folded``) builds full Kafka rows (key, value, headers,
...) only for the records that pass through; a folded record's bytes are never copied.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flow_jobs.io.prestage import Stage

#: The reader's column holding a row's partial aggregate (NULL on a record passed through).
PARTIAL = "_partial"
#: Records folded at once per Kafka partition range (more: fewer partials, more memory).
BLOCK_ROWS = 500_000

#: The Kafka timestamp column (``flow_jobs.spec.models.EVENT_TS``; io does not import spec).
EVENT_TS = "_event_ts"
_DECODED, _UNDECODED, _CORRUPT = "_decoded", "_undecoded", "__flow_corrupt_record"
_TS = pa.timestamp("us", tz="UTC")
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999
_SUM_BOUND = 1 << 62
#: Parts a payload field may need, in the order of the partial struct's fields.
PARTS = ("nn", "sum", "dsum", "min", "max", "first", "last")
#: With a filtering pre-stage: FALSE on a partial of records the filter drops (they count
#: as the source's records and move its watermark, as in Spark, then leave).
KEPT = "kept"
#: A session partial's lowest event time (its highest is the partial row's event time).
START = "start"


@dataclass(frozen=True)
class CombinePlan:
    """What the reader folds: the payload's event-time field (epoch ms) or ``_event_ts``,
    the pane, the skew bound, the group keys, and per aggregated field the parts needed;
    with ``stage``, the simple ``[transform].sql`` the rows go through first
    (``flow_jobs.io.prestage``: the keys and the time are payload fields it passes on,
    an aggregated field may be a column it computes)."""

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

    @property
    def filters(self) -> bool:
        return self.stage is not None and self.stage.where is not None

    def slot(self, field: str) -> int:
        return [f for f, _ in self.fields].index(field)

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
            }
        )

    @staticmethod
    def from_json(text: str) -> CombinePlan:
        d = json.loads(text)
        return CombinePlan(
            d["time_field"],
            int(d["pane_ms"]),
            int(d["skew_ms"]),
            tuple(d["keys"]),
            tuple((f, tuple(parts)) for f, parts in d["fields"]),
            bool(d.get("fold", True)),
            Stage.from_json(d["stage"]) if d.get("stage") else None,
            int(d.get("gap_ms", 0)),
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
    for i, (name, parts) in enumerate(plan.fields):
        value = plan.field_type(name, payload)
        for part in PARTS:
            if part not in parts:
                continue
            if part == "nn":
                fields.append(pa.field(f"nn{i}", pa.int64()))
            elif part == "sum":
                fields.append(pa.field(f"sum{i}", _sum_type(value)))
            elif part == "dsum":
                fields.append(pa.field(f"dsum{i}", pa.float64()))
            elif part in ("min", "max"):
                fields.append(pa.field(f"{part}{i}", value))
            else:
                fields.append(pa.field(f"{part}{i}", _positional_type(value)))
    if plan.filters:
        fields.append(pa.field(KEPT, pa.bool_()))
    return pa.struct(fields)


def _sum_type(value: pa.DataType) -> pa.DataType:
    return pa.float64() if pa.types.is_floating(value) else pa.int64()


def _positional_type(value: pa.DataType) -> pa.StructType:
    return pa.struct([("t", _TS), ("pos", pa.int64()), ("v", value)])


_DDL = {
    pa.int64(): "BIGINT",
    pa.int32(): "INT",
    pa.int16(): "SMALLINT",
    pa.int8(): "TINYINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.string(): "STRING",
    _TS: "TIMESTAMP",
}


def ddl(data_type: pa.DataType) -> str:
    """Spark DDL of a partial struct (for the data source's schema)."""
    if pa.types.is_struct(data_type):
        inner = ", ".join(
            f"{data_type.field(i).name}: {ddl(data_type.field(i).type)}"
            for i in range(data_type.num_fields)
        )
        return f"STRUCT<{inner}>"
    return _DDL[data_type]


class Folder:
    """Folds one Kafka partition range chunk by chunk, the reader's way
    (``flow_jobs.kafka.read.read_folded``): each chunk's foldable rows join the block, and the
    block becomes partial rows once it holds ``block_rows`` (and at the range's end)."""

    def __init__(
        self,
        plan: CombinePlan,
        payload: pa.Schema,
        meta: RangeRows,
        batch_ts_ms: int | None,
        late_watermark_ms: int | None,
        block_rows: int = BLOCK_ROWS,
    ) -> None:
        self.plan, self.payload, self.meta = plan, payload, meta
        self.batch_ts_ms, self.late_watermark_ms = batch_ts_ms, late_watermark_ms
        self.block_rows = block_rows
        self.block = Block(plan)

    def add(
        self,
        decoded: pa.StructArray,
        undecoded: np.ndarray,
        offsets: np.ndarray,
        kafka_us: tuple[np.ndarray, np.ndarray] | None,
    ) -> np.ndarray:
        """Fold what can be of a chunk; returns where it did (the rest passes through).
        With a filtering stage, a record it drops folds too, into a partial marked not
        kept (``KEPT``): Spark counts it and takes its time, then filters it out."""
        none = np.zeros(len(undecoded), dtype=bool)
        if self.batch_ts_ms is None or not self.plan.fold:
            return none
        time_us, ok = fold_mask(
            decoded, undecoded, kafka_us, self.plan, self.batch_ts_ms, self.late_watermark_ms
        )
        kept = None
        if self.plan.stage is not None and ok.any():
            try:
                decoded, kept = self.plan.stage.apply(decoded, self.block.payload_names)
            except (pa.ArrowException, ValueError):
                return none  # Spark evaluates the SQL on these rows (flow_jobs.io.prestage)
        summed = ok if kept is None else ok & kept
        if summed.any() and may_overflow(decoded, self.plan, summed, self.block_rows + len(ok)):
            ok[:] = False  # Spark's try_sum sees these rows one by one
        if ok.any():
            self.block.add(decoded, time_us, offsets, ok, kept)
        return ok

    @property
    def full(self) -> bool:
        return self.block.rows >= self.block_rows

    def emit(self) -> pa.Table | None:
        """The block's partial rows (None: nothing folded since the last emit)."""
        rows = self.block.take()
        if rows is None:
            return None
        return self.meta.partial_rows(rows, rows.group(self.plan), self.plan, self.payload)


def fold_mask(
    decoded: pa.StructArray,
    undecoded: np.ndarray,
    kafka_us: tuple[np.ndarray, np.ndarray] | None,
    plan: CombinePlan,
    batch_ts_ms: int,
    late_watermark_ms: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's event time (epoch µs) and whether it folds: Arrow decoded it, its event
    time is present and in range, not past the batch time + skew, and not late.
    ``kafka_us``: the Kafka timestamps (µs) and where present, for ``_event_ts``."""
    if kafka_us is not None:
        time_us, ok = kafka_us
        ok = ok.copy()
    else:
        ms = decoded.field(plan.time_field)
        ok = ms.is_valid().to_numpy(zero_copy_only=False) & decoded.is_valid().to_numpy(
            zero_copy_only=False
        )
        values = ms.cast(pa.int64()).fill_null(0).to_numpy()
        ok &= (values >= _MIN_MS) & (values <= _MAX_MS)
        time_us = np.where(ok, values, 0) * 1000
    ok &= ~undecoded
    ok &= np.floor_divide(time_us, 1000) <= batch_ts_ms + plan.skew_ms
    if late_watermark_ms is not None:
        ok &= time_us > late_watermark_ms * 1000
    return time_us, ok


def may_overflow(decoded: pa.StructArray, plan: CombinePlan, ok: np.ndarray, rows: int) -> bool:
    """Whether an integer sum over ``rows`` rows of these values could leave BIGINT (the
    rows are then not folded, and Spark's try_sum sees each of them)."""
    for name, parts in plan.fields:
        values = decoded.field(name)
        if not ({"sum", "dsum"} & set(parts)) or not pa.types.is_integer(values.type):
            continue
        kept = values.filter(pa.array(ok)).drop_null().cast(pa.int64()).to_numpy()
        if len(kept) and max(abs(int(kept.min())), abs(int(kept.max()))) * rows >= _SUM_BOUND:
            return True
    return False


class Block:
    """Rows of one Kafka partition range to fold, gathered chunk by chunk (only the
    columns folding reads: no Kafka bytes are kept)."""

    def __init__(self, plan: CombinePlan) -> None:
        self.plan = plan
        self.names = sorted({*plan.keys, *(f for f, _ in plan.fields)})
        computed = plan.stage.types() if plan.stage is not None else {}
        #: the payload fields read as they are (the rest a stage computes)
        self.payload_names = [n for n in self.names if n not in computed]
        self.chunks: list[tuple[dict[str, pa.Array], np.ndarray, np.ndarray, Any]] = []
        self.rows = 0

    def add(
        self,
        decoded: pa.StructArray,
        time_us: np.ndarray,
        offsets: np.ndarray,
        ok: np.ndarray,
        kept: np.ndarray | None = None,
    ) -> None:
        mask = None if ok.all() else pa.array(ok)
        fields = {}
        for name in self.names:
            column = decoded.field(name)
            fields[name] = column if mask is None else column.filter(mask)
        self.chunks.append((fields, time_us[ok], offsets[ok], None if kept is None else kept[ok]))
        self.rows += int(ok.sum())

    def take(self) -> Folded | None:
        """The gathered rows, and an empty block again."""
        if not self.chunks:
            return None
        chunks, self.chunks, self.rows = self.chunks, [], 0
        fields = {n: pa.concat_arrays([c[0][n] for c in chunks]) for n in self.names}
        times = np.concatenate([c[1] for c in chunks])
        offsets = np.concatenate([c[2] for c in chunks])
        kept = None if not self.plan.filters else np.concatenate([c[3] for c in chunks])
        return Folded.build(fields, times, offsets, kept)


@dataclass
class Folded:
    """The rows to fold: their event times and offsets, each row's rank in (event time,
    offset) order and the payload fields by name."""

    times: np.ndarray
    offsets: np.ndarray
    rank: np.ndarray
    order: np.ndarray  # order[rank] = row
    fields: dict[str, pa.Array]
    #: where the stage's filter kept the row (None: no stage); a dropped row's keys and
    #: values are NULL here, so its partial only counts rows and carries their time
    kept: np.ndarray | None = None

    @staticmethod
    def build(
        fields: dict[str, pa.Array],
        times: np.ndarray,
        offsets: np.ndarray,
        kept: np.ndarray | None = None,
    ) -> Folded:
        order = np.lexsort((offsets, times))  # by event time, then offset
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order), dtype=order.dtype)
        if kept is not None and not kept.all():
            dropped = pa.array(~kept)
            fields = {n: pc.if_else(dropped, pa.scalar(None, a.type), a) for n, a in fields.items()}
        return Folded(times, offsets, rank.astype(np.int64), order, fields, kept)

    def group(self, plan: CombinePlan) -> pa.Table:
        """One row per (pane or session, keys[, kept]): the aggregates of Arrow's hash
        aggregation."""
        if plan.gap_ms:
            pane = self.sessions(plan)
        else:
            pane = np.floor_divide(self.times, plan.pane_ms * 1000)
        work: dict[str, pa.Array] = {"__pane": pa.array(pane), "__t": pa.array(self.times)}
        keys = ["__pane"]
        if self.kept is not None:
            work["__kept"] = pa.array(self.kept)
            keys.append("__kept")
        for j, key in enumerate(plan.keys):
            work[f"__k{j}"] = self.fields[key]
            keys.append(f"__k{j}")
        aggs: list[tuple[str, str]] = [("__t", "max"), ("__t", "count")]
        if plan.gap_ms:
            aggs.append(("__t", "min"))
        for i, (name, parts) in enumerate(plan.fields):
            value = self.fields[name]
            work[f"__v{i}"] = value
            valid = value.is_valid().to_numpy(zero_copy_only=False)
            if {"nn", "min", "max"} & set(parts):
                aggs.append((f"__v{i}", "count"))
            if "sum" in parts:
                aggs.append((f"__v{i}", "sum"))
            if "dsum" in parts:
                work[f"__d{i}"] = value.cast(pa.float64())
                aggs.append((f"__d{i}", "sum"))
            for part in ("min", "max"):
                if part in parts:
                    aggs.append((f"__v{i}", part))
            if pa.types.is_floating(value.type) and {"min", "max"} & set(parts):
                nan = np.isnan(value.fill_null(0.0).to_numpy()) & valid
                work[f"__nan{i}"] = pa.array(nan.astype(np.int64))
                aggs.append((f"__nan{i}", "sum"))
            if {"first", "last"} & set(parts):
                work[f"__r{i}"] = pa.array(self.rank, mask=~valid)
                aggs += [(f"__r{i}", "min"), (f"__r{i}", "max")]
        return pa.table(work).group_by(keys, use_threads=False).aggregate(aggs)

    def sessions(self, plan: CombinePlan) -> np.ndarray:
        """Each row's session in the block: the rows of one group (keys, and kept or
        not), in event-time order, break where the next is more than ``gap_ms`` after the
        last (Spark's ``session_window``: a row at or before a session's end, last + gap,
        joins it; ``tests/test_spark_contracts.py``); numbered in that order."""
        codes = [
            pc.dictionary_encode(self.fields[k])
            .indices.fill_null(-1)
            .to_numpy(zero_copy_only=False)
            for k in plan.keys
        ]
        if self.kept is not None:
            codes.append(self.kept.astype(np.int64))
        order = np.lexsort((self.times, *reversed(codes)))  # by group, then event time
        times = self.times[order]
        breaks = np.zeros(len(order), dtype=bool)
        breaks[1:] = np.diff(times) > plan.gap_ms * 1000
        for c in codes:
            ordered = c[order]
            breaks[1:] |= ordered[1:] != ordered[:-1]
        session = np.empty(len(order), dtype=np.int64)
        session[order] = np.cumsum(breaks)
        return session

    def at_rank(self, ranks: pa.Array, value: pa.Array) -> pa.StructArray:
        """struct(t, pos, v) of the rows of the given ranks (NULL where the rank is)."""
        missing = ranks.is_null()
        rows = pa.array(self.order).take(ranks)
        return pa.StructArray.from_arrays(
            [
                pa.array(self.times).take(rows).cast(_TS),
                pa.array(self.offsets).take(rows),
                value.take(rows),
            ],
            fields=list(_positional_type(value.type)),
            mask=missing,
        )


@dataclass(frozen=True)
class RangeRows:
    """What partial rows of one Kafka partition range carry besides their partial: the
    reader's schema (with ``_partial``), the topic and partition, the late watermark and
    the batch's time."""

    schema: pa.Schema
    topic: str
    partition: int
    late_watermark: Any  # a timestamp scalar (NULL in a first batch)
    batch_time: Any = None  # a timestamp scalar (flow_jobs.kafka.schema.BATCH_TIME)

    def partial_rows(
        self, rows: Folded, g: pa.Table, plan: CombinePlan, payload: pa.Schema
    ) -> pa.Table:
        """The partials as rows of the reader's schema (no Kafka record: key, value,
        offset NULL; the decoded payload holds the keys and the highest event time)."""
        k = g.num_rows
        t_max = g.column("__t_max").combine_chunks()
        ptype = partial_type(plan, payload)
        parts = _parts(rows, g, plan)
        partial = pa.StructArray.from_arrays([parts[f.name] for f in ptype], fields=list(ptype))
        event_ts = t_max.cast(_TS) if plan.time_field == EVENT_TS else pa.nulls(k, _TS)
        columns: dict[str, pa.Array] = {
            "key": pa.nulls(k, pa.binary()),
            "value": pa.nulls(k, pa.binary()),
            "topic": pa.repeat(pa.scalar(self.topic, pa.string()), k),
            "partition": pa.repeat(pa.scalar(self.partition, pa.int32()), k),
            "offset": pa.nulls(k, pa.int64()),
            "timestamp": pa.nulls(k, _TS),
            "headers": pa.nulls(k, self.schema.field("headers").type),
            EVENT_TS: event_ts,
            "_late_watermark": pa.repeat(self.late_watermark, k),
            "_heartbeat": pa.nulls(k, _TS),
            "_batch_time": pa.repeat(
                pa.scalar(None, _TS) if self.batch_time is None else self.batch_time, k
            ),
            _DECODED: _payload_rows(g, t_max, plan, payload),
            _UNDECODED: pa.repeat(pa.scalar(False), k),
            PARTIAL: partial,
        }
        names = [n for n in self.schema.names if n != PARTIAL] + [PARTIAL]
        return pa.table({c: columns[c] for c in names})


def _parts(rows: Folded, g: pa.Table, plan: CombinePlan) -> dict[str, pa.Array]:
    parts: dict[str, pa.Array] = {"n": g.column("__t_count").combine_chunks()}
    if plan.gap_ms:
        parts[START] = g.column("__t_min").combine_chunks().cast(_TS)
    for i, (name, needs) in enumerate(plan.fields):
        value = rows.fields[name]
        counted = f"__v{i}_count" in g.column_names
        count = g.column(f"__v{i}_count").combine_chunks() if counted else None
        if "nn" in needs:
            parts[f"nn{i}"] = count
        if "sum" in needs:
            parts[f"sum{i}"] = g.column(f"__v{i}_sum").combine_chunks().cast(_sum_type(value.type))
        if "dsum" in needs:
            parts[f"dsum{i}"] = g.column(f"__d{i}_sum").combine_chunks()
        for part in ("min", "max"):
            if part in needs:
                parts[f"{part}{i}"] = _extreme(g, i, part, count, value.type)
        for part, pick in (("first", "min"), ("last", "max")):
            if part in needs:
                ranks = g.column(f"__r{i}_{pick}").combine_chunks()
                parts[f"{part}{i}"] = rows.at_rank(ranks, value)
    if plan.filters:
        parts[KEPT] = g.column("__kept").combine_chunks()
    return parts


def _extreme(
    g: pa.Table, i: int, part: str, count: pa.Array | None, value_type: pa.DataType
) -> pa.Array:
    """min / max per group with Spark's rule for NaN (above every number): Arrow skips
    NaN, so a group holding one has NaN as its max, and as its min when all are NaN."""
    result = g.column(f"__v{i}_{part}").combine_chunks()
    if not pa.types.is_floating(value_type):
        return result
    nans = g.column(f"__nan{i}_sum").combine_chunks().to_numpy()
    assert count is not None
    non_null = count.to_numpy()
    use_nan = nans > 0 if part == "max" else (nans > 0) & (nans == non_null)
    values = result.fill_null(0.0).to_numpy(zero_copy_only=False).copy()
    values[use_nan] = math.nan
    valid = result.is_valid().to_numpy(zero_copy_only=False) | use_nan
    return pa.array(values, value_type, mask=~valid)


def _payload_rows(
    g: pa.Table, t_max: pa.Array, plan: CombinePlan, payload: pa.Schema
) -> pa.StructArray:
    """The decoded payload of each partial: its keys, its highest event time, else NULL."""
    k = g.num_rows
    arrays = []
    for f in payload:
        if f.name in plan.keys:
            arrays.append(g.column(f"__k{plan.keys.index(f.name)}").combine_chunks())
        elif f.name == plan.time_field:
            ms = np.floor_divide(t_max.to_numpy(), 1000)
            arrays.append(pa.array(ms).cast(f.type))
        else:
            arrays.append(pa.nulls(k, f.type))
    arrays.append(pa.nulls(k, pa.string()))
    return pa.StructArray.from_arrays(arrays, fields=[*payload, pa.field(_CORRUPT, pa.string())])
