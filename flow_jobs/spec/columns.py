"""What a spec can check of its columns without Spark, against the sources' declared
schemas (``flow_jobs.spec.ddl``): the columns a window, a join, a temporal join or a
dedup reads straight from a source, and the event time's type. ``flow-jobs validate``
then names the key at once, where ``--plan`` or the run would fail in Spark's analyzer.
Columns computed by ``[transform].sql`` are the SQL's to define: Spark checks them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow_jobs.formats.debezium import CHANGE_COLUMNS
from flow_jobs.records import EVENT_TS
from flow_jobs.spec.aggregation import AGGREGATOR_RULES
from flow_jobs.spec.base import KAFKA_COLUMN, key_error
from flow_jobs.spec.ddl import EPOCH_MILLIS, TIMESTAMPS, DdlError, parse_schema, unknown

if TYPE_CHECKING:
    from flow_jobs.spec.models import PipelineSpec

#: What a raw source's view holds (``flow_jobs.plan.sources.RAW_COLUMNS``), typed.
RAW_COLUMNS = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
    "headers": "array<struct<key:string,value:binary>>",
}


def declared_types(spec: PipelineSpec) -> dict[str, dict[str, str]]:
    """Each source's view columns whose type the spec declares, by source name: a
    schema's columns (Spark's ``simpleString``) with ``_event_ts``; a source whose
    schema is a registry's (read when the query starts) is left out."""
    out: dict[str, dict[str, str]] = {}
    for source in spec.sources:
        if source.format == "raw":
            out[source.name] = RAW_COLUMNS | {EVENT_TS: "timestamp"}
        elif source.schema_ddl:
            try:
                columns = parse_schema(source.schema_ddl).columns
            except DdlError:  # the source's own rule names it
                continue
            changes = CHANGE_COLUMNS if source.changes else {}
            out[source.name] = {c.name: c.type for c in columns} | changes | {EVENT_TS: "timestamp"}
    return out


def check_columns(spec: PipelineSpec) -> None:
    """Refuse a column a window, join or temporal join reads straight from a source
    (no ``[transform].sql``, no lookups) that the source's schema lacks, and a column an
    operator reads (a dedup key) that the source's view lacks (it runs on the view,
    before any SQL)."""
    types = declared_types(spec)
    t = spec.transform

    def refuse(key: str, source: str, names: list[str | None]) -> None:
        if source not in types:
            return
        known = [*types[source], KAFKA_COLUMN]
        missing = unknown(names, known)
        if missing:
            shown = [c for c in types[source] if c != EVENT_TS]
            raise key_error(
                key,
                f"{missing[0]!r} is not a column of source {source!r} (its schema: "
                f"{', '.join(shown)}); name one of its columns, or compute it in "
                "[transform].sql",
            )

    for op in spec.operators():  # each runs on its source's view, before any SQL
        source = op.source
        for sub, name in op.spec.columns():
            if source in types and name not in [*types[source], KAFKA_COLUMN]:
                shown = ", ".join(c for c in types[source] if c != EVENT_TS)
                raise key_error(
                    f"{op.key}.{sub}",
                    f"{name!r} is not a column of source {source!r} (its view: {shown}, "
                    f"{EVENT_TS}); {type(op.spec).NOUN} runs before [transform].sql, on the "
                    "source's own columns",
                )
    if t.sql or t.lookups:
        return
    first = t.stages()[0]
    for key, source, names in first.columns_read(spec.sources):
        refuse(key, source, names)
    if first is t.window and len(spec.sources) == 1:
        _numeric_inputs(spec, types.get(spec.sources[0].name, {}))


#: Spark's numeric types, as their ``simpleString`` starts.
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal(")


def _numeric_inputs(spec: PipelineSpec, types: dict[str, str]) -> None:
    """An aggregator that takes numbers only (sum, avg) over a column the source
    declares, as the plan refuses it (``flow_jobs.aggregations.aggregation_input``)."""
    for i, a in enumerate(spec.window.aggregations):
        declared = types.get(a.column) if a.column else None
        if declared is None or not AGGREGATOR_RULES[a.agg].numeric_only:
            continue
        if not declared.startswith(_NUMERIC) or declared.startswith("interval"):
            raise key_error(
                f"transform.window.aggregations[{i}].column",
                f"{a.agg} needs a numeric column; {a.column!r} is {declared}: declare it a "
                "number in the source's schema, or cast it in [transform].sql",
            )


def check_event_time_types(spec: PipelineSpec) -> None:
    """Where a source's schema declares the event-time column, it must be a TIMESTAMP
    or epoch milliseconds: the sources check each record's event time before any SQL
    (``flow_jobs.plan.sources``), so a STRING there fails the plan even where
    ``[transform].sql`` casts it under the same name."""
    types = declared_types(spec)
    t = spec.transform
    index = {s.name: i for i, s in enumerate(spec.sources)}
    first = t.stages()[0]
    uses = first.event_time_columns(spec.sources)  # (spec key, source, column)
    for key, source, column in uses:
        declared = types.get(source, {}).get(column)
        if declared is None or declared in (*TIMESTAMPS, *EPOCH_MILLIS):
            continue
        where = f"sources[{index[source]}].schema"
        fix = f"declare it TIMESTAMP (ISO-8601 text) or BIGINT (epoch milliseconds) in {where}"
        if first is t.window:
            fix += (
                f", or compute a TIMESTAMP under another name in [transform].sql (e.g. "
                f"SELECT *, to_timestamp({column}) AS event_time FROM {source}) and name "
                "that column here"
            )
        raise key_error(
            key,
            f"{column!r} is {declared.upper()} in {where}; an event time is a TIMESTAMP or "
            f"epoch milliseconds (BIGINT, INT, SMALLINT, TINYINT): {fix}",
        )
