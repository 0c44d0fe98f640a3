"""The executor side of dead letters: the tap that takes a batch's bad rows out of the
stream and hands them to the driver through the micro-batch itself.

The tap runs inside the scan's stage (an Arrow UDF in a filter, ``flow_jobs.plan.sources``):
for each Arrow batch it drops the rows that carry a reason, and adds them, with their
original bytes and Kafka position, to a Spark accumulator as one Arrow IPC stream.
Spark returns a task's accumulator updates to the driver with the task's result, so when
the micro-batch's one action (``toArrow`` in the sink) returns, the driver holds every
bad row of the batch and writes it (``DeadLetterTable.commit``) before the batch
commits. Nothing touches an executor's disk, and no folder has to be shared between
executors and the driver (issue 14).

Guarantees, from Spark's accumulator contract: only successful task attempts report; a
stage re-run (a lost shuffle, a retried task after a fetch failure) can report a row
twice, so the driver de-duplicates on the row's position before it writes. A crash
before the write loses nothing: the batch is not committed, and its replay diverts the
same rows again. What travels is bounded by the micro-batch (``max_offsets_per_trigger``).

Kept apart from ``flow_jobs.io.dead_letters`` so executors import pyarrow and PySpark
only (no deltalake, no psycopg) from the archive they are shipped.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import Accumulator, AccumulatorParam

from flow_jobs.io.kafka_source import HEADERS_TYPE, RECORD_SCHEMA

#: What the tap hands to the driver for each bad row: where it comes from, why, and
#: its Kafka record (the reader's types; its timestamp named kafka_timestamp).
TAPPED = pa.schema(
    [
        ("pipeline", pa.string()),
        ("source", pa.string()),
        ("reason", pa.string()),
        *(RECORD_SCHEMA.field(n) for n in ("topic", "partition", "offset", "key", "value")),
        RECORD_SCHEMA.field("timestamp").with_name("kafka_timestamp"),
        RECORD_SCHEMA.field("headers"),
    ]
)


class TappedBatches(AccumulatorParam):
    """An accumulator of ``(late, Arrow IPC stream bytes)`` pairs, in arrival order."""

    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, value1: list, value2: list) -> list:
        value1.extend(value2)
        return value1


def to_ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


@dataclass(frozen=True)
class DeadLetterTap:
    """One source's tap, pickled into the plan's UDF with the query's accumulator."""

    sink: Accumulator = field(repr=False)
    pipeline: str
    source: str
    #: After ``[transform].sql`` a row may come from any source: (topic, source) pairs
    #: name its source by its topic.
    topic_sources: tuple[tuple[str, str], ...] = ()
    late: bool = False  # late rows: kept apart, for a dead_letter_topic

    def late_rows(self) -> DeadLetterTap:
        return replace(self, late=True)

    def divert(self, reason: pa.Array, record: pa.StructArray, headers: pa.Array) -> pa.Array:
        """Hand the rows with a reason to the driver; return the keep-mask.
        ``headers``: each bad row's Kafka headers as JSON (``HEADERS_DDL``), else NULL."""
        bad = pc.is_valid(reason)
        if not pc.any(bad).as_py():
            return pa.repeat(pa.scalar(True), len(reason))
        rows = pa.RecordBatch.from_struct_array(record.filter(bad))
        n = rows.num_rows
        tapped = pa.table(
            {
                "pipeline": pa.array([self.pipeline] * n, pa.string()),
                "source": self._sources(rows.column("topic")),
                "reason": reason.filter(bad),
                "topic": rows.column("topic"),
                "partition": rows.column("partition"),
                "offset": rows.column("offset"),
                "key": rows.column("key"),
                "value": rows.column("value"),
                "kafka_timestamp": rows.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
                "headers": headers_from_json(headers.filter(bad)),
            },
            schema=TAPPED,
        )
        self.sink.add([(self.late, to_ipc(tapped))])
        return pc.invert(bad)

    def _sources(self, topics: pa.Array) -> pa.Array:
        if not self.topic_sources:
            return pa.array([self.source] * len(topics), pa.string())
        by_topic = dict(self.topic_sources)
        return pa.array([by_topic.get(t, self.source) for t in topics.to_pylist()], pa.string())


def headers_from_json(headers: pa.Array) -> pa.Array:
    """Kafka headers from Spark's ``to_json`` of ``HEADERS_DDL`` (base64 binary values)."""
    decoded: list[Any] = []
    for text in headers.to_pylist():
        if text is None:
            decoded.append(None)
            continue
        decoded.append(
            [
                {
                    "key": h.get("key"),
                    "value": None if h.get("value") is None else base64.b64decode(h["value"]),
                }
                for h in json.loads(text)
            ]
        )
    return pa.array(decoded, HEADERS_TYPE)
