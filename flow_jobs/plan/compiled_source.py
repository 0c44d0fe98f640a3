"""A compiled source: its view, and how its reader reads it, said from the options the
reader is given (``flow_jobs.plan.sources.compile_source`` builds it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame

from flow_jobs.kafka.combine import CombinePlan
from flow_jobs.kafka.options import REGISTRY_PREFIX
from flow_jobs.kafka.schema import SOURCE_FORMAT
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.models import KafkaSource

#: Reader options that hold client settings (secrets among them): never kept here.
_CLIENT_PREFIXES = ("kafka.", REGISTRY_PREFIX)


def public_options(options: Mapping[str, str]) -> dict[str, str]:
    """The reader's options without its Kafka client's and registry client's settings."""
    return {k: v for k, v in options.items() if not k.startswith(_CLIENT_PREFIXES)}


@dataclass(frozen=True)
class CompiledSource:
    """One source's view (``frame``) and what its reader does."""

    frame: DataFrame
    source: KafkaSource
    #: the options the reader gets (``public_options``: no client settings)
    options: dict[str, str]
    registry: bool  # the reader resolves records through a schema registry
    #: the event-time column checked in the view (None: processing time, or computed
    #: by [transform].sql and checked after it)
    checked_time: str | None = None
    max_skew_ms: int = 0
    late_data: str | None = None  # "drop" | "dlq": late rows taken out here
    watermark_ms: int | None = None  # the source's own watermark delay
    heartbeats: bool = False  # sends heartbeats while idle (runtime.idleness)
    tombstones: bool = False  # a NULL value is a changelog's tombstone

    @property
    def decoded_in_reader(self) -> bool:
        """The reader hands Spark decoded payloads (Arrow's JSON decode, a registry
        format's decoder)."""
        return "json_schema" in self.options or "payload_format" in self.options

    @property
    def folds(self) -> bool:
        """The reader folds records into partial aggregates (``flow_jobs.kafka.combine``;
        a plan with ``fold`` off only tells it the query merges partials)."""
        combine = self.options.get("combine")
        return combine is not None and CombinePlan.from_json(combine).fold

    def describe(self) -> list[PlanLine]:
        name = self.source.name
        read = (
            f"topic {self.source.topic} by {SOURCE_FORMAT}, a Python data source over "
            f"confluent-kafka, offsets in Spark's offset log; {self._decoding()}"
        )
        if self.folds:
            read += "; then folded into partials in the reader (pre-aggregation)"
        if self.tombstones and self.source.changes:
            read += "; a delete ends its keys' version"
        elif self.tombstones:
            read += "; a record with no value is a tombstone, its keys from the Kafka key"
        lines = [PlanLine(f"source {name}", read)]
        if self.checked_time is not None:
            lines.append(PlanLine(f"source {name}: event time", self._timing()))
        return lines

    def _decoding(self) -> str:
        if not self.source.changes:
            return self._payloads()
        how = (
            f"Confluent-framed Avro envelopes decoded in the reader (each record's writer "
            f"schema from the registry, resolved to {self.source.reader_subject}'s)"
            if self.registry
            else "JSON envelopes, bare or as Kafka Connect's schema/payload, decoded by "
            "from_json in the JVM"
        )
        return (
            f"Debezium change events: {how}; each change is its row (the after-image, a "
            "delete's before-image) with _op and _source_ts; a change that does not decode, "
            "is not c/r/u/d or lacks its image is a dead letter; Debezium's tombstones "
            "(after a delete) are skipped"
        )

    def _payloads(self) -> str:
        fmt = self.options.get("payload_format")
        if fmt is not None:
            from flow_jobs.formats import format_module

            title = format_module(fmt).TITLE
            how = (
                "Confluent-framed, each record's writer schema from the registry, resolved "
                f"to {self.source.reader_subject}'s"
                if self.registry
                else "bare bodies written with avro_schema"
            )
            return (
                f"{title} decoded in the reader into Arrow batches ({how}); a record it "
                "cannot decode is a dead letter with its reason"
            )
        if "json_schema" in self.options:
            return (
                "JSON decoded in the reader by Arrow's JSON reader with the declared schema; "
                "each record Arrow rejects, by from_json in the JVM"
            )
        if self.source.format == "json":
            why = (
                'decoder = "from_json"'
                if self.source.decoder == "from_json"
                else "the schema has a type Arrow does not decode as from_json does"
            )
            return f"JSON decoded by from_json in the JVM ({why})"
        return "raw records (key, value, topic, partition, offset, timestamp, headers)"

    def _timing(self) -> str:
        column = self.checked_time
        text = (
            f"a row whose {column} is NULL, out of range or more than {self.max_skew_ms} ms "
            "ahead of the batch's time is a dead letter"
        )
        if self.late_data is not None:
            fate = "dead-lettered with its bytes" if self.late_data == "dlq" else "dropped"
            text += (
                "; a late row (at or below the previous batch's watermark, Spark's rule) is "
                f"taken out here, counted, then {fate}"
            )
        if self.watermark_ms is not None:
            text += f"; its own watermark, withWatermark({self.watermark_ms} ms)"
            if self.heartbeats:
                text += ", raised by heartbeats while the source is idle"
        return text
