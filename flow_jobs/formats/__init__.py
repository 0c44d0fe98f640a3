"""The payload formats read through a schema registry: one module each.

Each module (``avro``, ``protobuf``, ``json_schema``) answers the same questions:
``SCHEMA_TYPE`` (the registry's name of its schemas), ``TITLE`` (its name in messages),
``FETCH_FORMAT`` where the registry must be asked for a form of the schema (Protobuf's
serialized descriptor), ``reader(text, references, message)`` (the reader schema as the
Kafka reader's option carries it), ``writer(text, references)`` (a writer schema as its
decoder takes it), ``payload_schema(reader)`` (the view's columns as an Arrow schema) and
``Decoder(reader, writer_schema)`` (``flow_jobs.formats.framing.FramedDecoder``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from flow_jobs.formats.framing import PayloadSchemaError, spark_ddl

#: ``format = ...`` of a source -> the module that reads it
FORMATS = {
    "avro": "flow_jobs.formats.avro",
    "protobuf": "flow_jobs.formats.protobuf",
    "json_schema": "flow_jobs.formats.json_schema",
}

__all__ = ["FORMATS", "PayloadSchemaError", "format_module", "spark_ddl"]


def format_module(name: str) -> ModuleType:
    """The module of a registry format (imported on first use: protobuf and fastavro are
    loaded only by a source that reads them)."""
    return importlib.import_module(FORMATS[name])
