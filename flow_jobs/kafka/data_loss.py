"""Data loss: a planned start already deleted, or a partition that went backwards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Key of an end offset that records the partitions a batch resumed elsewhere after data
#: loss: ``{"<partition>": {"expected": next offset, "resumed_at": offset, "reason": …}}``.
DATA_LOSS_KEY = "_data_loss"


@dataclass(frozen=True)
class DataLoss:
    partition: int
    expected: int  # the next offset the checkpoint holds
    resumed_at: int  # where reading resumes: the broker's earliest offset
    reason: str  # "deleted" (retention) | "recreated" (the latest offset went back)

    def describe(self, topic: str) -> str:
        if self.reason == "deleted":
            return (
                f"Kafka {topic}[{self.partition}]: offsets {self.expected}.."
                f"{self.resumed_at - 1} were deleted (retention) before they were read"
            )
        return (
            f"Kafka {topic}[{self.partition}]: the latest offset went back below "
            f"{self.expected} (the topic was deleted and recreated, or truncated); its "
            f"records from offset {self.expected} on are gone"
        )


def find_data_loss(begin: dict[int, int], marks: dict[int, tuple[int, int]]) -> list[DataLoss]:
    """Partitions whose next offset the broker no longer serves: deleted by retention
    (earliest offset past it) or gone backwards (latest offset below it)."""
    losses = []
    for p, expected in sorted(begin.items()):
        if p not in marks:
            continue
        low, high = marks[p]
        if high < expected:
            losses.append(DataLoss(p, expected, low, "recreated"))
        elif low > expected:
            losses.append(DataLoss(p, expected, low, "deleted"))
    return losses


def recorded_losses(offsets: dict) -> dict[int, dict[str, Any]]:
    return {int(p): v for p, v in (offsets.get(DATA_LOSS_KEY) or {}).items()}
