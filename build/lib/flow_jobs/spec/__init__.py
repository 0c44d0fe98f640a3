"""Pipeline specs: models, TOML loading, validation."""

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
