"""What the benchmarks share: the clicks topic and its schema, the tumbling pipeline's
spec (every run its own pipeline in the ledger) and what a run measured."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flow_jobs.spec.models import PipelineSpec

TOPIC = "bench-clicks"
SCHEMA = "user_id STRING, page STRING, amount DOUBLE, ts BIGINT"


@dataclass
class Result:
    name: str
    events: int
    seconds: float
    write_seconds: float | None = None  # pipelines: MERGEing windows into Delta
    windows: int | None = None  # pipelines: window rows written
    peak_state_rows: int | None = None  # joins: the join's largest state

    @property
    def rate(self) -> float:
        return self.events / self.seconds


AGGREGATIONS = [
    {"agg": "count", "as": "clicks"},
    {"agg": "sum", "column": "amount", "as": "amount_sum"},
    {"agg": "avg", "column": "amount", "as": "amount_avg"},
    {"agg": "max", "column": "amount", "as": "amount_max"},
]
TUMBLING = {"kind": "tumbling", "duration_ms": 60_000, "lateness_ms": 5_000}


def clicks_spec(
    bootstrap: str,
    workdir: Path,
    window: dict | None = None,
    *,
    topic: str = TOPIC,
    aggregations: list[dict] | None = None,
    sql: str | None = None,
    dedup: list[dict] | None = None,
) -> PipelineSpec:
    """The clicks pipeline: ``window`` (default TUMBLING) by user over ``topic``, after
    ``sql`` (``[transform].sql``) and ``dedup`` (``[[transform.dedup]]``) if given."""
    return PipelineSpec.model_validate(
        {
            # Each run is its own pipeline in the ledger (its spec differs: one name
            # would be refused by the fingerprint check).
            "name": workdir.name.lower().replace("_", "-"),
            "sources": [
                {"name": "clicks", "topic": topic, "bootstrap_servers": bootstrap, "schema": SCHEMA}
            ],
            "transform": {
                "window": {
                    "event_time_column": "ts",
                    "group_by": ["user_id"],
                    "aggregations": aggregations or AGGREGATIONS,
                    **(window or TUMBLING),
                },
                **({"sql": sql} if sql else {}),
                **({"dedup": dedup} if dedup else {}),
            },
            "target": {"kind": "delta", "path": str(workdir / "target")},
            "checkpoint": {"location": str(workdir / "checkpoint")},
            "dead_letter": {"path": str(workdir / "dead_letters")},
        }
    )
