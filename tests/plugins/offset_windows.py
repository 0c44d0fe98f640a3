"""A window family from outside the engine: tumbling windows shifted by an offset.

``kind = "tumbling_offset"`` with ``duration_ms`` and ``offset_ms``: the windows
``[k * duration_ms + offset_ms, (k + 1) * duration_ms + offset_ms)``, as Flink's
``TUMBLE(time, size, offset)``; ``-duration_ms < offset_ms < duration_ms`` (Spark's
``window()`` takes its ``startTime`` so). A pipeline uses it with::

    plugins = ["tests.plugins.offset_windows"]

    [transform.window]
    kind = "tumbling_offset"
    duration_ms = 30000
    offset_ms = 7000

It runs on Spark's aggregation (``window()`` with a start time), the Kafka reader folds
rows into panes of gcd(duration, offset) for it, and on the state API (an exact distinct
count, late data that reopens) it is ``flow_jobs.windows.fixed``'s state logic with its
own bounds. Nothing under ``flow_jobs/`` names it: ``tests/test_plugin_window.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

import numpy as np
from pydantic import Field

from flow_jobs.spec.base import key_error
from flow_jobs.spec.windows import PaneFolding, WindowSpec, milliseconds, register_window_family
from flow_jobs.windows.fixed import Fixed

if TYPE_CHECKING:
    from pyspark.sql import Column


@dataclass(frozen=True)
class OffsetBounds:
    """The windows keyed by their start (``flow_jobs.windows.fixed.WindowBounds``)."""

    duration_ms: int
    offset_ms: int
    allowed_lateness_ms: int

    def keys(self, t: np.ndarray) -> np.ndarray:
        if not len(t):
            return np.empty(0, np.int64)
        return np.unique(t - np.mod(t - self.offset_ms, self.duration_ms))

    def starts(self, keys: np.ndarray) -> np.ndarray:
        return keys

    def ends(self, keys: np.ndarray) -> np.ndarray:
        return keys + self.duration_ms


@register_window_family
class OffsetTumblingWindow(WindowSpec):
    """``kind = "tumbling_offset"``: tumbling windows of ``duration_ms`` whose bounds are
    ``offset_ms`` after the epoch-aligned ones."""

    kind: Literal["tumbling_offset"]
    duration_ms: Annotated[int, Field(gt=0)] | None = None
    offset_ms: int | None = None

    SIZE_KEYS: ClassVar[dict[str, tuple[str, ...]]] = {
        "tumbling_offset": ("duration_ms", "offset_ms")
    }
    REOPEN_REFUSED: ClassVar[str | None] = None
    SHARED_BOUNDS: ClassVar[bool] = True

    def _family_rules(self) -> None:
        duration, offset = self.duration_ms, self.offset_ms
        if duration is not None and offset is not None and abs(offset) >= duration:
            raise key_error(
                "offset_ms",
                f"offset_ms = {offset} must be between -{duration} and {duration} "
                f"(duration_ms), exclusive: an offset of a whole window shifts nothing",
            )

    @property
    def duration(self) -> int:
        assert self.duration_ms is not None
        return self.duration_ms

    @property
    def offset(self) -> int:
        assert self.offset_ms is not None
        return self.offset_ms

    @property
    def runs_natively(self) -> bool:
        return True

    def native_window(self, event_time: Column) -> Column:
        from pyspark.sql import functions as F

        size = milliseconds(self.duration)
        return F.window(event_time, size, size, milliseconds(self.offset))

    @property
    def native_text(self) -> str:
        return f"window(event_time, {self.duration} ms, startTime {self.offset} ms)"

    @property
    def size_text(self) -> str:
        return f"{self.duration} ms from {self.offset} ms"

    def active_windows(self) -> int:
        return math.ceil((self.duration + self.watermark_delay_ms) / self.duration)

    def pane_folding(self) -> PaneFolding:
        # every bound is a multiple of gcd(duration, offset): a pane is inside one window
        return PaneFolding(pane_ms=math.gcd(self.duration, abs(self.offset)))

    def state_family(self) -> Fixed:
        bounds = OffsetBounds(self.duration, self.offset, self.reopen_lateness_ms)
        return Fixed(bounds, self.reopens)
