"""Pipeline specs: models, TOML loading, validation.

The names below are imported on first use (PEP 562): the window families
(``flow_jobs.windows``) import ``flow_jobs.spec.windows``, and the spec's models import
the families, so this package must not import its models on its own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flow_jobs.spec.loader import SpecError, load_spec, parse_spec
    from flow_jobs.spec.models import (
        EVENT_TS,
        Aggregation,
        DeltaTarget,
        KafkaSource,
        PipelineSpec,
        TransformSpec,
        WindowSpec,
    )

_NAMES = {
    "SpecError": "flow_jobs.spec.loader",
    "load_spec": "flow_jobs.spec.loader",
    "parse_spec": "flow_jobs.spec.loader",
    "EVENT_TS": "flow_jobs.spec.models",
    "Aggregation": "flow_jobs.spec.models",
    "DeltaTarget": "flow_jobs.spec.models",
    "KafkaSource": "flow_jobs.spec.models",
    "PipelineSpec": "flow_jobs.spec.models",
    "TransformSpec": "flow_jobs.spec.models",
    "WindowSpec": "flow_jobs.spec.models",
}

__all__ = [
    "EVENT_TS",
    "Aggregation",
    "DeltaTarget",
    "KafkaSource",
    "PipelineSpec",
    "SpecError",
    "TransformSpec",
    "WindowSpec",
    "load_spec",
    "parse_spec",
]


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'flow_jobs.spec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value
