"""Memory caps: fail loud when a window's state holds too many groups
(``max_groups_per_window``), and warn when the state outgrows its budget.

Spark's state store gives no per-window group count while a batch runs, so the check
reads the committed state of the previous micro-batch with Spark's state data source
(``format("statestore")``) at the start of the next one, and fails that batch (and so
the query) with the message of docs/spec-reference.md, "Memory caps". It is gated on
Spark's own ``numRowsTotal``: no window can hold more groups than the state holds rows,
so until the state outgrows the cap the check costs nothing.

What "groups per window" is depends on where the state is:

* Spark's aggregation keyed by (window, group) (a family with ``SHARED_BOUNDS``): the
  state rows sharing a window;
* Spark's aggregation with each group's own bounds in the state value (the family's
  ``NATIVE_STATE_BOUNDS``), and every state-API window: these windows belong to one
  group each, so the cap bounds the groups holding open windows; the message names the
  span they cover.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from flow_jobs.instants import iso
from flow_jobs.plan.windows import state_window_key
from flow_jobs.runtime.reports import (
    JOIN_OPERATOR,
    Progress,
    state_bytes,
    state_rows,
    window_state_rows,
)
from flow_jobs.spec.models import PipelineSpec
from flow_jobs.windows.processor import STATE_VARIABLE

log = logging.getLogger(__name__)


class WindowStateCapHit(RuntimeError):
    """A window's state reached max_groups_per_window: the run fails, loud."""


def _iso(value: datetime | None) -> str:
    return "?" if value is None else iso(value)


class GroupCap:
    def __init__(self, spark: SparkSession, spec: PipelineSpec, checkpoint: str) -> None:
        self.spark = spark
        self.spec = spec
        self.checkpoint = checkpoint
        self.cap = spec.window.max_groups_per_window if spec.has_window else None
        self._checked: set[int] = set()
        self._operator_id: int | None = None

    def check(self, progress: Progress | None) -> None:
        """Raise WindowStateCapHit if the state after this batch breaks the cap."""
        if self.cap is None or not progress or progress["batchId"] in self._checked:
            return
        batch = int(progress["batchId"])
        self._checked.add(batch)
        if window_state_rows(progress) <= self.cap:
            return
        hit = self._find(batch)
        if hit is not None:
            groups, start, end, closing = hit
            raise WindowStateCapHit(
                f"window state cap hit: max_groups_per_window={self.cap} reached on window "
                f"[{_iso(start)}, {_iso(end)}{closing} for pipeline {self.spec.name} "
                f"({groups} groups after micro-batch {batch})"
            )

    def _window_operator(self) -> int:
        """The window's stateful operator id (a join before it has its own)."""
        if self._operator_id is None:
            operators = self.spark.read.format("state-metadata").load(self.checkpoint)
            ids = [
                r["operatorId"] for r in operators.collect() if r["operatorName"] != JOIN_OPERATOR
            ]
            self._operator_id = max(ids) if ids else 0
        return self._operator_id

    def _find(self, batch: int) -> tuple[int, Any, Any, str] | None:
        reader = (
            self.spark.read.format("statestore")
            .option("batchId", batch)
            .option("operatorId", self._window_operator())
        )
        window = self.spec.window
        own_bounds = window.NATIVE_STATE_BOUNDS
        if window.engine == "native" and own_bounds is None:
            state = reader.load(self.checkpoint)
            rows = (
                state.groupBy(F.col(f"key.{state_window_key(state)}").alias("w"))
                .count()
                .where(F.col("count") > self.cap)
                .orderBy("w.start")
                .limit(1)
                .collect()
            )
            return (
                (rows[0]["count"], rows[0]["w"]["start"], rows[0]["w"]["end"], ")")
                if rows
                else None
            )
        if window.engine == "native":
            state = reader.load(self.checkpoint)
            groups = [F.col(f"key.{c}") for c in self.spec.window.group_by] or [F.lit(0)]
            row = state.select(
                F.count_distinct(*groups).alias("groups"),
                F.min(f"value.{own_bounds}.start").alias("start"),
                F.max(f"value.{own_bounds}.end").alias("end"),
            ).first()
            closing = ")"
        else:
            state = reader.option("stateVarName", STATE_VARIABLE).load(self.checkpoint)
            row = state.select(
                F.count(F.lit(1)).alias("groups"),
                F.timestamp_millis(F.min("value.span_start")).alias("start"),
                F.timestamp_millis(F.max("value.span_end")).alias("end"),
            ).first()
            closing = "]"
        if row is None or row["groups"] <= self.cap:
            return None
        return row["groups"], row["start"], row["end"], closing


class StateSizeWatch:
    """Warns when the state a run holds passes ``[checks] state_budget_bytes``, from
    what its operators report after each batch (not from the caps, which bound what it
    may hold): once, and again each time it doubles."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.pipeline = spec.name
        self.budget = spec.checks.state_budget_bytes
        self._next = self.budget

    def observe(self, progress: Progress) -> str | None:
        """After a batch: the warning said, if any."""
        used = state_bytes(progress)
        if used < self._next:
            return None
        while self._next <= used:
            self._next *= 2
        line = (
            f"{self.pipeline}: the state holds {_size(used)} in {state_rows(progress):,} rows "
            f"after batch {progress['batchId']}, over [checks] state_budget_bytes "
            f"({_size(self.budget)}); fewer groups (max_groups_per_window fails a run "
            "past them), a shorter lateness_ms, a lower hll_precision or more executor "
            "memory keep it in bounds"
        )
        log.warning("%s", line)
        return line


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,} bytes"
