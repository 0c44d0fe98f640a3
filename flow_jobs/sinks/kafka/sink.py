"""The Kafka target's writer: each batch's rows produced to a topic (JSON objects, or
Confluent-framed records of a registry format), flushed before the batch ends."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from flow_jobs.errors import PlanError
from flow_jobs.formats.framing import python_rows
from flow_jobs.formats.json_rows import to_json
from flow_jobs.io.batch import BatchEntry, WriteResult
from flow_jobs.sinks.base import Sink, SinkOutput
from flow_jobs.sinks.kafka.spec import KafkaTarget

if TYPE_CHECKING:
    import psycopg

    from flow_jobs.ledger.store import LedgerStore

log = logging.getLogger(__name__)


class KafkaProduceSink(Sink):
    """Rows produced to a topic, keyed by the natural key (as a JSON array): JSON
    objects, or Confluent-framed records of a registry format (``flow_jobs.formats``)
    whose schema, derived from the rows' (``schema``), is registered when the run starts."""

    kind = "kafka"
    spec_model = KafkaTarget
    once_by = "ledger-first"
    WRITES = "Kafka produce"
    COMMIT = "Kafka offsets"
    spec: KafkaTarget

    def __init__(self, spec: KafkaTarget, output: SinkOutput, store: LedgerStore | None) -> None:
        super().__init__(spec, output, store)
        self.natural_key = list(output.natural_key)
        self._producer: Any = None
        self._schema = output.schema
        self._pipeline = output.pipeline
        self._encode: Callable[[dict[str, Any]], bytes] = to_json

    def _registry_encoder(self) -> Callable[[dict[str, Any]], bytes]:
        """Registers the rows' schema under the target's subject (or finds it there) and
        returns the format's serializer of one row."""
        from confluent_kafka.serialization import MessageField, SerializationContext

        from flow_jobs.formats import PayloadSchemaError, format_module
        from flow_jobs.formats.framing import record_name
        from flow_jobs.formats.registry import RegistryUnreachable, client_for, register

        spec, fmt = self.spec, self.spec.format
        assert spec.schema_registry is not None and self._schema is not None
        config = spec.schema_registry.client_config()
        module = format_module(fmt)
        try:
            text = module.target_schema(self._schema, record_name(self._pipeline))
            register(config, spec.value_subject, text, fmt)
        except PayloadSchemaError as e:
            raise PlanError(
                "target.format", f"the window rows have no {module.TITLE} schema: {e}"
            ) from None
        except RegistryUnreachable as e:
            key = "schema_registry.url" if "cannot reach" in str(e) else "subject"
            raise PlanError(f"target.{key}", f"{spec.value_subject}: {e}") from None
        serialize = module.target_serializer(client_for(config), text, spec.value_subject)
        context = SerializationContext(spec.topic, MessageField.VALUE)
        return lambda row: serialize(row, context)

    def writing(self) -> str:
        from flow_jobs.formats import format_module

        spec = self.spec
        body = (
            "a JSON object"
            if spec.format == "json"
            else f"a {format_module(spec.format).TITLE} record, Confluent-framed, its schema "
            f"registered under {spec.value_subject} when the run starts"
        )
        return (
            f"confluent-kafka producer to topic {spec.topic} (enable.idempotence: its own "
            f"retries add no duplicates), each row {body} keyed by its natural key "
            f"({', '.join(self.natural_key)}) as a JSON array, flushed before the batch ends"
        )

    def ensure(self) -> None:
        from confluent_kafka import Producer

        from flow_jobs.librdkafka_logs import librdkafka_logger

        if self.spec.format != "json":
            self._encode = self._registry_encoder()
        config = {
            "bootstrap.servers": self.spec.bootstrap_servers,
            "enable.idempotence": True,  # no duplicates from the producer's own retries
            **{k: v.get_secret_value() for k, v in self.spec.client_config.items()},
            "logger": librdkafka_logger(),  # flow_jobs.librdkafka_logs
        }
        self._producer = Producer(config)
        log.warning(
            "target kafka %s is append-only: a crash after a batch is produced and before "
            "its ledger row commits repeats that batch's rows; consumers should dedupe "
            "on the message key (the natural key)",
            self.spec.topic,
        )

    def write(
        self, rows: pa.Table, entry: BatchEntry, conn: psycopg.Connection | None
    ) -> WriteResult:
        errors: list[str] = []
        last: dict[int, int] = {}

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                last[msg.partition()] = max(last.get(msg.partition(), -1), msg.offset())

        producer = self._producer
        if self.closed is not None:  # an append-only topic cannot insert "if absent"
            rows = rows.filter(self.closed.arrow_open(rows))
        listed = rows.to_pylist() if self.spec.format == "json" else python_rows(rows)
        for row in listed:
            key = to_json([row[c] for c in self.natural_key])
            value = self._encode(row)
            while True:
                try:
                    producer.produce(self.spec.topic, value=value, key=key,
                                     on_delivery=delivered)  # fmt: skip
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
        remaining = producer.flush(60)
        if errors or remaining:
            raise RuntimeError(
                f"kafka target {self.spec.topic}: batch {entry.batch_id} not fully delivered "
                f"({len(errors)} errors, {remaining} pending): {errors[:3]}"
            )
        offsets = json.dumps(last, sort_keys=True) if last else None
        return WriteResult(False, rows.num_rows, 0, offsets)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None

    # -- its words and its read-back -----------------------------------------------------

    @classmethod
    def describe_commit(cls, commit: str) -> str:
        """The offset of its last message in each partition: "Kafka offsets 0=41,1=40"."""
        try:
            offsets = json.loads(commit)
            commit = ",".join(f"{p}={o}" for p, o in sorted(offsets.items(), key=_partition))
        except (ValueError, AttributeError):  # not the JSON this sink records
            pass
        return f"{cls.COMMIT} {commit}"

    @classmethod
    def location(cls, spec: KafkaTarget, store_place: str) -> str:  # type: ignore[override]
        return f"Kafka topic {spec.topic} on {spec.bootstrap_servers}"

    @classmethod
    def how_to_read(cls, spec: KafkaTarget, limit: int) -> str:  # type: ignore[override]
        return (
            f"read it with a Kafka consumer, e.g. kcat -C -b {spec.bootstrap_servers} -t "
            f"{spec.topic} -o -{limit} -e: each message's key is its natural key as a JSON "
            "array"
        )


def _partition(item: tuple[str, Any]) -> int:
    return int(item[0]) if str(item[0]).isdigit() else -1
