"""Dead letters: records a pipeline cannot use, kept with their original bytes.

Spark runs a query as one DAG from one source scan; a second sink for bad records would
need a second branch, and Spark evaluates each branch from its own scan, so the Kafka
read would happen twice (measured here: ~30% slower). Instead the plan diverts bad rows
on the executors, inside the scan's own stage (an Arrow UDF in a filter, see
``flow_jobs.plan.sources``), like Spark's ``badRecordsPath``:

1. ``DeadLetterStaging.stage`` writes the bad rows of one Arrow batch to a parquet file
   named after the Kafka offsets it holds (deterministic, so a retried task rewrites the
   same file) under a staging folder, atomically (write, then rename);
2. after each micro-batch has run, the driver's ``DeadLetterTable.commit`` MERGEs every
   staged file into the dead-letter Delta table on (source, topic, partition, offset) and
   deletes the files. A crash between those two steps re-merges the same rows next time,
   which MERGE absorbs: nothing is lost, nothing is doubled.

The staging folder must be on storage every executor and the driver can reach (the local
disk for ``local[*]``, a shared mount on a cluster), like the Delta target itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flow_jobs.io.delta import DeltaMergeTable
from flow_jobs.io.state_store import StateStore

#: Spark DDL of the struct the plan hands to the tap for each bad row.
RECORD_DDL = (
    "STRUCT<topic: STRING, partition: INT, offset: BIGINT, key: BINARY, value: BINARY, "
    "timestamp: TIMESTAMP>"
)

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("pipeline", pa.string()),
        ("source", pa.string()),
        ("reason", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("kafka_timestamp", pa.timestamp("us", tz="UTC")),
        ("batch_id", pa.int64()),
        ("dead_lettered_at", pa.timestamp("us", tz="UTC")),
    ]
)
NATURAL_KEY = ("source", "topic", "partition", "offset")

_STAGED = pa.schema(
    [f for f in DEAD_LETTER_SCHEMA if f.name not in ("batch_id", "dead_lettered_at")]
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def staging_dir_for(dead_letter_path: str) -> str:
    return str(Path(dead_letter_path).resolve()) + "_staging"


@dataclass(frozen=True)
class DeadLetterStaging:
    """Executor side: stage one Arrow batch's bad rows. Pickled into the plan's UDF."""

    staging_dir: str
    pipeline: str
    source: str
    #: After ``[transform].sql`` a row may come from any source: (topic, source) pairs
    #: name its source by its topic (``source`` then only prefixes the staged file).
    topic_sources: tuple[tuple[str, str], ...] = ()

    def stage(self, reason: pa.Array, record: pa.StructArray) -> pa.Array:
        """Write the rows with a reason to a staged file; return the keep-mask."""
        bad = pc.is_valid(reason)
        if not pc.any(bad).as_py():
            return pa.array([True] * len(reason), pa.bool_())
        rows = pa.RecordBatch.from_struct_array(record.filter(bad))
        n = rows.num_rows
        staged = pa.table(
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
            },
            schema=_STAGED,
        )
        offsets = rows.column("offset")
        # Named after the positions it holds (deterministic: a retried task rewrites the
        # same file). After a SQL stage (a UNION) a batch may mix partitions and topics,
        # so the name carries a digest of every (topic, partition, offset).
        positions = sorted(
            zip(
                rows.column("topic").to_pylist(),
                rows.column("partition").to_pylist(),
                offsets.to_pylist(),
                strict=True,
            )
        )
        digest = hashlib.sha1(repr(positions).encode()).hexdigest()[:16]
        name = _UNSAFE.sub(
            "_",
            f"{self.source}-{rows.column('topic')[0]}-{rows.column('partition')[0]}"
            f"-{pc.min(offsets)}-{pc.max(offsets)}-{digest}",
        )
        os.makedirs(self.staging_dir, exist_ok=True)
        final = os.path.join(self.staging_dir, name + ".parquet")
        tmp = os.path.join(self.staging_dir, f".{name}.{uuid.uuid4().hex}.tmp")
        pq.write_table(staged, tmp)
        os.replace(tmp, final)
        return pc.invert(bad)

    def _sources(self, topics: pa.Array) -> pa.Array:
        if not self.topic_sources:
            return pa.array([self.source] * len(topics), pa.string())
        by_topic = dict(self.topic_sources)
        return pa.array([by_topic.get(t, self.source) for t in topics.to_pylist()], pa.string())


class DeadLetterTable:
    """Driver side: the dead-letter table and the commit of staged files into it: a Delta
    table at ``path``, or (with ``store``) the state store's ``dead_letters`` table."""

    def __init__(self, path: str, pipeline: str, store: StateStore | None = None) -> None:
        self.path = path
        self.staging_dir = staging_dir_for(path)
        self.pipeline = pipeline
        self.store = store
        self.table = DeltaMergeTable(path, DEAD_LETTER_SCHEMA, NATURAL_KEY, update_matched=False)

    @property
    def description(self) -> str:
        return f"{self.store.schema}.dead_letters" if self.store else self.path

    def staging(
        self, source: str, topic_sources: tuple[tuple[str, str], ...] = ()
    ) -> DeadLetterStaging:
        return DeadLetterStaging(self.staging_dir, self.pipeline, source, topic_sources)

    def ensure(self) -> None:
        if self.store is None:
            self.table.ensure()
        os.makedirs(self.staging_dir, exist_ok=True)

    def commit(self, batch_id: int) -> int:
        """MERGE every staged file into the table; return how many rows were new."""
        files = sorted(Path(self.staging_dir).glob("*.parquet"))
        if not files:
            return 0
        staged = pa.concat_tables([pq.read_table(f, schema=_STAGED) for f in files])
        now = datetime.now(UTC)
        rows = staged.append_column(
            "batch_id", pa.array([batch_id] * staged.num_rows, pa.int64())
        ).append_column(
            "dead_lettered_at",
            pa.array([now] * staged.num_rows, pa.timestamp("us", tz="UTC")),
        )
        # No Delta txn here: staged files of a crashed run are committed under a later
        # batch id. MERGE (or ON CONFLICT) on the record's Kafka position is what makes
        # this idempotent.
        if self.store is not None:
            inserted = self.store.insert_dead_letters(rows.to_pylist())
        else:
            inserted = self.table.merge(rows).inserted
        for f in files:
            f.unlink()
        return inserted
