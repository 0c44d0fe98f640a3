"""Spark's event-time timers, as tests/test_spark_contracts.py ("timers") pins them on the
real engine, for the pure-logic models that drive the operators micro-batch by micro-batch.

Per group, a set of timestamps: registering one held is a no-op, deleting one not held is
harmless; after a micro-batch's input rows, every timer at or below the batch's watermark
fires (``expired``), and is deleted once its handler returns (``handled``), whatever the
handler registered.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable


class _GroupHandle:
    def __init__(self, held: set[int]) -> None:
        self.held = held

    def registerTimer(self, expiryTimestampMs: int) -> None:
        self.held.add(expiryTimestampMs)

    def deleteTimer(self, expiryTimestampMs: int) -> None:
        self.held.discard(expiryTimestampMs)


class SparkTimers:
    def __init__(self) -> None:
        self.held: dict[Hashable, set[int]] = defaultdict(set)

    def handle(self, group: Hashable) -> _GroupHandle:
        """The timer calls of ``StatefulProcessorHandle`` for one group."""
        return _GroupHandle(self.held[group])

    def expired(self, watermark_ms: int) -> list[tuple[Hashable, int]]:
        """The timers a batch with this watermark fires, after its input rows."""
        return sorted(
            ((g, t) for g, times in self.held.items() for t in times if t <= watermark_ms),
            key=repr,
        )

    def handled(self, group: Hashable, expiry_ms: int) -> None:
        """Spark deletes a fired timer once ``handleExpiredTimer`` returns."""
        self.held[group].discard(expiry_ms)

    def of(self, group: Hashable) -> set[int]:
        return set(self.held.get(group, ()))
