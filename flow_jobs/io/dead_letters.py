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

Late rows (``late_data = "dlq"``) are staged in a folder of their own, ``late/``: with a
``dead_letter_topic`` they go to that Kafka topic instead of the table
(``DeadLetterTopic``), at least once (a crash between the send and the deletion of the
staged files sends them again; each message names its record's position).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flow_jobs.io.delta import DeltaMergeTable
from flow_jobs.io.kafka_source import HEADERS_TYPE
from flow_jobs.io.state_store import StateStore
from flow_jobs.spec.models import PipelineSpec

#: Spark DDL of the struct the plan hands to the tap for each bad row.
RECORD_DDL = (
    "STRUCT<topic: STRING, partition: INT, offset: BIGINT, key: BINARY, value: BINARY, "
    "timestamp: TIMESTAMP>"
)
#: Spark DDL of Kafka headers. The tap takes a bad row's headers as ``to_json`` of this
#: (binary values in base64), not as the array itself: handing an
#: ``array<struct<key, value>>`` column to the Arrow UDF costs ~13 µs per row even where
#: it is NULL (measured, issue 12), more than the rest of the source; a string is cheap.
HEADERS_DDL = "ARRAY<STRUCT<key: STRING, value: BINARY>>"

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
        ("headers", HEADERS_TYPE),  # the record's Kafka headers (added later: last)
    ]
)
NATURAL_KEY = ("source", "topic", "partition", "offset")

_STAGED = pa.schema(
    [f for f in DEAD_LETTER_SCHEMA if f.name not in ("batch_id", "dead_lettered_at")]
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


#: The staging folder's sub-folder of late rows.
LATE_FOLDER = "late"


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
    late: bool = False  # late rows: staged apart, for a dead_letter_topic

    def late_rows(self) -> DeadLetterStaging:
        return dataclasses.replace(self, late=True)

    def stage(self, reason: pa.Array, record: pa.StructArray, headers: pa.Array) -> pa.Array:
        """Write the rows with a reason to a staged file; return the keep-mask.
        ``headers``: each bad row's Kafka headers as JSON (``HEADERS_DDL``), else NULL."""
        bad = pc.is_valid(reason)
        if not pc.any(bad).as_py():
            return pa.repeat(pa.scalar(True), len(reason))
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
                "headers": _headers_from_json(headers.filter(bad)),
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
        folder = os.path.join(self.staging_dir, LATE_FOLDER) if self.late else self.staging_dir
        os.makedirs(folder, exist_ok=True)
        final = os.path.join(folder, name + ".parquet")
        tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
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

    def __init__(
        self,
        path: str,
        pipeline: str,
        store: StateStore | None = None,
        late_topic: DeadLetterTopic | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.path = path
        self.staging_dir = staging_dir_for(path)
        self.pipeline = pipeline
        self.store = store
        self.late_topic = late_topic  # where late rows go instead of the table
        self.table = DeltaMergeTable(
            path,
            DEAD_LETTER_SCHEMA,
            NATURAL_KEY,
            update_matched=False,
            storage_options=storage_options,  # object stores: credentials, never logged
            added=("headers",),
        )

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
        if self.late_topic is not None:
            self.late_topic.ensure()
        os.makedirs(self.staging_dir, exist_ok=True)

    def commit(self, batch_id: int) -> int:
        """Write every staged row where it goes; return how many were new (the table's
        new rows, and the late rows sent to a dead_letter_topic)."""
        staging = Path(self.staging_dir)
        files = sorted(staging.glob("*.parquet"))
        late = sorted((staging / LATE_FOLDER).glob("*.parquet"))
        sent = 0
        if late and self.late_topic is not None:
            sent = self.late_topic.send(_read_staged(late))
            for f in late:
                f.unlink()
        else:
            files += late
        return sent + self._merge(files, batch_id)

    def _merge(self, files: list[Path], batch_id: int) -> int:
        if not files:
            return 0
        staged = _read_staged(files)
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


def _headers_from_json(headers: pa.Array) -> pa.Array:
    """Kafka headers from Spark's ``to_json`` of ``HEADERS_DDL`` (base64 binary values)."""
    decoded = []
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


def _read_staged(files: list[Path]) -> pa.Table:
    return pa.concat_tables([pq.read_table(f, schema=_STAGED) for f in files])


@dataclass(frozen=True)
class DeadLetterTopic:
    """``dead_letter_topic``: late rows as Kafka messages on their source's cluster.

    Each message is the record's original key, value and headers, verbatim, then
    headers naming where it came from and why: ``flow.pipeline``, ``flow.source``, ``flow.topic``,
    ``flow.partition``, ``flow.offset``, ``flow.kafka_timestamp_ms`` and ``flow.reason``
    (its event time, the watermark it missed and by how much)."""

    topic: str
    #: source name -> librdkafka settings of its cluster (bootstrap servers, client
    #: config: secrets among them, so never in the repr)
    clusters: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = field(repr=False)
    pipeline: str = ""

    @staticmethod
    def of(spec: PipelineSpec) -> DeadLetterTopic | None:
        """The spec's ``dead_letter_topic`` (a join's, else the window's), if any."""
        operator = spec.transform.join or spec.transform.window
        topic = operator.dead_letter_topic if operator is not None else None
        if topic is None:
            return None
        clusters = tuple((s.name, tuple(s.cluster_config().items())) for s in spec.sources)
        return DeadLetterTopic(topic, clusters, spec.name)

    def _config(self, source: str) -> dict[str, str]:
        return dict(dict(self.clusters)[source])

    def ensure(self) -> None:
        """Refuse to start when the topic is missing on a source's cluster."""
        from confluent_kafka.admin import AdminClient

        for source, _ in self.clusters:
            config = self._config(source)
            metadata = AdminClient(config).list_topics(self.topic, timeout=30)
            found = metadata.topics.get(self.topic)
            if found is None or found.error is not None or not found.partitions:
                raise RuntimeError(
                    f"dead_letter_topic {self.topic!r} does not exist on "
                    f"{config['bootstrap.servers']} (source {source!r}): create it first"
                )

    def send(self, rows: pa.Table) -> int:
        """Produce every row, wait for the broker's acknowledgements; raise if any failed
        (the staged files stay, and the next micro-batch sends them again)."""
        from confluent_kafka import Producer

        failures: list[str] = []

        def delivered(err: object, _msg: object) -> None:
            if err is not None:
                failures.append(str(err))

        by_source: dict[str, list[dict]] = {}
        for row in rows.to_pylist():
            by_source.setdefault(row["source"], []).append(row)
        for source, records in by_source.items():
            producer = Producer({**self._config(source), "enable.idempotence": True, "acks": "all"})
            for r in records:
                stamp = r["kafka_timestamp"]
                headers = [
                    ("flow.pipeline", self.pipeline.encode()),
                    ("flow.source", source.encode()),
                    ("flow.topic", r["topic"].encode()),
                    ("flow.partition", str(r["partition"]).encode()),
                    ("flow.offset", str(r["offset"]).encode()),
                    ("flow.reason", r["reason"].encode()),
                ]
                if stamp is not None:
                    ms = int(stamp.timestamp() * 1000)
                    headers.append(("flow.kafka_timestamp_ms", str(ms).encode()))
                # the record's own headers first, in their order, then ours
                headers = [(h["key"], h["value"]) for h in r["headers"] or ()] + headers
                producer.produce(
                    self.topic, r["value"], r["key"], headers=headers, on_delivery=delivered
                )
                producer.poll(0)
            left = producer.flush(60)
            if left:
                failures.append(f"{left} messages unacknowledged after 60 s")
        if failures:
            raise RuntimeError(
                f"dead_letter_topic {self.topic!r}: {len(failures)} late rows not delivered "
                f"({failures[0]}); they stay staged and are sent again"
            )
        return rows.num_rows
