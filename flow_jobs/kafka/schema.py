"""The Kafka reader's output: its columns, their Arrow schema and the DDL Spark sees."""

from __future__ import annotations

import re

import pyarrow as pa

from flow_jobs.formats.framing import spark_ddl
from flow_jobs.records import EVENT_TS, RECORD_SCHEMA

SOURCE_FORMAT = "flow_kafka"
TIMESTAMP_US = pa.timestamp("us", tz="UTC")


#: The watermark Spark's window operators judge the row's micro-batch by: the one the
#: previous batch ran under (``batchWatermarkMs`` of Spark's offset log), stamped on every
#: row so the plan can single out late rows one by one (``flow_jobs.plan.late_rows``).
#: NULL in a query's first batch (and on a source read without a checkpoint).
LATE_WATERMARK = "_late_watermark"

#: NULL on every record. On a heartbeat row (no record: key, value and position NULL)
#: the watermark its source must reach: the lowest of the sources that are not idle.
HEARTBEAT = "_heartbeat"

#: The micro-batch's processing time on every row: its ``batchTimestampMs`` (offset log),
#: what ``current_timestamp()`` is in that batch. The event-time skew check compares with
#: this column rather than ``current_timestamp()``, which Spark turns into a literal in
#: the generated code, so every micro-batch compiled its scan stage anew (measured: ~3
#: compilations a batch, ~10 ms each). Where the offset log does not give it (a source
#: read without a checkpoint), the time the batch was planned.
BATCH_TIME = "_batch_time"

#: Key of an end offset holding the source's last heartbeat, ``{"seq": n, "watermark_ms":
#: …}``: a new ``seq`` makes Spark plan the source although no record is new, and the
#: offset log keeps it, so a replayed batch plans the same heartbeat row.
HEARTBEAT_KEY = "_heartbeat"

#: Columns a source reading with ``json_schema`` adds: the payload decoded by Arrow (its
#: fields, then a NULL ``__flow_corrupt_record``, the shape ``from_json`` gives) and
#: whether Arrow left the record to ``from_json`` (TRUE on a heartbeat row too).
DECODED = "_decoded"
UNDECODED = "_undecoded"
CORRUPT_RECORD = "__flow_corrupt_record"


ARROW_SCHEMA = pa.schema(
    [
        *RECORD_SCHEMA,
        (EVENT_TS, pa.timestamp("us", tz="UTC")),
        (LATE_WATERMARK, pa.timestamp("us", tz="UTC")),
        (HEARTBEAT, pa.timestamp("us", tz="UTC")),
        (BATCH_TIME, pa.timestamp("us", tz="UTC")),
    ]
)
#: Columns every Kafka source exposes, in order (Spark DDL).
KAFKA_COLUMNS_DDL = ", ".join(f"{f.name} {spark_ddl(f.type)}" for f in ARROW_SCHEMA)

#: Options that belong to this source; everything prefixed ``kafka.`` goes to librdkafka.
_CLIENT_PREFIX = "kafka."

# librdkafka pauses a consumer for fetch.queue.backoff.ms (default 1000) whenever its
# local queue fills; measured here, 1 ms lifts a bare read from ~180k to ~1.6M msgs/s.
_CONSUMER_DEFAULTS = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "fetch.queue.backoff.ms": 1,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
}

READ_CHUNK = 50_000

# Spark's TIMESTAMP range (years 1..9999) in epoch ms (flow_jobs.plan.event_time).
MIN_TS_MS = -62_135_596_800_000
MAX_TS_MS = 253_402_300_799_999


#: ``starting_offsets`` by time: ``timestamp:<epoch ms>`` (``KafkaSource.starting_option``).
_TIMESTAMP_OPTION = re.compile(r"^timestamp:(-?\d+)$")
