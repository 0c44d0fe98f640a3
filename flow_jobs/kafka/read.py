"""The executor-side read: a range's records, decoded in bulk into Arrow batches (or
folded). The consumer loop that fetches them from the broker is
``flow_jobs.kafka.consume``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from flow_jobs.kafka.combine import PARTIAL, CombinePlan, partial_type
from flow_jobs.kafka.consume import read_messages
from flow_jobs.kafka.folding import Folder, RangeRows
from flow_jobs.kafka.json_decode import JsonDecoder, arrow_schema
from flow_jobs.kafka.options import KafkaSourceOptions
from flow_jobs.kafka.partitions import KafkaRange
from flow_jobs.kafka.schema import (
    ARROW_SCHEMA,
    CORRUPT_RECORD,
    DECODED,
    MAX_TS_MS,
    MIN_TS_MS,
    SOURCE_FORMAT,
    TIMESTAMP_US,
    UNDECODED,
)
from flow_jobs.records import EVENT_TS, HEADERS_TYPE

if TYPE_CHECKING:
    from flow_jobs.formats.framing import FramedDecoder


def read_range(options: KafkaSourceOptions, rng: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Read offsets [rng.start, rng.end) of one partition as Arrow record batches."""
    decoder = payload_decoder(options)
    for batch, offsets in read_messages(options, rng):
        yield _to_arrow(rng, batch, offsets, options.processing_time, decoder)


def read_folded(
    options: KafkaSourceOptions,
    rng: KafkaRange,
    decoder: JsonDecoder | FramedDecoder,
    plan: CombinePlan,
) -> Iterator[pa.RecordBatch]:
    """``read_range`` with the records the window would aggregate folded into partials
    (``flow_jobs.kafka.combine``), without building their Kafka columns: only the records
    that pass through become full rows."""
    from confluent_kafka import Message

    payload = decoder.schema
    ptype = partial_type(plan, payload)
    schema = decoded_schema(decoder).append(pa.field(PARTIAL, ptype))
    late = rng.late_watermark_ms
    stamp = pa.scalar(None if late is None else late * 1000, TIMESTAMP_US)
    now = None if rng.batch_timestamp_ms is None else rng.batch_timestamp_ms * 1000
    meta = RangeRows(schema, rng.topic, rng.partition, stamp, pa.scalar(now, TIMESTAMP_US))
    folder = Folder(plan, payload, meta, rng.batch_timestamp_ms, late)
    for batch, offsets in read_messages(options, rng):
        decoded, undecoded_np = _decode_to_fold(decoder, list(map(Message.value, batch)))
        stamps = None
        if plan.time_field == EVENT_TS:
            ms, missing = _kafka_stamps(batch)
            stamps = np.where(missing, 0, ms) * 1000, ~missing
        ok = folder.add(decoded, undecoded_np, np.asarray(offsets, dtype=np.int64), stamps)
        if not ok.any():
            yield with_partial(_to_arrow(rng, batch, offsets, False, decoder), ptype)
        elif not ok.all():
            rest = [m for m, keep in zip(batch, ok, strict=True) if not keep]
            rest_offsets = [o for o, keep in zip(offsets, ok, strict=True) if not keep]
            yield with_partial(_to_arrow(rng, rest, rest_offsets, False, decoder), ptype)
        if folder.full:
            yield from _emitted(folder)
    yield from _emitted(folder)


def _decode_to_fold(
    decoder: JsonDecoder | FramedDecoder, values: list[Any]
) -> tuple[pa.StructArray, np.ndarray]:
    """The decoded payloads, and where a record may not fold: JSON that ``from_json``
    decodes, or a record of a registry format that failed (it passes through, to be
    dead-lettered with its reason)."""
    if isinstance(decoder, JsonDecoder):
        decoded, undecoded = decoder.decode(values)
        return decoded, undecoded.to_numpy(zero_copy_only=False)
    rows, reasons = decoder.decode(values)
    return rows, reasons.is_valid().to_numpy(zero_copy_only=False)


def _emitted(folder: Folder) -> Iterator[pa.RecordBatch]:
    partials = folder.emit()
    if partials is not None:
        yield from partials.to_batches()


def with_partial(batch: pa.RecordBatch, ptype: pa.DataType) -> pa.RecordBatch:
    return batch.append_column(PARTIAL, pa.nulls(batch.num_rows, ptype))


def combine_plan(options: KafkaSourceOptions) -> CombinePlan | None:
    """What this source pre-aggregates in the reader (``flow_jobs.kafka.combine``), or None."""
    return CombinePlan.from_json(options.combine) if options.combine else None


def payload_decoder(options: KafkaSourceOptions) -> JsonDecoder | FramedDecoder | None:
    """The decoder of a source reading a registry format (``payload_format``) or with
    ``json_schema``, else None."""
    if options.payload_format is None or options.reader_schema is None:
        return json_decoder(options)
    from flow_jobs.formats import format_module
    from flow_jobs.formats.registry import writer_schemas

    fmt = options.payload_format
    config = dict(options.registry_config)
    fetch = writer_schemas(config, fmt) if config else None
    return format_module(fmt).Decoder(options.reader_schema, fetch)


def json_decoder(options: KafkaSourceOptions) -> JsonDecoder | None:
    """The bulk decoder of a source reading with ``json_schema``, else None."""
    if options.json_schema is None:
        return None
    schema = arrow_schema(options.json_schema)
    if schema is None:
        raise ValueError(f"{SOURCE_FORMAT}: json_schema has a type Arrow does not decode")
    return JsonDecoder(schema)


def _to_arrow(
    rng: KafkaRange,
    batch: list,
    offsets: list[int],
    processing_time: bool,
    decoder: JsonDecoder | FramedDecoder | None = None,
) -> pa.RecordBatch:
    from confluent_kafka import Message

    n = len(batch)
    ms, missing = _kafka_stamps(batch)
    ts_type = pa.timestamp("us", tz="UTC")
    ts_array = pa.array(np.where(missing, 0, ms) * 1000, ts_type, mask=missing)
    mark = rng.late_watermark_ms
    late_watermark = (
        pa.nulls(n, ts_type) if mark is None else pa.repeat(pa.scalar(mark * 1000, ts_type), n)
    )
    if processing_time:
        event_ts = pa.repeat(pa.scalar(time.time_ns() // 1000, ts_type), n)
    else:
        event_ts = ts_array
    values = list(map(Message.value, batch))
    columns = [
        pa.array(list(map(Message.key, batch)), pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(rng.topic, pa.string()), n),
        pa.repeat(pa.scalar(rng.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        ts_array,
        _headers(batch),
        event_ts,
        late_watermark,
        pa.nulls(n, ts_type),
        _batch_time(rng, n),
    ]
    if decoder is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    decoded, undecoded = _decode(decoder, values)
    return pa.RecordBatch.from_arrays(
        [*columns, decoded, undecoded], schema=decoded_schema(decoder)
    )


def _decode(
    decoder: JsonDecoder | FramedDecoder, values: list[Any]
) -> tuple[pa.StructArray, pa.BooleanArray]:
    """The payloads as the source view reads them: the decoded struct with the corrupt
    field (JSON: NULL, ``from_json`` fills it for what it decodes; a registry format:
    each failed record's reason), and which records ``from_json`` decodes (the registry
    formats: none)."""
    if isinstance(decoder, JsonDecoder):
        decoded, undecoded = decoder.decode(values)
        return with_corrupt_field(decoded), undecoded
    rows, reasons = decoder.decode(values)
    return with_corrupt_field(rows, reasons), pa.repeat(pa.scalar(False), len(values))


def _batch_time(rng: KafkaRange, n: int) -> pa.Array:
    """BATCH_TIME (the planner always sets it; NULL only on a range made by hand)."""
    now = rng.batch_timestamp_ms
    return pa.repeat(pa.scalar(None if now is None else now * 1000, TIMESTAMP_US), n)


def _kafka_stamps(batch: list) -> tuple[np.ndarray, np.ndarray]:
    """The records' Kafka timestamps (epoch ms) and where they are missing. A record
    without one (type 0) has none; one outside Spark's TIMESTAMP range (e.g. 2^62) would
    overflow and fail the read on every replay: it is missing too (a dead letter where it
    is the event time)."""
    from confluent_kafka import Message

    stamps = np.array(list(map(Message.timestamp, batch)), dtype=np.int64).reshape(len(batch), 2)
    kind, ms = stamps[:, 0], stamps[:, 1]
    return ms, (kind == 0) | (ms < MIN_TS_MS) | (ms > MAX_TS_MS)


def decoded_schema(decoder: JsonDecoder | FramedDecoder) -> pa.Schema:
    fields = [*decoder.schema, pa.field(CORRUPT_RECORD, pa.string())]
    return ARROW_SCHEMA.append(pa.field(DECODED, pa.struct(fields))).append(
        pa.field(UNDECODED, pa.bool_())
    )


def with_corrupt_field(
    decoded: pa.StructArray, reasons: pa.StringArray | None = None
) -> pa.StructArray:
    """``decoded`` with ``from_json``'s corrupt-record field: NULL on every row, or
    ``reasons`` (a failed record of a registry format: its row is not NULL, so the
    reason can be read)."""
    n = len(decoded)
    fields = [decoded.type.field(i) for i in range(decoded.type.num_fields)]
    return pa.StructArray.from_arrays(
        [*decoded.flatten(), pa.nulls(n, pa.string()) if reasons is None else reasons],
        fields=[*fields, pa.field(CORRUPT_RECORD, pa.string())],
        mask=decoded.is_null() if reasons is None else None,
    )


def _headers(batch: list) -> pa.Array:
    headers = [m.headers() for m in batch]
    if not any(headers):  # the usual case: no record has headers
        return pa.nulls(len(batch), HEADERS_TYPE)
    return pa.array(
        [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
        HEADERS_TYPE,
    )


def heartbeat_row(
    rng: KafkaRange, decoder: JsonDecoder | FramedDecoder | None = None
) -> pa.RecordBatch:
    ts_type = pa.timestamp("us", tz="UTC")
    mark = rng.late_watermark_ms
    assert rng.heartbeat_ms is not None
    columns = [
        pa.nulls(1, pa.binary()),
        pa.nulls(1, pa.binary()),
        pa.array([rng.topic], pa.string()),
        pa.nulls(1, pa.int32()),
        pa.nulls(1, pa.int64()),
        pa.nulls(1, ts_type),
        pa.nulls(1, HEADERS_TYPE),
        pa.nulls(1, ts_type),
        pa.array([None if mark is None else mark * 1000], ts_type),
        pa.array([rng.heartbeat_ms * 1000], ts_type),
        _batch_time(rng, 1),
    ]
    if decoder is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    schema = decoded_schema(decoder)
    decoded = pa.nulls(1, schema.field(DECODED).type)
    return pa.RecordBatch.from_arrays([*columns, decoded, pa.array([True])], schema=schema)
