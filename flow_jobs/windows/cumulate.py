"""Cumulating windows (``kind = "cumulate"``): today's running total, every step.

The rules: docs/spec-reference.md, "Windows". Each cumulation ``[s, s + max_duration_ms)``
is aligned to the epoch (``s`` a multiple of ``max_duration_ms``) and has a window for
every step: ``[s, s + k·step_ms)`` for k = 1 … max_duration_ms / step_ms. A row at ``t``
is in every window of its cumulation that ends after it: the ends from the first step
boundary after ``t`` to ``s + max_duration_ms``. Every window is a whole number of
``step_ms`` panes, so the Kafka reader folds rows into those panes as it does for
hopping windows (``flow_jobs.combine.decide``).

Spark has no cumulating window function, but its aggregation runs them: each row is
exploded into the (start, end) of its windows, and the aggregation groups on that
struct marked as the watermarked event time (the mark ``window()`` gives its struct);
Spark closes a window, and drops a late row of it, by the struct's end against the
watermark as it does for ``window()`` (pinned in ``tests/test_spark_contracts.py``).
On the state API (``late_data = "reopen"``, an exact ``count_distinct``) the windows are
``flow_jobs.windows.fixed``'s, keyed by their end: windows of one cumulation share
their start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field

from flow_jobs.spec.base import key_error
from flow_jobs.spec.windows import register_window_family
from flow_jobs.windows.fixed import Fixed, PaneWindow

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass(frozen=True)
class CumulateBounds:
    """Cumulating windows, each keyed by its end (``flow_jobs.windows.fixed.WindowBounds``)."""

    step_ms: int
    max_duration_ms: int
    allowed_lateness_ms: int

    def keys(self, t: np.ndarray) -> np.ndarray:
        """The distinct ends (sorted) of every window holding one of the times ``t``."""
        if not len(t):
            return np.empty(0, np.int64)
        step, most = self.step_ms, self.max_duration_ms
        offset = np.mod(t, most)  # from the cumulation's start, also before the epoch
        last = t - offset + most
        first = t - offset + (offset // step + 1) * step
        candidates = first[:, None] + step * np.arange(most // step, dtype=np.int64)[None, :]
        return np.unique(candidates[candidates <= last[:, None]])

    def starts(self, keys: np.ndarray) -> np.ndarray:
        before = keys - 1  # an end is in (start, start + max_duration_ms]
        return before - np.mod(before, self.max_duration_ms)

    def ends(self, keys: np.ndarray) -> np.ndarray:
        return keys


@dataclass(frozen=True)
class Cumulate(Fixed):
    """Cumulating windows on the state API: ``Fixed``'s rules with their bounds."""


@register_window_family
class CumulateWindow(PaneWindow):
    """``kind = "cumulate"``: per cumulation ``[s, s + max_duration_ms)`` aligned to the
    epoch, the windows ``[s, s + k·step_ms)``, k = 1 … max_duration_ms / step_ms."""

    kind: Literal["cumulate"]
    step_ms: Annotated[int, Field(gt=0)] | None = None
    max_duration_ms: Annotated[int, Field(gt=0)] | None = None

    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {"cumulate": ("step_ms", "max_duration_ms")}
    REOPEN_REFUSED: ClassVar[str | None] = None
    #: Spark's aggregation groups a row once per window it is in (``native_window`` is
    #: the list of them: ``flow_jobs.plan.windows`` explodes it).
    EXPLODES: ClassVar[bool] = True

    def _family_rules(self) -> None:
        step, most = self.step_ms, self.max_duration_ms
        if step is not None and most is not None and most % step:
            raise key_error(
                "max_duration_ms",
                f"max_duration_ms = {most} must be a multiple of step_ms = {step}",
            )

    @property
    def step(self) -> int:
        assert self.step_ms is not None
        return self.step_ms

    @property
    def max_duration(self) -> int:
        assert self.max_duration_ms is not None
        return self.max_duration_ms

    @property
    def pane_ms(self) -> int:
        return self.step

    @property
    def runs_natively(self) -> bool:
        return True

    def native_window(self, event_time: Column) -> Column:
        """The (start, end) structs of every window holding the row, as an array."""
        from pyspark.sql import functions as F

        step, most = self.step * 1000, self.max_duration * 1000  # microseconds
        t = F.unix_micros(event_time)
        offset = F.pmod(t, F.lit(most))
        start = t - offset
        first = start + (F.floor(offset / F.lit(step)) + 1) * F.lit(step)
        ends = F.sequence(first, start + F.lit(most), F.lit(step).cast("bigint"))
        return F.transform(
            ends,
            lambda end: F.struct(
                F.timestamp_micros(start).alias("start"), F.timestamp_micros(end).alias("end")
            ),
        )

    @property
    def native_text(self) -> str:
        return (
            f"explode(the row's windows [c, c + k * {self.step_ms} ms), c a multiple of "
            f"{self.max_duration_ms} ms) as the watermarked window"
        )

    @property
    def size_text(self) -> str:
        return f"every {self.step_ms} ms up to {self.max_duration_ms} ms"

    def active_windows(self) -> int:
        # a row is in up to max / step windows of its cumulation; windows of the one
        # before are held until the watermark (the delay behind) passes their ends
        return math.ceil((self.max_duration + self.watermark_delay_ms) / self.step)

    def state_family(self) -> Cumulate:
        bounds = CumulateBounds(self.step, self.max_duration, self.reopen_lateness_ms)
        return Cumulate(bounds, self.reopens)
