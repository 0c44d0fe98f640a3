"""Pipeline specs: models, loading (TOML, or SQL through ``flow_jobs.sql``), validation.

The names below are imported on first use (PEP 562): the window families
(``flow_jobs.windows``) import ``flow_jobs.spec.windows``, and the spec's models read
them through its registry, so this package must not import its models on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow_jobs.lazy import lazy_getattr

if TYPE_CHECKING:
    from flow_jobs.spec.loader import (
        SPEC_SUFFIXES,
        SpecError,
        load_spec,
        parse_spec,
        sql_twin,
        toml_twin,
    )
    from flow_jobs.spec.models import (
        EVENT_TS,
        Aggregation,
        KafkaSource,
        PipelineSpec,
        TransformSpec,
        WindowSpec,
    )

_NAMES = {
    "SpecError": ("flow_jobs.spec.loader", "SpecError"),
    "load_spec": ("flow_jobs.spec.loader", "load_spec"),
    "parse_spec": ("flow_jobs.spec.loader", "parse_spec"),
    "toml_twin": ("flow_jobs.spec.loader", "toml_twin"),
    "sql_twin": ("flow_jobs.spec.loader", "sql_twin"),
    "SPEC_SUFFIXES": ("flow_jobs.spec.loader", "SPEC_SUFFIXES"),
    "EVENT_TS": ("flow_jobs.spec.models", "EVENT_TS"),
    "Aggregation": ("flow_jobs.spec.models", "Aggregation"),
    "KafkaSource": ("flow_jobs.spec.models", "KafkaSource"),
    "PipelineSpec": ("flow_jobs.spec.models", "PipelineSpec"),
    "TransformSpec": ("flow_jobs.spec.models", "TransformSpec"),
    "WindowSpec": ("flow_jobs.spec.models", "WindowSpec"),
}

__all__ = [
    "EVENT_TS",
    "SPEC_SUFFIXES",
    "Aggregation",
    "KafkaSource",
    "PipelineSpec",
    "SpecError",
    "TransformSpec",
    "WindowSpec",
    "load_spec",
    "parse_spec",
    "sql_twin",
    "toml_twin",
]


__getattr__ = lazy_getattr(__name__, _NAMES, globals())
