"""Dead letters: records a pipeline cannot use, kept with their original bytes.

Spark runs a query as one DAG from one source scan; a second sink for bad records would
need a second branch, and Spark evaluates each branch from its own scan, so the Kafka
read would happen twice (measured here: ~30% slower). Instead the plan diverts bad rows
inside the scan's own stage, like Spark's ``badRecordsPath``, and they reach the driver
with the micro-batch itself:

1. each tap is an observation on the source's rows (``DataFrame.observe``, see
   ``flow_jobs.plan.sources``): Spark's own aggregate, ``collect_list`` of the rows that
   carry a reason, computed in the JVM next to the scan and returned to the driver with
   each task's result, so nothing is staged on an executor's disk (a cluster's executors
   share no folder with the driver) and no Python worker runs for it;
2. after the micro-batch's action has run, the sink reads the batch's observations from
   its execution (``flow_jobs.runtime.observations``), empties them (so Spark's progress
   report does not carry the rows), and ``DeadLetterTable.commit`` MERGEs the rows into
   the dead-letter Delta table on (source, topic, partition, offset), before the
   batch's target write and commit. A crash before that leaves the batch uncommitted: its
   replay diverts the same rows again, and MERGE absorbs a row seen twice: nothing is
   lost, nothing is doubled.

A stage Spark runs again (a lost shuffle, a retried fetch) can report a task's rows
twice: the driver keeps one row per position before it writes (``_distinct``). What
travels is bounded by the micro-batch (``max_offsets_per_trigger``).

Late rows (``late_data = "dlq"``) are tapped apart: with a ``dead_letter_topic`` they go
to that Kafka topic instead of the table (``DeadLetterTopic``), at least once (a crash
after the send replays the batch, which sends them again; each message names its
record's position).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa

from flow_jobs.dead_letters.tap import LATE_SUFFIX, OBSERVATION_PREFIX, TAPPED, DeadLetterTap
from flow_jobs.io.delta import DeltaMergeTable
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import PipelineSpec

#: The table: each tapped row, with the batch that wrote it and when; ``headers`` (the
#: record's Kafka headers) was added later, so it comes last.
DEAD_LETTER_SCHEMA = pa.schema(
    [
        *(f for f in TAPPED if f.name != "headers"),
        ("batch_id", pa.int64()),
        ("dead_lettered_at", pa.timestamp("us", tz="UTC")),
        TAPPED.field("headers"),
    ]
)
NATURAL_KEY = ("source", "topic", "partition", "offset")


class LetterStore(Protocol):
    """Where dead letters go instead of Delta: the ledger's table (``LedgerStore``)."""

    schema: str

    def insert_dead_letters(self, rows: Sequence[dict[str, Any]]) -> int: ...


class DeadLetterTable:
    """Driver side: the dead-letter table and the commit of a batch's tapped rows into
    it: a Delta table at ``path``, or (with ``store``) the state store's ``dead_letters``
    table."""

    def __init__(
        self,
        path: str,
        pipeline: str,
        store: LetterStore | None = None,
        late_topic: DeadLetterTopic | None = None,
        storage_options: dict[str, str] | None = None,
        store_schema: str | None = None,
    ) -> None:
        self.path = path
        self.pipeline = pipeline
        self.store = store
        #: the state store's schema when the rows go to its table (``[dead_letter] kind =
        #: "state_store"``), known before the run opens the store
        self.store_schema = store.schema if store is not None else store_schema
        self.late_topic = late_topic  # where late rows go instead of the table
        self.table = DeltaMergeTable(
            path,
            DEAD_LETTER_SCHEMA,
            NATURAL_KEY,
            update_matched=False,
            storage_options=storage_options,  # object stores: credentials, never logged
            added=("headers",),
        )
        self._taps: dict[str, DeadLetterTap] = {}  # by observation

    @classmethod
    def of(cls, spec: PipelineSpec, store_schema: str) -> DeadLetterTable:
        """The spec's dead letters, where its run files them; ``store_schema``: the
        ledger's (``flow_jobs.ledger.location.state_store_schema``)."""
        in_store = spec.dead_letter.kind == "state_store"
        return cls(
            spec.dead_letter_path(),
            spec.name,
            late_topic=DeadLetterTopic.of(spec),
            storage_options=spec.dead_letter_storage_options(),
            store_schema=store_schema if in_store else None,
        )

    @property
    def description(self) -> str:
        return f"{self.store_schema}.dead_letters" if self.store_schema else self.path

    def describe(self) -> list[PlanLine]:
        """Where a batch's tapped rows go: the path ``commit`` takes."""
        taps = ", ".join(
            t.observation.removeprefix(OBSERVATION_PREFIX) for t in self._taps.values()
        )
        key = ", ".join(NATURAL_KEY)
        written = (
            f"INSERT ... ON CONFLICT DO NOTHING into the state store's {self.description} "
            f"(primary key pipeline, {key})"
            if self.store_schema
            else f"MERGE with deltalake into {self.path} on ({key}), inserting new positions only"
        )
        lines = [
            PlanLine(
                "dead letters",
                f"taps ({taps}): Spark observations (collect_list beside the scan) read by the "
                f"driver after the batch's action, then {written}, before the target write; a "
                "replayed batch taps the same rows, and their Kafka position keeps them once",
            )
        ]
        if self.late_topic is not None:
            lines += self.late_topic.describe()
        return lines

    def tap(
        self, source: str, topic_sources: tuple[tuple[str, str], ...] = (), part: str = ""
    ) -> DeadLetterTap:
        """The tap of one source (its late rows: ``tap.late_rows()``; ``part``: another
        tap of the same source's rows further on)."""
        tap = DeadLetterTap(self.pipeline, source, topic_sources, part=part)
        self._taps[tap.observation] = tap
        return tap

    def ensure(self) -> None:
        if self.store is None:
            self.table.ensure()
        if self.late_topic is not None:
            self.late_topic.ensure()

    def commit(self, batch_id: int, observed: Mapping[str, Sequence[Any]]) -> int:
        """Write every row the batch's taps collected (``observed``: by observation name,
        the rows of each, ``TAPPED_FIELDS`` each) where it goes; return how many were new
        (the table's new rows, and the late rows sent to a dead_letter_topic)."""
        tapped: dict[bool, list[pa.Table]] = {False: [], True: []}
        for name, collected in observed.items():
            if not collected:
                continue
            late = name.endswith(LATE_SUFFIX)
            tap = self._taps.get(name.removesuffix(LATE_SUFFIX))
            if tap is None:
                raise RuntimeError(f"dead letters of an unknown tap {name!r}: not filed")
            tapped[late].append((tap.late_rows() if late else tap).rows(collected))
        rows, late = _distinct(tapped[False]), _distinct(tapped[True])
        sent = 0
        if late is not None and self.late_topic is not None:
            sent = self.late_topic.send(late)
        elif late is not None:
            rows = late if rows is None else _distinct([rows, late])
        return sent + (self._merge(rows, batch_id) if rows is not None else 0)

    def _merge(self, tapped: pa.Table, batch_id: int) -> int:
        now = datetime.now(UTC)
        rows = tapped.append_column(
            "batch_id", pa.array([batch_id] * tapped.num_rows, pa.int64())
        ).append_column(
            "dead_lettered_at",
            pa.array([now] * tapped.num_rows, pa.timestamp("us", tz="UTC")),
        )
        # No Delta txn here: a replayed batch's rows come again under its batch id.
        # MERGE (or ON CONFLICT) on the record's Kafka position is what makes this
        # idempotent.
        if self.store is not None:
            return self.store.insert_dead_letters(rows.to_pylist())
        return self.table.merge(rows.select(DEAD_LETTER_SCHEMA.names)).inserted


def _distinct(tables: list[pa.Table]) -> pa.Table | None:
    """The rows once per natural key (a re-run stage can report a row twice), in the
    order they came; None for none."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return None
    rows = pa.concat_tables([t.cast(TAPPED) for t in tables])
    if rows.num_rows == 1:
        return rows
    index = pa.array(range(rows.num_rows), pa.int64())
    first = (
        rows.select(list(NATURAL_KEY))
        .append_column("_i", index)
        .group_by(list(NATURAL_KEY), use_threads=False)
        .aggregate([("_i", "min")])
        .column("_i_min")
    )
    return rows.take(first.sort())


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
        """The spec's ``dead_letter_topic`` (its first stage's: after a join, a window's
        late rows are dropped), if any."""
        topic = spec.transform.stages()[0].dead_letter_topic
        if topic is None:
            return None
        clusters = tuple((s.name, tuple(s.cluster_config().items())) for s in spec.sources)
        return DeadLetterTopic(topic, clusters, spec.name)

    def describe(self) -> list[PlanLine]:
        return [
            PlanLine(
                "late rows",
                f"produced to Kafka topic {self.topic} on their source's cluster (producer "
                "enable.idempotence, acks = all), not the table: at least once, each message "
                "the record's key, value and headers, then flow.* headers naming its position "
                "and reason",
            )
        ]

    def _config(self, source: str) -> dict[str, Any]:
        from flow_jobs.librdkafka_logs import librdkafka_logger

        return {**dict(dict(self.clusters)[source]), "logger": librdkafka_logger()}

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
