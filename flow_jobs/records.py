"""A Kafka record's columns, as the Kafka reader yields them (``flow_jobs.kafka``) and a
dead letter keeps them (``flow_jobs.dead_letters``)."""

from __future__ import annotations

import re

import pyarrow as pa

#: A row's event time (the record's Kafka timestamp, or the spec's event-time column) as
#: the reader and the plan carry it: the reader's processes import no spec, so the name
#: lives here, below both.
EVENT_TS = "_event_ts"

#: A record's Kafka headers, in order (NULL: none): kept so a dead letter carries them.
HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

#: A Kafka record's columns as the reader gives them (and the dead-letter tap keeps them).
RECORD_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", HEADERS_TYPE),
    ]
)

#: A value a dead letter's reason shows is cut to this many characters, the last one an
#: ellipsis (the record's bytes are in the dead letter whole).
SHOWN_CHARS = 40
ELLIPSIS = "…"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def shown(text: str) -> str:
    """A value's text as a dead letter's reason shows it: one line (control characters
    as a space), at most ``SHOWN_CHARS`` characters; what ``flow_jobs.plan.json_reasons``
    does in Spark."""
    line = _CONTROL.sub(" ", text).strip(" ")
    return line if len(line) <= SHOWN_CHARS else line[: SHOWN_CHARS - 1] + ELLIPSIS
