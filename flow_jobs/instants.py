"""Instants as flow-jobs reads and writes them: epoch milliseconds, and ISO 8601 in UTC
with a ``Z``. One definition each, for messages, the ledger, inspect and the targets'
predicates alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(instant: datetime) -> int:
    """An instant as epoch milliseconds, exactly (not through a float); a naive one is
    local time, as Spark hands timestamps to Python."""
    return (instant.astimezone(UTC) - _EPOCH) // _MS


def from_epoch_ms(ms: int | float) -> datetime:
    """Epoch milliseconds as an aware UTC instant (exactly, not through a float)."""
    return _EPOCH + int(ms) * _MS


def iso(instant: datetime | int | float, timespec: str = "auto") -> str:
    """``2026-01-01T00:00:00.250Z``: an instant (a naive one is local time, as Spark
    hands timestamps to Python) or epoch milliseconds, in UTC; ``timespec`` as
    ``datetime.isoformat``'s ("auto": as precise as the instant). The year has four
    digits, below 1000 too (``strftime``'s ``%Y`` would not pad it)."""
    value = instant if isinstance(instant, datetime) else from_epoch_ms(instant)
    return value.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")
