"""flow-jobs: declarative windowed aggregations as managed Spark Structured Streaming queries.

The Python facade is the spec's own models (they validate exactly like a TOML file)::

    from flow_jobs import Aggregation, Lookup, Pipeline, Source, Window, run_pipeline

    pipeline = Pipeline(
        name="clicks-per-minute",
        sources=[Source(name="clicks", topic="clicks", bootstrap_servers="127.0.0.1:9092",
                        schema="user_id STRING, amount DOUBLE, ts BIGINT")],
        transform={"window": Window(kind="tumbling", duration_ms=60_000, event_time_column="ts",
                                    group_by=["user_id"],
                                    aggregations=[Aggregation(agg="sum", column="amount",
                                                              as_="amount_sum")])},
        target={"kind": "delta", "path": "./data/clicks_per_minute"},
    )
    print(pipeline.to_toml())        # the same TOML flow-jobs validate/run reads
    run_pipeline(pipeline, available_now=True)

A ``reduce`` takes functions (``Aggregation(agg="reduce", initializer=f, reducer=g,
result_type="DOUBLE")``), written to TOML as their import paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flow_jobs.lazy import lazy_getattr

if TYPE_CHECKING:
    from flow_jobs.joins.spec import JoinSpec as Join
    from flow_jobs.runtime.progress import RunSummary
    from flow_jobs.sinks.delta import DeltaTarget
    from flow_jobs.spec.loader import SpecError, load_spec, parse_spec
    from flow_jobs.spec.models import Aggregation
    from flow_jobs.spec.models import KafkaSource as Source
    from flow_jobs.spec.models import LookupSpec as Lookup
    from flow_jobs.spec.models import PipelineSpec as Pipeline
    from flow_jobs.spec.models import TransformSpec as Transform
    from flow_jobs.windows import Window

__version__ = "0.1.0"

#: The facade's names, imported on first use (``flow_jobs.lazy``).
_FACADE = {
    "Aggregation": ("flow_jobs.spec.models", "Aggregation"),
    "DeltaTarget": ("flow_jobs.sinks.delta", "DeltaTarget"),
    "Join": ("flow_jobs.joins.spec", "JoinSpec"),
    "Lookup": ("flow_jobs.spec.models", "LookupSpec"),
    "Pipeline": ("flow_jobs.spec.models", "PipelineSpec"),
    "Source": ("flow_jobs.spec.models", "KafkaSource"),
    "SpecError": ("flow_jobs.spec.loader", "SpecError"),
    "Transform": ("flow_jobs.spec.models", "TransformSpec"),
    "Window": ("flow_jobs.windows", "Window"),
    "load_spec": ("flow_jobs.spec.loader", "load_spec"),
    "parse_spec": ("flow_jobs.spec.loader", "parse_spec"),
}

__all__ = [
    "Aggregation",
    "DeltaTarget",
    "Join",
    "Lookup",
    "Pipeline",
    "Source",
    "SpecError",
    "Transform",
    "Window",
    "load_spec",
    "parse_spec",
    "run_pipeline",
]


__getattr__ = lazy_getattr(__name__, _FACADE, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *_FACADE])


def run_pipeline(pipeline: Pipeline, available_now: bool = False, spark: Any = None) -> RunSummary:
    """Run a pipeline as ``flow-jobs run`` would (Spark is imported only here); a spec
    its checkpoint cannot resume under is refused before Spark starts."""
    from flow_jobs.ledger.store import refuse_incompatible
    from flow_jobs.runtime.runner import PipelineRunner

    refuse_incompatible(pipeline)
    return PipelineRunner(pipeline, spark).run(available_now=available_now)
