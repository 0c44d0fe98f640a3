"""A source's payload schema: declared in the spec, or read from a schema registry.

A JSON source's payload is the Spark DDL its ``schema`` declares; a source of a registry
format (Avro, Protobuf, JSON Schema) reads the subject's reader schema (or the spec's
``avro_schema``), whose Arrow type gives the view's columns, and a ``schema`` given
beside it must agree with it field by field. These are apart from
``flow_jobs.plan.sources`` (which builds the source view from them) because they are
asked on their own, before any view is built: ``validate`` checks a registry source's
schema without a JVM, and the plan asks which columns a source carries.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import DataType, StringType, StructField, StructType, TimestampType

from flow_jobs.errors import PlanError
from flow_jobs.formats.debezium import CHANGE_COLUMNS, change_fields
from flow_jobs.spec.ddl import Column as DeclaredColumn
from flow_jobs.spec.ddl import parse_schema
from flow_jobs.spec.models import KafkaSource


def registry_reader(source: KafkaSource, index: int) -> str:
    """The reader schema of a source of a registry format, as its reader takes it: the
    subject at its version from the registry, or the spec's ``avro_schema``."""
    from flow_jobs.formats import PayloadSchemaError, format_module
    from flow_jobs.formats.registry import RegistryUnreachable, SubjectNotFound, reader_schema

    if source.avro_schema is not None:  # checked by the spec
        return format_module("avro").reader(source.avro_schema, [])
    assert source.schema_registry is not None
    config = source.schema_registry.client_config()
    subject = source.reader_subject
    try:
        return reader_schema(config, subject, source.version, source.payload_format, source.message)
    except RegistryUnreachable as e:
        raise PlanError(f"sources[{index}].schema_registry.url", str(e)) from None
    except SubjectNotFound as e:
        raise PlanError(f"sources[{index}].subject", str(e)) from None
    except PayloadSchemaError as e:
        key = "message" if source.message and "message" in str(e) else "subject"
        raise PlanError(f"sources[{index}].{key}", f"{subject}: {e}") from None


def registry_payload(reader: str, source: KafkaSource, index: int) -> StructType:
    """The Spark schema a registry format's reader schema gives the view (through its
    Arrow type); a ``schema`` given beside it must agree with it, field by field."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from flow_jobs.formats import PayloadSchemaError, format_module

    where = "avro_schema" if source.avro_schema is not None else "subject"
    try:
        arrow = format_module(source.payload_format).payload_schema(reader)
        if source.changes:  # the view holds the row's columns and the change's
            arrow = pa.schema(list(change_fields(arrow).items()))
        derived = from_arrow_schema(arrow)
    except PayloadSchemaError as e:
        raise PlanError(f"sources[{index}].{where}", f"{source.reader_subject}: {e}") from None
    if source.schema_ddl:  # read as the spec read it (flow_jobs.spec.ddl): no JVM
        declared = parse_schema(source.schema_ddl).columns
        if source.changes:
            declared = [*declared, *(DeclaredColumn(n, t) for n, t in CHANGE_COLUMNS.items())]
        origin = "avro_schema" if where == "avro_schema" else f"subject {source.reader_subject}"
        difference = schema_difference(declared, derived, origin)
        if difference:
            raise PlanError(f"sources[{index}].schema", difference)
    return derived


def schema_difference(
    declared: Sequence[DeclaredColumn], derived: StructType, origin: str
) -> str | None:
    """Where a declared schema and a registry's disagree (the first field, by name and
    Spark type), or None."""
    theirs = {f.name: f.dataType.simpleString() for f in derived.fields}
    for field in declared:
        if field.name not in theirs:
            return f"field {field.name} is not in the schema of {origin}"
        if theirs[field.name] != field.type:
            return (
                f"field {field.name} is {field.type} here and {theirs[field.name]} in the "
                f"schema of {origin}"
            )
    names = {field.name for field in declared}
    missing = [name for name in theirs if name not in names]
    if missing:
        return f"the schema of {origin} has field {missing[0]}, which schema does not declare"
    return None


def payload_schema(source: KafkaSource, index: int) -> StructType:
    """The payload schema of a JSON source as declared (a ``PlanError`` if not valid
    DDL), or of a registry format's source as its reader schema reads it."""
    if source.registry_format:
        return registry_payload(registry_reader(source, index), source, index)
    declared = _declared_schema(source, index)
    if source.changes:  # the view holds the row's columns and the change's
        return StructType([*declared.fields, *change_struct().fields])
    return declared


def change_struct() -> StructType:
    """The columns a Debezium change adds to its row's (``flow_jobs.formats.debezium``)."""
    return StructType([StructField(n, _SPARK_TYPES[t]()) for n, t in CHANGE_COLUMNS.items()])


_SPARK_TYPES = {"string": StringType, "timestamp": TimestampType}


def _declared_schema(source: KafkaSource, index: int) -> StructType:
    assert source.schema_ddl is not None
    try:
        schema = DataType.fromDDL(source.schema_ddl)
    except Exception as e:  # ParseException, or not a struct
        message = e.getMessage() if hasattr(e, "getMessage") else str(e)
        raise PlanError(
            f"sources[{index}].schema", f"not a valid Spark DDL schema: {message}"
        ) from None
    if not isinstance(schema, StructType):
        raise PlanError(f"sources[{index}].schema", "not a valid Spark DDL schema: not a struct")
    return schema
