"""``flow-jobs inspect``: what a pipeline's state holds, and why its windows are open.

Read from the checkpoint with Spark's state data source (``format("statestore")``,
``format("state-metadata")``), at the latest committed micro-batch, whether or not the
query runs: the open windows with their partial aggregates, a join's buffered rows,
the watermark that batch ran under (Spark's offset log) and each source's watermark
(the ledger), so each window says what closes it and which source it waits for.

Where the partial aggregates come from:

* native windows (tumbling, hopping, session on Spark's aggregation): the state value
  is Spark's aggregation buffers, in the order of the spec's aggregations (each
  aggregator's ``buffer_fields`` names the fields it keeps, and its ``partial_value``
  reads them: ``avg`` keeps sum and count, ``first`` / ``last``
  the least / greatest ``struct(event time, lane, position, value)``, an approximate
  ``count_distinct`` its DataSketches HLL sketch). When the buffers are not laid out as
  expected, every aggregate says "n/a" rather than guess; so do ``collect`` and
  ``reduce``, whose buffers are Spark's own serialization;
* state-API windows (sliding, count-based, reopening, current sessions, exact distinct
  counts): the value is flow-jobs' own (``flow_jobs.windows.processor``): the
  group's buffered events, from which each open window's aggregates are computed here
  (``reduce``: "n/a", it would run the user's function on the driver).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from flow_jobs.aggregations import AGGREGATORS, NOT_DECODED, AggregationInput
from flow_jobs.io.checkpoint_files import CheckpointFiles, checkpoint_files, logged_batches
from flow_jobs.locations import local_path
from flow_jobs.operators.frame import EventFrame, Values
from flow_jobs.operators.ranges import Context, Ranges
from flow_jobs.runtime.checkpoint import checkpoint_location, read_offset_log
from flow_jobs.runtime.reports import JOIN_OPERATOR
from flow_jobs.spec.models import Aggregation, PipelineSpec, WindowSpec
from flow_jobs.windows.family import CloseRule, span_text, time_rule
from flow_jobs.windows.processor import STATE_VARIABLE, load_blob

if TYPE_CHECKING:
    from flow_jobs.io.state_store import StateStore

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
        return _jsonable(asdict(self))


def inspect_state(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    store: StateStore | None = None,
    groups: Mapping[str, str] | None = None,
    limit: int = 20,
) -> StateReport:
    """The pipeline's state at its latest committed micro-batch. ``store``: the ledger,
    for each source's watermark (without it, only the global one is known);
    ``groups``: keep windows (or join rows) whose group (join key) columns equal these
    values, compared as strings; ``limit``: at most this many windows and join rows,
    those that close first."""
    checkpoint = checkpoint_location(spec.checkpoint_location())
    report = StateReport(spec.name, checkpoint)
    files = checkpoint_files(checkpoint, spark)
    batch = _latest_commit(files)
    if batch is None:
        report.note = NO_STATE
        return report
    report.batch_id = batch
    entry = read_offset_log(checkpoint, batch, spec)
    report.watermark = entry.watermark if entry else None
    if store is not None:
        ledger_mark, report.source_watermarks = _ledger_watermarks(store, spec, files)
        report.watermark = report.watermark or ledger_mark
    report.held_back_by = _held_back_by(report.source_watermarks)
    context = _Context(spec, report, dict(groups or {}), limit)
    # Reading RocksDB state asks the driver's StateStoreCoordinator, which Spark creates
    # with the session's streaming query manager: in a process that never started a
    # query (the CLI), touching the manager creates it (else: "Cannot find endpoint:
    # StateStoreCoordinator", measured on Spark 4.2).
    spark.streams.active  # noqa: B018
    operators = spark.read.format("state-metadata").load(checkpoint).collect()
    join = [r for r in operators if r["operatorName"] == JOIN_OPERATOR]
    windows = [r for r in operators if r["operatorName"] != JOIN_OPERATOR]
    reader = spark.read.format("statestore").option("batchId", batch)
    if join and spec.transform.join is not None:
        report.join_rows, report.buffered_join_rows = _join_rows(
            reader.option("operatorId", join[0]["operatorId"]), context
        )
    if windows and spec.has_window:
        reader = reader.option("operatorId", max(r["operatorId"] for r in windows))
        if spec.window.engine == "native":
            report.windows, report.open_windows = _native_windows(reader, context)
        else:
            report.windows, report.open_windows = _state_windows(reader, context)
    return report


# -- where the state is --------------------------------------------------------------


def state_absent(location: str) -> bool:
    """True when a local checkpoint has no committed micro-batch (or does not exist):
    known without Spark. A checkpoint behind a URI: False (read through Spark next)."""
    checkpoint = checkpoint_location(location)
    return (
        local_path(checkpoint) is not None and _latest_commit(checkpoint_files(checkpoint)) is None
    )


def _latest_commit(files: CheckpointFiles) -> int | None:
    """The latest committed micro-batch (``commits/<id>``), None before the first."""
    try:
        done = logged_batches(files, "commits")
    except FileNotFoundError:
        return None
    return max(done) if done else None


def _ledger_watermarks(
    store: StateStore, spec: PipelineSpec, checkpoint: CheckpointFiles
) -> tuple[datetime | None, dict[str, datetime | None]]:
    """The newest ledger row of this checkpoint's query: its global watermark and each
    source's (its highest event time so far minus its lateness)."""
    query_id = _query_id(checkpoint)
    rows = [
        r
        for r in store.recent_batches(spec.name, 50)
        if query_id is None or r["query_id"] == query_id
    ]
    marked = [r for r in rows if r.get("source_watermarks")]
    if not marked:
        return (rows[-1]["global_watermark"] if rows else None), {}
    last = marked[-1]
    marks = {
        s.name: _parse_iso((last["source_watermarks"] or {}).get(s.name)) for s in spec.sources
    }
    return last["global_watermark"], marks


def _query_id(checkpoint: CheckpointFiles) -> str | None:
    try:
        return str(json.loads(checkpoint.read_text("metadata"))["id"])
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _held_back_by(marks: Mapping[str, datetime | None]) -> tuple[str, ...]:
    """The sources at the minimum (a source without an event time yet holds it too)."""
    if not marks:
        return ()
    silent = tuple(s for s, m in marks.items() if m is None)
    if silent:
        return silent
    low = min(m for m in marks.values() if m is not None)
    return tuple(s for s, m in marks.items() if m == low)


# -- what closes a window ------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
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
        return tuple(s for s, m in marks.items() if m is None or _ms(m) < needed_ms)

    def because(self, rule: str, needed_ms: int | None) -> tuple[str, tuple[str, ...]]:
        """The rule, and the sources still short of it: a watermark ``needed_ms`` needs
        an event time ``needed_ms + lateness_ms`` from each of them."""
        sources = self.waiting_for(needed_ms)
        join = self.spec.transform.join
        lateness = (
            self.window.lateness_ms if self.spec.has_window else join.lateness_ms if join else 0
        )
        if sources and needed_ms is not None:
            rule += (
                f"; waiting for {', '.join(sources)} to reach event time "
                f"{self.clock(needed_ms + lateness)}"
            )
        return rule, sources

    def clock(self, ms: int) -> str:
        """A time in a rule: without its date when it is the watermark's."""
        w = self.report.watermark
        text = _clock(ms)
        if w is not None and _clock(_ms(w))[:10] == text[:10]:
            return text[11:]
        return text

    def watermark_text(self) -> str:
        w = self.report.watermark
        return f"watermark {self.clock(_ms(w))}" if w is not None else "no watermark yet"

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


# -- native windows ------------------------------------------------------------------


def _native_windows(reader: Any, c: _Context) -> tuple[list[OpenWindow], int | None]:
    state = reader.load(c.report.checkpoint)
    w = c.window
    session_kind = "session_window" in state.schema["value"].dataType.fieldNames()
    bounds = "value.session_window" if session_kind else "key.window"
    group_cols = {g: F.col(f"key.{g}") for g in w.group_by}
    state = _filter(state, group_cols, c.window_groups)
    total = state.count()
    rows = (
        state.select(
            F.unix_millis(F.col(f"{bounds}.start")).alias("start"),
            F.unix_millis(F.col(f"{bounds}.end")).alias("end"),
            *(col.alias(f"g{i}") for i, col in enumerate(group_cols.values())),
            F.col("value"),
        )
        .orderBy("end", "start", *(f"g{i}" for i in range(len(group_cols))))
        .limit(c.limit)
        .collect()
    )
    skip = {"session_window", *w.group_by} if session_kind else set()
    layout = _buffer_layout(
        w.aggregations,
        [f.name for f in state.schema["value"].dataType.fields if f.name not in skip],
    )
    if layout is None:
        c.report.note = (
            "the state's aggregation buffers are not laid out as expected: aggregates n/a"
        )
    windows = []
    for r in rows:
        buffers = [v for f, v in zip(r["value"].__fields__, r["value"], strict=True)
                   if f not in skip]  # fmt: skip
        rule, sources = c.explained(time_rule(c, r["end"]))
        windows.append(
            OpenWindow(
                _datetime(r["start"]),
                _datetime(r["end"]),
                {g: _plain(r[f"g{i}"]) for i, g in enumerate(w.group_by)},
                _native_aggregates(w.aggregations, layout, buffers),
                rule,
                sources,
            )
        )
    return windows, total


def _buffer_layout(aggs: Iterable[Aggregation], names: list[str]) -> list[slice] | None:
    """Each aggregation's slice of the buffer fields; None when they do not match."""
    layout, at = [], 0
    for a in aggs:
        expected = AGGREGATORS[a.agg].buffer_fields
        width = len(expected)
        if a.agg == "sum" and names[at + 1 : at + 2] == ["isEmpty"]:
            width = 2
        if tuple(names[at : at + len(expected)]) != expected:
            return None
        layout.append(slice(at, at + width))
        at += width
    return layout if at == len(names) else None


def _native_aggregates(
    aggs: list[Aggregation], layout: list[slice] | None, buffers: list[Any]
) -> dict[str, Any]:
    """Each aggregate's open value, read by its aggregator from its buffer fields."""
    return {
        a.as_: NOT_DECODED
        if layout is None
        else _plain(AGGREGATORS[a.agg].partial_value(buffers[layout[i]]))
        for i, a in enumerate(aggs)
    }


# -- state-API windows ---------------------------------------------------------------


def _state_windows(reader: Any, c: _Context) -> tuple[list[OpenWindow], int | None]:
    """Each group's value holds its open windows: decoded here, ``limit`` groups at a
    time in the order their windows start, until ``limit`` windows are found."""
    w = c.window
    state = reader.option("stateVarName", STATE_VARIABLE).load(c.report.checkpoint)
    group_cols = {g: F.col(f"key.{g}") for g in w.group_by}
    state = _filter(state, group_cols, c.window_groups).where(F.col("value.blob").isNotNull())
    ordered = state.select(
        *(col.alias(f"g{i}") for i, col in enumerate(group_cols.values())),
        F.col("value.blob").alias("blob"),
        F.col("value.span_start").alias("span_start"),
    ).orderBy("span_start", *(f"g{i}" for i in range(len(group_cols))))
    every = state.count() <= DECODE_ALL_GROUPS
    windows: list[OpenWindow] = []
    for r in ordered.toLocalIterator():
        group = {g: _plain(r[f"g{i}"]) for i, g in enumerate(w.group_by)}
        windows.extend(_group_windows(load_blob(r["blob"])["state"], group, c))
        if not every and len(windows) >= c.limit:
            break
    windows.sort(key=lambda x: (_ms(x.end) if x.end else 0, _ms(x.start) if x.start else 0))
    return windows[: c.limit], (len(windows) if every else None)


def _group_windows(state: Any, group: dict[str, Any], c: _Context) -> list[OpenWindow]:
    """A group's open windows, as the operator's own family sees them
    (``StateFamily.open_windows``), each with the rule that closes it (``close_rules``)."""
    family = c.window.state_family()
    held = family.open_windows(state)
    rules = family.close_rules(state, held, c)
    found = _windows(
        held.frame, held.ranges, held.starts, held.ends, group, [c.explained(r) for r in rules], c
    )
    labels = [(("index", r.index), ("revision", r.revision)) for r in rules]
    return [
        _with(x, **{k: v for k, v in label if v is not None})
        for x, label in zip(found, labels, strict=True)
    ]


def _windows(
    frame: EventFrame,
    ranges: Ranges,
    starts: np.ndarray,
    ends: np.ndarray,
    group: dict[str, Any],
    rules: list[tuple[str, tuple[str, ...]]],
    c: _Context,
) -> list[OpenWindow]:
    aggregates = _open_aggregates(c, frame, ranges)
    return [
        OpenWindow(_datetime(int(s)), _datetime(int(e)), group, values, rule, sources)
        for s, e, values, (rule, sources) in zip(starts, ends, aggregates, rules, strict=True)
    ]


def _open_aggregates(c: _Context, frame: EventFrame, ranges: Ranges) -> list[dict[str, Any]]:
    """Each open window's aggregates as they stand, computed by the operator's own
    aggregators (``Aggregator.state``) over the group's state. The frame's column kinds
    come from their dtype, so a timestamp column shows as the epoch microseconds it
    holds; ``reduce`` runs the user's functions, which ``inspect`` does not: "n/a"."""
    kinds = {name: _kind(values) for name, values in frame.columns.items()}
    ctx = Context.of(frame, kinds, lambda i: f"open window {i}")
    out: list[dict[str, Any]] = [{} for _ in range(len(ranges))]
    for i, a in enumerate(c.window.aggregations):
        unit = AGGREGATORS[a.agg]
        given = AggregationInput(a, i, None, None, ())
        column = unit.state_column(given)
        values: Any = [NOT_DECODED] * len(ranges)
        if a.agg != "reduce" and (column is None or column in frame.columns):
            operator = unit.state(given, column, c.spec.name)
            values = operator.compute(ctx, ranges)[0]
        for window, value in zip(out, values, strict=True):
            window[a.as_] = None if value is pd.NA else _plain(value)  # pandas' NULL
    return out


def _kind(values: Values) -> str:
    """A frame column's kind (``flow_jobs.operators.frame.ColumnKind``) from its dtype."""
    if values.data.dtype == np.float64:
        return "float"
    return "int" if values.data.dtype == np.int64 else "object"


# -- join buffers --------------------------------------------------------------------


def _join_rows(reader: Any, c: _Context) -> tuple[list[BufferedJoinRow], int]:
    join = c.spec.transform.join
    assert join is not None
    lower, upper = join.bounds
    out: list[BufferedJoinRow] = []
    total = 0
    for side, keys, offset in (("left", join.left_keys, upper), ("right", join.right_keys, -lower)):
        state = reader.option("joinSide", side).load(c.report.checkpoint)
        key_fields = state.schema["key"].dataType.fieldNames()
        key_cols = {k: F.col(f"key.{f}") for k, f in zip(keys, key_fields, strict=False)}
        value_fields = state.schema["value"].dataType.fieldNames()
        # the watermarked event time of the side (flow_jobs.plan.joins), else _event_ts
        time_field = next(
            (f for f in value_fields if f == f"__flow_{side}_time"),
            "_event_ts" if "_event_ts" in value_fields else None,
        )
        time_col = F.unix_millis(F.col(f"value.{time_field}")) if time_field else F.lit(None)
        state = _filter(state, key_cols, {k: v for k, v in c.groups.items() if k in key_cols})
        total += state.count()
        rows = (
            state.select(
                *(col.alias(f"k{i}") for i, col in enumerate(key_cols.values())),
                time_col.alias("t"),
                F.col("value"),
            )
            .orderBy("t")
            .limit(c.limit)
            .collect()
        )
        for r in rows:
            t = r["t"]
            rule, _ = c.because(
                f"evicted once {c.watermark_text()} passes event time "
                f"{'+' if offset >= 0 else '-'} {span_text(abs(offset))}"
                + (f" = {c.clock(t + offset)}" if t is not None else ""),
                None,
            )
            row = {k: _plain(v) for k, v in r["value"].asDict().items() if not k.startswith("_")}
            out.append(
                BufferedJoinRow(
                    side,
                    {k: _plain(r[f"k{i}"]) for i, k in enumerate(key_cols)},
                    _datetime(t),
                    rule,
                    row,
                )
            )
    out.sort(key=lambda x: _ms(x.event_time) if x.event_time else 0)
    return out[: c.limit], total


# -- small conversions ---------------------------------------------------------------


def _filter(
    state: DataFrame, columns: Mapping[str, Column], wanted: Mapping[str, str]
) -> DataFrame:
    for name, value in wanted.items():
        state = state.where(columns[name].cast("string") == F.lit(value))
    return state


def _with(window: OpenWindow, **changes: Any) -> OpenWindow:
    from dataclasses import replace

    return replace(window, **changes)


def _datetime(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def _ms(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.astimezone(UTC)  # Spark hands out naive local times
    return round(value.timestamp() * 1000)


def _parse_iso(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


def _clock(ms: int) -> str:
    """``2026-11-01 10:04:58`` (``.250`` when the milliseconds are not 0), UTC."""
    t = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = t.strftime("%Y-%m-%d %H:%M:%S")
    return text + (f".{t.microsecond // 1000:03d}" if t.microsecond else "")


def _plain(value: Any) -> Any:
    """Python values as JSON and a table show them (numpy scalars unwrapped, naive
    Spark timestamps made UTC)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.astimezone(UTC)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "asDict"):
        return _jsonable(value.asDict())
    return value
