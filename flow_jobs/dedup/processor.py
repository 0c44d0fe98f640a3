"""Deduplication of a source's records (``[[transform.dedup]]``), on Spark's state API.

The rule (docs/spec-reference.md, "Deduplication"): per key (the values of ``keys``,
NULL and NaN each a value of their own, as in SQL ``GROUP BY``: the operator compares
the keys' JSON, ``flow_jobs.dedup.compile``), records are taken in
the order of events (event time, then Kafka position: ``flow_jobs.plan.ordering``);
the first passes, and a later one is a duplicate when its event time is at most
``within_ms`` after the last record of its key that passed; otherwise it passes.

Spark's ``dropDuplicatesWithinWatermark`` keeps whichever duplicate a micro-batch
happens to see first, so its answer changes with the cut and the disorder; this
operator decides a record only once no earlier one can still come: a record is held
until the watermark reaches its event time (a record at or below the previous batch's
watermark is late, taken out at the source before this operator), then released, in
the order of events, as passing or as a duplicate. So every record is decided the same
way whatever the micro-batches, and its rows reach the window in the batch whose
watermark reaches them (Spark's aggregation drops a batch's rows only by the previous
batch's watermark: ``tests/test_spark_contracts.py``).

Keys are spread over ``BUCKETS`` groups (a hash of the keys): each group's state is one
saved ``DedupState`` (the held records and, per key, the last that passed while a
duplicate of it can still come), so a micro-batch costs a few state calls per bucket,
not per key. A key leaves the state once the watermark is ``within_ms`` past its last
passing record: any record still to come is later than that.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from flow_jobs.kernels.timers import Firing
from flow_jobs.operators.buckets import BUCKETS, HELD, BucketProcessor, rows_field, rows_of
from flow_jobs.state_codec import Fields, legacy

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BUCKETS", "DedupProcessor", "DedupState", "describe", "due", "release"]

#: The input columns the operator reads (no leading underscore: the pandas form of the
#: state API renames such columns): the bucket, the event time (epoch µs),
#: the tie-break of equal times (``flow_jobs.plan.ordering``) and the keys.
BUCKET = "flowdedup_bucket"
TIME = "flowdedup_t"
LANE = "flowdedup_lane"
POSITION = "flowdedup_position"
KEY = "flowdedup_key"
#: The whole row, as one JSON string (carried through the operator, parsed after it).
ROW = "flowdedup_row"
#: Output: NULL for a record that passes; for a duplicate, the record it repeats.
DUPLICATE_OF = "__flow_duplicate_of"
#: Output: the event time as a TIMESTAMP, Spark's event-time column after the operator
#: (a join side's own time column, by its name).
RELEASED_TIME = "__flow_dedup_time"


@dataclass
class DedupState:
    #: its name in saved state (``flow_jobs.state_codec``): never change it
    STATE_TYPE: ClassVar[str] = "dedup.bucket"

    #: records not yet released: (event time µs, lane, position, key, row); the
    #: operator's key and row are JSON strings
    held: list[tuple[int, int, int, Hashable, Any]] = field(default_factory=list)
    #: per key, the last record that passed: (event time µs, lane, position)
    passed: dict[Hashable, tuple[int, int, int]] = field(default_factory=dict)

    def to_fields(self) -> dict[str, pa.Array]:
        passed = [(k, *p) for k, p in self.passed.items()]
        return {"held": rows_field(self.held, HELD), "passed": rows_field(passed, _PASSED)}

    @classmethod
    def from_fields(cls, fields: Fields) -> DedupState:
        passed = {k: tuple(p) for k, *p in rows_of(fields, "passed", _PASSED)}
        return cls(rows_of(fields, "held", HELD), passed)  # type: ignore[arg-type]


@legacy.reads(("flow_jobs.operators.dedup", "DedupState"))
def _unpickled(r: Any) -> DedupState:
    return DedupState(**vars(r))


#: A key's last passing record, as saved.
_PASSED = {"key": pa.string(), "t": pa.int64(), "lane": pa.int64(), "position": pa.int64()}


@dataclass(frozen=True)
class Released:
    values: Any  # the held row (the operator's: its JSON string)
    time: int  # the event time, in the unit of ``release``'s (the operator's: µs)
    #: the record this one repeats (event time, lane, position); None: it passes
    duplicate_of: tuple[int, int, int] | None


def release(state: DedupState, watermark: int, within: int) -> list[Released]:
    """The held records at or below the watermark, decided in the order of events; the
    state keeps the rest, and the keys a later record can still repeat (times and
    ``within`` in one unit: the operator's microseconds)."""
    ready = sorted((h for h in state.held if h[0] <= watermark), key=lambda h: h[:3])
    state.held = [h for h in state.held if h[0] > watermark]
    out = []
    for t, lane, position, key, values in ready:
        first = state.passed.get(key)
        if first is not None and t - first[0] <= within:
            out.append(Released(values, t, first))
        else:
            state.passed[key] = (t, lane, position)
            out.append(Released(values, t, None))
    # Every record still to come is later than the watermark (the earlier ones are late).
    state.passed = {k: p for k, p in state.passed.items() if p[0] + within > watermark}
    return out


def due(state: DedupState, within: int) -> int | None:
    """The lowest watermark at which ``release`` has work: a held record's time, or the
    time a key's last passing record stops catching duplicates."""
    times = [h[0] for h in state.held] + [p[0] + within for p in state.passed.values()]
    return min(times) if times else None


def describe(duplicate_of: tuple[int, int, int], time_us: int, within_ms: int) -> str:
    """A duplicate's dead-letter reason (times in microseconds)."""
    t, lane, position = duplicate_of
    behind = (time_us - t) / 1000
    return (
        f"duplicate: {behind:g} ms after the record of its keys that passed (partition "
        f"{lane % (1 << 31)}, offset {position}), within_ms = {within_ms}"
    )


class DedupProcessor(BucketProcessor):
    """One bucket of keys (``transformWithStateInPandas``): holds each record until the
    watermark reaches it, then releases it passing or as a duplicate.

    A record comes in as its event time (µs), tie-break, keys and row, each key set and
    each row one JSON string (``flow_jobs.dedup.compile``: Spark's ``to_json``, which gives
    back every value exactly, NaN, binary and microseconds included): pandas then sees
    only integers and strings, and a NULL DOUBLE never becomes a NaN."""

    def __init__(self, within_ms: int, time_column: str = RELEASED_TIME) -> None:
        self.within_ms = within_ms
        self.within_us = within_ms * 1000
        self.time_column = time_column  # the output's event time (a join side's own)

    state_variable = "dedup"
    STATE = DedupState

    def empty(self) -> DedupState:
        return DedupState()

    def due(self, state: DedupState) -> int | None:
        return due(state, self.within_us)

    def holds(self, state: DedupState) -> bool:
        return bool(state.held or state.passed)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        state, timer = self._load()
        for frame in rows:
            state.held.extend(
                zip(
                    frame[TIME].tolist(),
                    frame[LANE].tolist(),
                    frame[POSITION].tolist(),
                    frame[KEY].tolist(),
                    frame[ROW].tolist(),
                    strict=True,
                )
            )
        self._save(state, timer, None)
        return iter(())

    def handleExpiredTimer(
        self, key: Any, timerValues: Any, expiredTimerInfo: Any
    ) -> Iterator[pd.DataFrame]:
        import pandas as pd  # not at import: Spark's state workers start often

        watermark = timerValues.getCurrentWatermarkInMs()
        state, timer = self._load()
        released = release(state, watermark * 1000, self.within_us)
        self._save(state, timer, Firing(expiredTimerInfo.getExpiryTimeInMs(), watermark))
        if released:
            yield pd.DataFrame(
                {
                    ROW: [r.values for r in released],
                    DUPLICATE_OF: [
                        None
                        if r.duplicate_of is None
                        else describe(r.duplicate_of, r.time, self.within_ms)
                        for r in released
                    ],
                    self.time_column: pd.to_datetime(
                        [r.time for r in released], unit="us", utc=True
                    ),
                }
            )
