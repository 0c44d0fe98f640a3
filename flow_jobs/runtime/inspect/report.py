"""What ``flow-jobs inspect`` reports (``StateReport``), how it words what closes a
window (``Reading``), and the conversions its parts share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from flow_jobs.instants import epoch_ms, iso
from flow_jobs.spec.models import PipelineSpec, WindowSpec
from flow_jobs.windows.family import CloseRule

NO_STATE = "no state yet: the pipeline has not run"

#: State-API windows: up to this many groups, every group is decoded (an exact count of
#: open windows, the first ``limit`` by end); past it, groups in the order their open
#: windows start until ``limit`` windows are found.
DECODE_ALL_GROUPS = 10_000


@dataclass(frozen=True)
class OpenWindow:
    start: datetime | None
    end: datetime | None
    group: dict[str, Any]
    aggregates: dict[str, Any]  # by the spec's ``as``
    closes_when: str  # the rule and where the watermark stands
    waiting_for: tuple[str, ...]  # the sources whose watermark is still below it
    index: int | None = None  # count windows
    revision: int | None = None  # reopening windows: the revision last emitted (0: none)


@dataclass(frozen=True)
class BufferedJoinRow:
    side: str  # left | right
    key: dict[str, Any]
    event_time: datetime | None
    evicted_when: str
    row: dict[str, Any]


@dataclass
class StateReport:
    pipeline: str
    checkpoint: str
    batch_id: int | None = None  # the committed micro-batch the state is read at
    watermark: datetime | None = None  # the one that batch ran under
    source_watermarks: dict[str, datetime | None] = field(default_factory=dict)
    held_back_by: tuple[str, ...] = ()
    windows: list[OpenWindow] = field(default_factory=list)
    #: matching the filter, before the limit (None: a state-API window's state too big
    #: to decode every group of, see ``DECODE_ALL_GROUPS``)
    open_windows: int | None = 0
    join_rows: list[BufferedJoinRow] = field(default_factory=list)
    buffered_join_rows: int = 0  # matching the filter, before the limit
    note: str | None = None  # NO_STATE, or why aggregates show "n/a"

    @property
    def has_state(self) -> bool:
        return self.batch_id is not None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types: times as ISO 8601 UTC strings."""
        return jsonable(asdict(self))


# -- what closes a window ------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """One inspect run: the spec, the report so far, the filter and the limit; it words
    what closes a window (a window family's RuleClock) and which sources it waits for."""

    spec: PipelineSpec
    report: StateReport
    groups: dict[str, str]
    limit: int

    @property
    def window(self) -> WindowSpec:
        return self.spec.window

    @property
    def window_groups(self) -> dict[str, str]:
        """The filter on the window's group columns (others filter a join's keys)."""
        return {k: v for k, v in self.groups.items() if k in self.window.group_by}

    def waiting_for(self, needed_ms: int | None) -> tuple[str, ...]:
        """The sources whose watermark is below ``needed_ms`` (the held-back ones when
        the ledger has no per-source watermark)."""
        marks = self.report.source_watermarks
        if needed_ms is None or not marks:
            return self.report.held_back_by
        return tuple(s for s, m in marks.items() if m is None or epoch_ms(m) < needed_ms)

    def because(self, rule: str, needed_ms: int | None) -> tuple[str, tuple[str, ...]]:
        """The rule, and the sources still short of it: a watermark ``needed_ms`` needs
        an event time ``needed_ms + lateness_ms`` from each of them."""
        sources = self.waiting_for(needed_ms)
        lateness = self.spec.transform.stages()[-1].lateness_ms  # the state's operator
        if sources and needed_ms is not None:
            rule += (
                f"; waiting for {', '.join(sources)} to reach event time "
                f"{self.clock(needed_ms + lateness)}"
            )
        return rule, sources

    def clock(self, ms: int) -> str:
        """A time in a rule: without its date when it is the watermark's."""
        w = self.report.watermark
        text = clock_text(ms)
        if w is not None and clock_text(epoch_ms(w))[:10] == text[:10]:
            return text[11:]
        return text

    def watermark_text(self) -> str:
        w = self.report.watermark
        return f"watermark {self.clock(epoch_ms(w))}" if w is not None else "no watermark yet"

    # the window families' RuleClock (flow_jobs.windows.family)
    @property
    def watermark(self) -> str:
        return self.watermark_text()

    def at(self, ms: int) -> str:
        return self.clock(ms)

    def explained(self, rule: CloseRule) -> tuple[str, tuple[str, ...]]:
        """A family's close rule, with the sources it waits for (none when it waits for
        events, not the watermark)."""
        if rule.needed_ms is None:
            return rule.text, ()
        return self.because(rule.text, rule.needed_ms)


# -- small conversions ---------------------------------------------------------------


def filter_state(
    state: DataFrame, columns: Mapping[str, Column], wanted: Mapping[str, str]
) -> DataFrame:
    for name, value in wanted.items():
        state = state.where(columns[name].cast("string") == F.lit(value))
    return state


def with_labels(window: OpenWindow, **changes: Any) -> OpenWindow:
    from dataclasses import replace

    return replace(window, **changes)


def as_datetime(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def parse_iso(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


def clock_text(ms: int) -> str:
    """``2026-11-01 10:04:58`` (``.250`` when the milliseconds are not 0), UTC."""
    t = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    return text + (f".{t.microsecond // 1000:03d}" if t.microsecond else "")


def plain(value: Any) -> Any:
    """Python values as JSON and a table show them (numpy scalars unwrapped, naive
    Spark timestamps made UTC)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(UTC)
    return value


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return iso(value, timespec="milliseconds")
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "asDict"):
        return jsonable(value.asDict())
    return value
