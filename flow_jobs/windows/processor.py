"""The one ``StatefulProcessor`` that runs every window on the state API: the kinds
Spark has no operator for, and any window ``WindowSpec.engine`` puts here (it reopens,
or holds an exact ``count_distinct``, whose cap only here is checked while open).

Per group, all window state is one ``ValueState`` blob (a ``WindowGroup``: the family's
state and the group's timer, in the format of ``flow_jobs.state_codec``), read and
written once per micro-batch: Spark's state calls are round trips to the JVM (≈ 1.5 ms
per group and batch measured here), so one get and one put per group is what keeps the
operator fast. The blob lives in Spark's state store (RocksDB) inside the checkpoint,
like every other operator's state.

The processor knows no family: it asks the plan's family (``flow_jobs.windows.family``)
what new rows change, what the watermark closes and when the group next has work, and
holds one event-time timer per group at that ``due`` (Spark fires a timer once the
watermark is at or above it: ``flow_jobs.kernels.timers``). Late rows never reach this
code: Spark drops rows behind the watermark before the operator and counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from flow_jobs import state_codec
from flow_jobs.instants import iso
from flow_jobs.kernels import timers
from flow_jobs.kernels.frame import ColumnKind, EventFrame, frame_from_pandas
from flow_jobs.kernels.ranges import Context, WindowAggregator
from flow_jobs.state_codec import Fields, StateFormatError, nested, scalar
from flow_jobs.windows.family import Emission, StateFamily

if TYPE_CHECKING:
    import pandas as pd

#: The group's window state, plus the time span of its open windows (epoch ms): read by
#: the max_groups_per_window check (``flow_jobs.runtime.caps``) without decoding it.
_STATE_SCHEMA = StructType(
    [
        StructField("blob", BinaryType()),
        StructField("span_start", LongType()),
        StructField("span_end", LongType()),
    ]
)
STATE_VARIABLE = "window_state"


@dataclass(frozen=True, kw_only=True)
class WindowOperatorPlan:
    """Everything the processor needs, decided at plan time on the driver: the window's
    family with its parameters (its spec model's ``state_family``), and the rest."""

    pipeline: str
    kind: str
    family: StateFamily
    emit: str
    group_columns: tuple[str, ...]  # empty: one global group
    columns: tuple[ColumnKind, ...]
    #: built on the driver by each aggregator's unit (``flow_jobs.aggregations``)
    aggregators: tuple[WindowAggregator, ...]
    output_columns: tuple[str, ...]


def _states() -> dict[str, type[Any]]:
    """Each family's state class by its saved name: every ``StateFamily`` imported (the
    built-ins and the plug-ins' families alike) declares its ``STATE``."""
    found: dict[str, type[Any]] = {}
    todo = list(StateFamily.__subclasses__())
    while todo:
        family = todo.pop()
        todo.extend(family.__subclasses__())
        state = getattr(family, "STATE", None)
        if state is not None:
            found[state.STATE_TYPE] = state
    return found


@dataclass
class WindowGroup:
    """A group's saved window state (``STATE_VARIABLE``'s ``blob``): its family's state
    (named in the blob by its ``STATE_TYPE``) and the group's timer."""

    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "window.group"

    state: Any
    timer: int | None = None
    #: the rule the timer was set under (``timers.RULE``); None: before there were rules
    timer_rule: int | None = None

    def to_fields(self) -> dict[str, pa.Array]:
        return {
            "family": scalar(self.state.STATE_TYPE, pa.string()),
            "state": nested(self.state.to_fields()),
            "timer": scalar(self.timer, pa.int64()),
            "timer_rule": scalar(self.timer_rule, pa.int64()),
        }

    @classmethod
    def from_fields(cls, f: Fields) -> WindowGroup:
        family, states = f.value("family"), _states()
        if family not in states:
            raise StateFormatError(
                f"window state of family {family!r}, which this flow-jobs does not know "
                f"({', '.join(sorted(states))}): a newer release or another plug-in wrote it"
            )
        state = states[family].from_fields(f.nested("state"))
        return cls(state, f.value("timer"), f.value("timer_rule"))


def load_group(data: bytes, columns: tuple[ColumnKind, ...] = ()) -> WindowGroup:
    """A group's saved window state, of any format version. ``columns``: the plan's,
    to write again a frame read from a legacy pickle (which has no Arrow types)."""
    group = state_codec.load(data, WindowGroup)
    if columns and state_codec.version_of(data) == 0:
        group.state = _typed(group.state, columns)
    return group


def _typed(state: Any, columns: tuple[ColumnKind, ...]) -> Any:
    """``state`` with its frames' object columns typed as the plan's columns."""
    types = {c.name: c.arrow_type for c in columns}
    frames = {
        f.name: getattr(state, f.name).typed(types)
        for f in fields(state)
        if isinstance(getattr(state, f.name), EventFrame)
    }
    return replace(state, **frames)


class WindowProcessor(StatefulProcessor):
    def __init__(self, plan: WindowOperatorPlan) -> None:
        self.plan = plan
        self.family = plan.family

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(STATE_VARIABLE, _STATE_SCHEMA)
        self.aggregators = list(self.plan.aggregators)
        self.kinds = {c.name: c.kind for c in self.plan.columns}

    # -- state -------------------------------------------------------------------------
    def _load(self) -> WindowGroup:
        if self.state.exists():
            return load_group(self.state.get()[0], self.plan.columns)
        return WindowGroup(self.family.empty(EventFrame.empty(list(self.plan.columns))))

    def _save(self, group: WindowGroup) -> None:
        if not self.family.held(group.state):
            self.state.clear()
            return
        start, end = self.family.span(group.state)
        self.state.update((state_codec.dump(group), start, end))

    # -- Spark callbacks ---------------------------------------------------------------
    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        import pandas as pd  # not at import: Spark's state workers start often

        new = frame_from_pandas(pd.concat(list(rows), ignore_index=True), list(self.plan.columns))
        group = self._load()
        state, changed = self.family.add(group.state, new, self.plan.emit == "current")
        closed = None
        if self.family.closes_on_input:
            state, closed = self.family.close(state, timerValues.getCurrentWatermarkInMs())
        self._check_open(key, self.family.open_windows(state))
        if changed is not None and len(changed):
            yield self._output(key, changed)
        if self.plan.emit == "final" and closed is not None and len(closed):
            yield self._output(key, closed)
        group.state = state
        self._set_timer(group)
        self._save(group)

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        group = self._load()
        watermark = timerValues.getCurrentWatermarkInMs()
        # Spark deletes this timer once the handler returns: ``_set_timer`` must know it.
        firing = timers.Firing(expiredTimerInfo.getExpiryTimeInMs(), watermark)
        state, closed = self.family.close(group.state, watermark)
        if self.plan.emit == "final" and closed is not None and len(closed):
            yield self._output(key, closed)
        group.state = state
        self._set_timer(group, firing)
        self._save(group)

    def close(self) -> None:
        return None

    def _set_timer(self, group: WindowGroup, firing: timers.Firing | None = None) -> None:
        """Hold the group's timer at its family's ``due`` (``flow_jobs.kernels.timers``).

        State saved before timers were set at their due watermark has its timer at
        ``due - 1``, which Spark may have fired and deleted already (a group it left with
        no timer): the first call for such a group deletes that one and registers the new
        one whatever it was."""
        group.timer = timers.settle(
            self.handle,
            group.timer,
            self.family.due(group.state),
            firing,
            held_known=group.timer_rule == timers.RULE,
        )
        group.timer_rule = timers.RULE

    # -- the exact distinct-count cap, while windows are open --------------------------
    def _check_open(self, key: Any, w: Emission) -> None:
        """Fail now if an open window holds more than an aggregator allows while open
        (an exact distinct count's cap): its state must not grow until the window
        closes."""

        def context() -> Context:
            return Context.of(w.frame, self.kinds, self._describe(key, w))

        for a in self.aggregators:
            a.check_open(w.frame, w.ranges, context)

    def _describe(self, key: Any, w: Emission) -> Callable[[int], str]:
        group = dict(zip(self.plan.group_columns, key, strict=False))
        closing = "]" if self.family.holds_end else ")"

        def describe(i: int) -> str:
            bounds = f"[{iso(w.starts[i])}, {iso(w.ends[i])}{closing}"
            return f"{bounds} for group {group}" if group else bounds

        return describe

    # -- output ------------------------------------------------------------------------
    def _output(self, key: Any, w: Emission) -> pd.DataFrame:
        import pandas as pd  # not at import: Spark's state workers start often

        group = dict(zip(self.plan.group_columns, key, strict=False))
        ctx = Context.of(w.frame, self.kinds, self._describe(key, w))
        data: dict[str, Any] = {
            self.plan.output_columns[0]: pd.to_datetime(w.starts, unit="ms", utc=True),
            self.plan.output_columns[1]: pd.to_datetime(w.ends, unit="ms", utc=True),
        }
        if w.indices is not None:
            data[self.plan.output_columns[2]] = w.indices
        for name in self.plan.group_columns:
            data[name] = [group[name]] * len(w)
        for aggregator in self.aggregators:
            outputs = aggregator.compute(ctx, w.ranges)
            for name, values in zip(aggregator.outputs, outputs, strict=True):
                data[name] = values
        if w.revisions is not None:
            data[self.plan.output_columns[-1]] = w.revisions
        return pd.DataFrame(data, columns=list(self.plan.output_columns))
