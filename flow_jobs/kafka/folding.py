"""The Kafka reader's folding (``flow_jobs.kafka.combine`` says what makes it exact): a
range's decoded records gathered chunk by chunk into a block (``Folder``, ``Block``),
the block's rows grouped per (pane or session, keys) with Arrow's hash aggregation
(``Folded``), each aggregated field's parts read back from it (each part's own
``flow_jobs.partial_parts.PartialPart``), and the partials laid out as rows
of the reader's schema (``RangeRows``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flow_jobs.kafka.combine import KEPT, PARTIAL, START, CombinePlan, partial_type
from flow_jobs.partial_parts import TIMESTAMP_US, Groups, work_column
from flow_jobs.records import EVENT_TS

#: Records folded at once per Kafka partition range (more: fewer partials, more memory).
BLOCK_ROWS = 500_000

_DECODED, _UNDECODED, _CORRUPT = "_decoded", "_undecoded", "__flow_corrupt_record"
_TS = TIMESTAMP_US
_MIN_MS, _MAX_MS = -62_135_596_800_000, 253_402_300_799_999


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
                return none  # Spark evaluates the SQL on these rows (flow_jobs.kafka.prestage)
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
    """Whether folding the ``ok`` rows into a block of ``rows`` rows could overflow where
    Spark would not (the rows are then not folded: Spark's try_sum sees each of them)."""
    return any(
        part.may_overflow(decoded.field(name), ok, rows)
        for i, (name, _) in enumerate(plan.fields)
        for part in plan.parts(i)
    )


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
    offset) order and the payload fields by name (the parts' ``FoldedRows``)."""

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
        for i, (name, _) in enumerate(plan.fields):
            value = self.fields[name]
            work[work_column(i, "v")] = value
            for part in plan.parts(i):
                for n, column in part.inputs(value, self).items():
                    work[work_column(i, n)] = column
                aggs += [(work_column(i, n), f) for n, f in part.hash_aggregates(value.type)]
        aggs = list(dict.fromkeys(aggs))  # parts asking for the same aggregate share it
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
        parts = _partial_fields(rows, g, plan)
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


def _partial_fields(rows: Folded, g: pa.Table, plan: CombinePlan) -> dict[str, pa.Array]:
    """The partial struct's fields by name, from the hash aggregation ``g`` of ``rows``."""
    fields: dict[str, pa.Array] = {"n": g.column("__t_count").combine_chunks()}
    if plan.gap_ms:
        fields[START] = g.column("__t_min").combine_chunks().cast(_TS)
    for i, (name, _) in enumerate(plan.fields):
        groups = Groups(g, i)
        for part in plan.parts(i):
            fields[f"{part.name}{i}"] = part.from_groups(groups, rows.fields[name], rows)
    if plan.filters:
        fields[KEPT] = g.column("__kept").combine_chunks()
    return fields


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
