"""Debezium change events (``format = "debezium"``): what a source's view holds of them,
without Spark (the spec checks its columns with it; ``flow_jobs.plan.sources`` builds the
view).

A Debezium record's value is an envelope: ``before`` and ``after`` (the row's image
before and after the change), ``op`` (``c`` create, ``r`` read by a snapshot, ``u``
update, ``d`` delete, ``t`` truncate), ``source`` (where the change was read, its
``ts_ms`` the time the database made it) and ``ts_ms`` (when the connector processed
it). As JSON it comes bare, or wrapped as ``{"schema": …, "payload": <envelope>}`` by
Kafka Connect's JsonConverter with ``schemas.enable = true``; as Avro through a schema
registry, the envelope record is the subject's schema. The view holds one row per
change: the after-image (the before-image for a delete, which has no after), its
operation in ``_op`` and the database's time of the change in ``_source_ts``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from flow_jobs.formats.framing import PayloadSchemaError

#: The view's column holding a change's operation: "c", "r", "u" or "d".
OP = "_op"
#: The view's column holding when the database made the change (``source.ts_ms``, or
#: the envelope's ``ts_ms`` where the source block has none).
SOURCE_TS = "_source_ts"
#: The view's columns a change adds to its row's, with their Spark types.
CHANGE_COLUMNS = {OP: "string", SOURCE_TS: "timestamp"}
#: The operations a view holds: an insert, a snapshot's read, an update, a delete.
OPERATIONS = ("c", "r", "u", "d")
#: A Kafka Connect JSON converter's envelope with ``schemas.enable``: the change is here.
PAYLOAD = "payload"


def envelope_ddl(columns: Sequence[tuple[str, str]]) -> str:
    """The Spark DDL ``from_json`` reads a JSON change with, either envelope: the change's
    fields at the top, and the same fields under ``payload``; ``columns`` are the table
    row's (name, Spark type), as the spec's ``schema`` declares them."""
    fields = ", ".join(f"`{name.replace('`', '``')}`: {kind}" for name, kind in columns)
    row = f"STRUCT<{fields}>"
    change = f"before {row}, after {row}, op STRING, ts_ms BIGINT, source STRUCT<ts_ms: BIGINT>"
    return f"{change}, {PAYLOAD} STRUCT<{change}>"


def row_type(envelope: pa.Schema) -> pa.StructType:
    """The table row's type in an Avro envelope (its ``after`` field's record)."""
    names = envelope.names
    for field in ("before", "after", "op"):
        if field not in names:
            raise PayloadSchemaError(
                f"not a Debezium change event: the schema has no field {field!r} (its fields: "
                f"{', '.join(names)})"
            )
    after = envelope.field("after").type
    if not pa.types.is_struct(after):
        raise PayloadSchemaError(f"not a Debezium change event: after is {after}, not a record")
    return after


def change_fields(envelope: pa.Schema) -> dict[str, Any]:
    """The view's columns of an Avro envelope, as Arrow types: the row's, then the
    change's."""
    row = row_type(envelope)
    return {
        **{row.field(i).name: row.field(i).type for i in range(row.num_fields)},
        OP: pa.string(),
        SOURCE_TS: pa.timestamp("us", tz="UTC"),
    }
