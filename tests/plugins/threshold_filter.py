"""A per-source operator from outside the engine: a threshold filter.

``kind = "threshold"`` with ``column`` and ``at_least``: a record passes when its
``column`` is at least ``at_least``; one below it, or with no value, is taken out,
dropped or (``below = "dlq"``) dead-lettered with its Kafka record. A pipeline uses it
with::

    plugins = ["tests.plugins.threshold_filter"]

    [[transform.operators]]
    kind = "threshold"
    source = "clicks"
    column = "amount"
    at_least = 20.0
    below = "dlq"

It runs on the source's view, before the window, without a line of ``flow_jobs/``
naming it: ``tests/test_plugin_operator.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import model_validator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from flow_jobs.dead_letters import divert, record_fields
from flow_jobs.errors import PlanError
from flow_jobs.operators.registry import OperatorInput, register_operator
from flow_jobs.plan_lines import PlanLine
from flow_jobs.spec.base import _identifier
from flow_jobs.spec.operators import OperatorSpec


class ThresholdSpec(OperatorSpec):
    """``kind = "threshold"``: the records whose ``column`` is at least ``at_least``."""

    kind: Literal["threshold"]
    column: str
    at_least: float
    below: Literal["drop", "dlq"] = "drop"

    NOUN: ClassVar[str] = "a threshold"
    #: the records below are taken out either way: where they go is no state
    SAFE_KEYS: ClassVar[frozenset[str]] = frozenset({"below"})

    @model_validator(mode="after")
    def _column(self) -> ThresholdSpec:
        _identifier("column", self.column)
        return self

    def columns(self) -> list[tuple[str, str]]:
        return [("column", self.column)]


@dataclass(frozen=True)
class CompiledThreshold:
    frame: DataFrame
    spec: ThresholdSpec
    source: str

    def describe(self) -> list[PlanLine]:
        s = self.spec
        fate = "dead-lettered with their bytes" if s.below == "dlq" else "dropped"
        return [
            PlanLine(
                f"threshold {self.source}: {s.column} >= {s.at_least}",
                f"a filter on the source's view: records below it or without a value {fate}",
            )
        ]


def compile_threshold(spec: ThresholdSpec, given: OperatorInput) -> CompiledThreshold:
    view = given.view
    if spec.column not in view.columns:
        raise PlanError(f"{given.key}.column", f"{spec.column!r} is not a column of the view")
    passes = F.coalesce(F.col(spec.column) >= F.lit(spec.at_least), F.lit(False))
    if spec.below == "dlq":
        reason = F.concat(
            F.lit(f"{spec.column} = "),
            F.coalesce(F.col(spec.column).cast("string"), F.lit("NULL")),
            F.lit(f" is below the threshold {spec.at_least}"),
        )
        frame = divert(view, [(~passes, reason)], given.tap("below"), record_fields(view))
    else:
        frame = view.where(passes)
    return CompiledThreshold(frame, spec, given.source)


register_operator("threshold", ThresholdSpec, compile_threshold)
