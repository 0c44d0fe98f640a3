"""The base of the window kinds Spark has no operator for (sliding, count): always on
the state API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flow_jobs.spec.windows import WindowSpec

if TYPE_CHECKING:
    from pyspark.sql import Column


class StateApiWindow(WindowSpec):
    """A kind Spark has no operator for: always on the state API, a group's state its
    events, sized per row rather than per window."""

    @property
    def runs_natively(self) -> bool:
        return False

    def native_window(self, event_time: Column) -> None:
        return None

    @property
    def native_text(self) -> None:
        return None

    def active_windows(self) -> int:
        return 1  # per-group state, sized per row
