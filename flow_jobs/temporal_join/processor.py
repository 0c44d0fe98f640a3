"""The event-time temporal join (``[transform.temporal_join]``), on Spark's state API.

The rule (docs/spec-reference.md, "[transform.temporal_join]"): a stream record with
keys K at event time t joins the version of K valid at t: of K's versions (the records
of the versions source) with a time at or below t, the last in the order of events
(time, then Kafka position: ``flow_jobs.plan.ordering``); none, or a tombstone there,
and the record has no version (``how = "inner"``: no row; ``"left"``: NULL version
columns).

Spark has no such join (its stream-stream join pairs rows within a time bound, and a
stream-static join reads the table as it is now). The operator waits: a stream record
is held until the watermark reaches its event time. The watermark is the lowest of the
two sources' (``plan.sources.SourceWatermark``), so by then the versions source has
passed t too, and a version at or below t that had not come yet would be late, taken
out at its source: the held record's version is final, whatever the micro-batches. An
update that comes after the stream record but before the watermark passes it is
joined (the acceptance test in ``tests/test_temporal_join.py``).

State: keys are hashed into ``BUCKETS`` groups; each group keeps one saved
``TemporalState`` (the held stream records, and per key its versions that can still
be joined). Once the watermark W passes a key's later version, the earlier one can
match no record (every record still to come is after W): it leaves the state, and a
tombstone at or below W leaves with it. A version that is still current leaves once
it is older than ``W - retention_ms``, when set.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from flow_jobs.kernels.timers import Firing
from flow_jobs.operators.buckets import BUCKETS, HELD, BucketProcessor, rows_field, rows_of
from flow_jobs.state_codec import Fields, legacy

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BUCKETS"]

#: The input columns (no leading underscore: the pandas form of the state API renames
#: such columns): the bucket, the event time (epoch µs), the tie-break of equal times
#: (``flow_jobs.plan.ordering``), the keys and the row (JSON strings);
BUCKET = "flowtemporal_bucket"
TIME = "flowtemporal_t"
LANE = "flowtemporal_lane"
POSITION = "flowtemporal_position"
KEY = "flowtemporal_key"
ROW = "flowtemporal_row"
#: 1 for a stream record, 0 for a version; TRUE for a tombstone.
SIDE = "flowtemporal_side"
TOMBSTONE = "flowtemporal_tombstone"
#: Output: the stream record's row and its version's (NULL: none), as JSON strings,
#: and the stream record's event time.
STREAM_ROW = "__flow_stream_row"
VERSION_ROW = "__flow_version_row"
RELEASED_TIME = "__flow_temporal_time"

#: The state variable each bucket keeps (``flow-jobs inspect`` reads it).
STATE_VARIABLE = "temporal"

#: A version: (time, lane, position, tombstone, row); sorted in the order of events.
Version = tuple[int, int, int, bool, Any]


@dataclass
class TemporalState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "temporal_join.bucket"

    #: stream records not yet released: (event time, lane, position, key, row)
    held: list[tuple[int, int, int, Hashable, Any]] = field(default_factory=list)
    #: per key, its versions that can still be joined, in the order of events
    versions: dict[Hashable, list[Version]] = field(default_factory=dict)

    def to_fields(self) -> dict[str, pa.Array]:
        """Versions saved one after another, each with its key (a key's run together)."""
        versions = [(k, *v) for k, vs in self.versions.items() for v in vs]
        return {"held": rows_field(self.held, HELD), "versions": rows_field(versions, _VERSION)}

    @classmethod
    def from_fields(cls, fields: Fields) -> TemporalState:
        versions: dict[Hashable, list[Version]] = {}
        for key, *version in rows_of(fields, "versions", _VERSION):
            versions.setdefault(key, []).append(tuple(version))  # type: ignore[arg-type]
        return cls(rows_of(fields, "held", HELD), versions)  # type: ignore[arg-type]


@legacy.reads(("flow_jobs.operators.temporal", "TemporalState"))
def _unpickled(r: Any) -> TemporalState:
    return TemporalState(**vars(r))


#: A key's version, as saved.
_VERSION = {"key": pa.string(), "t": pa.int64(), "lane": pa.int64(), "position": pa.int64()}
_VERSION |= {"tombstone": pa.bool_(), "row": pa.string()}


@dataclass(frozen=True)
class Joined:
    stream: Any  # the held row
    version: Any | None  # the version's row; None: no version valid at the time
    time: int


def add_version(state: TemporalState, key: Hashable, version: Version) -> None:
    insort(state.versions.setdefault(key, []), version, key=lambda v: v[:3])


def valid_at(versions: list[Version], time: int) -> Version | None:
    """The version valid at ``time``: the last at or below it (None: none, or a
    tombstone there)."""
    i = bisect_right(versions, time, key=lambda v: v[0])
    if i == 0 or versions[i - 1][3]:
        return None
    return versions[i - 1]


def release(state: TemporalState, watermark: int, retention: int | None) -> list[Joined]:
    """The held records at or below the watermark, each with its version, in the order
    of events; then the versions no record to come can join leave the state (times and
    ``retention`` in one unit: the operator's microseconds)."""
    ready = sorted((h for h in state.held if h[0] <= watermark), key=lambda h: h[:3])
    state.held = [h for h in state.held if h[0] > watermark]
    out = []
    for t, _, _, key, row in ready:
        version = valid_at(state.versions.get(key, []), t)
        out.append(Joined(row, None if version is None else version[4], t))
    evict(state, watermark, retention)
    return out


def evict(state: TemporalState, watermark: int, retention: int | None) -> None:
    """Every record to come is after the watermark: of a key's versions at or below it,
    only the last can still be joined, and not when it is a tombstone, nor (with a
    retention) when older than ``watermark - retention``."""
    for key in list(state.versions):
        versions = state.versions[key]
        i = bisect_right(versions, watermark, key=lambda v: v[0])
        kept = versions[max(i - 1, 0) :]
        if i > 0 and (kept[0][3] or (retention is not None and kept[0][0] < watermark - retention)):
            kept = kept[1:]
        if kept:
            state.versions[key] = kept
        else:
            del state.versions[key]


def due(state: TemporalState, retention: int | None) -> int | None:
    """The lowest watermark at which ``release`` has work: a held record's time, a
    later version's (the earlier one leaves), a tombstone's, or the time a current
    version grows older than the retention."""
    times = [h[0] for h in state.held]
    for versions in state.versions.values():
        if len(versions) > 1:
            times.append(versions[1][0])
        first = versions[0]
        if first[3]:
            times.append(first[0])
        elif retention is not None:
            times.append(first[0] + retention + 1)
    return min(times) if times else None


class TemporalJoinProcessor(BucketProcessor):
    """One bucket of keys (``transformWithStateInPandas``): versions kept, stream
    records held until the watermark reaches them, then joined with their version.

    Rows come in as (side, tombstone, event time µs, tie-break, key, row), each key set
    and each row one JSON string (``flow_jobs.temporal_join.compile``), as in the dedup
    operator: pandas sees only integers, booleans and strings."""

    def __init__(self, retention_ms: int | None) -> None:
        self.retention_us = None if retention_ms is None else retention_ms * 1000

    state_variable = STATE_VARIABLE
    STATE = TemporalState

    def empty(self) -> TemporalState:
        return TemporalState()

    def due(self, state: TemporalState) -> int | None:
        return due(state, self.retention_us)

    def holds(self, state: TemporalState) -> bool:
        return bool(state.held or state.versions)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        state, timer = self._load()
        for frame in rows:
            columns = (SIDE, TOMBSTONE, TIME, LANE, POSITION, KEY, ROW)
            for side, tomb, t, lane, position, k, row in zip(
                *(frame[c].tolist() for c in columns), strict=True
            ):
                if side:
                    state.held.append((t, lane, position, k, row))
                else:
                    add_version(state, k, (t, lane, position, bool(tomb), None if tomb else row))
        self._save(state, timer, None)
        return iter(())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        import pandas as pd  # not at import: Spark's state workers start often

        watermark = timerValues.getCurrentWatermarkInMs()
        state, timer = self._load()
        joined = release(state, watermark * 1000, self.retention_us)
        self._save(state, timer, Firing(expiredTimerInfo.getExpiryTimeInMs(), watermark))
        if joined:
            yield pd.DataFrame(
                {
                    STREAM_ROW: [j.stream for j in joined],
                    VERSION_ROW: [j.version for j in joined],
                    RELEASED_TIME: pd.to_datetime([j.time for j in joined], unit="us", utc=True),
                }
            )
