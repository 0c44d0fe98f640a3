"""The one event-time timer each group of the state-API windows holds.

What Spark does (PySpark's ``transformWithStateInPandas``, pinned by
``tests/test_spark_contracts.py``, section "timers"):

* a timer at ``T`` fires in the first micro-batch whose watermark ``W`` has
  ``T <= W``, after that batch's input rows (one registered on input at or below ``W``
  fires in the same batch);
* Spark deletes ``T`` once ``handleExpiredTimer`` for it returns: registering ``T``
  again inside the handler is a no-op that the deletion then undoes;
* registering a time the group already holds does nothing; deleting one it does not
  hold is harmless.

The rule: each window family says its ``due``, the lowest watermark at which its close
(or numbering) step has work for the group (``None``: nothing waits), and the group's
timer is registered **at** ``due``. It fires in the first batch where that work exists
and never in one where it does not, so a firing always leaves the group with work done
and a new ``due`` above ``W``. (Registered at ``due - 1``, on the belief that Spark fires
once ``W > T``, a timer fired at ``W = due - 1`` with nothing to do, was registered
again at the same time, and Spark's deletion left the group with no timer at all while
its state said it had one: its windows never closed.)

The saved timer (the group's state keeps it, so that a change registers the new one and
deletes the old) must be what Spark holds: inside the handler of a firing at ``T``, the
group holds no ``T`` any more, whatever the handler does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: Saved with each group's timer: state written before timers were set at their due
#: watermark has none, and its timer (at ``due - 1``) may be one Spark already fired and
#: deleted.
RULE = 2


class TimerHandle(Protocol):
    def registerTimer(self, expiryTimestampMs: int) -> None: ...

    def deleteTimer(self, expiryTimestampMs: int) -> None: ...


@dataclass(frozen=True)
class Firing:
    """The timer being handled (``handleExpiredTimer``) and the batch's watermark."""

    expiry_ms: int
    watermark_ms: int


def wanted(due: int | None, firing: Firing | None = None) -> int | None:
    """The timer to register for ``due``: ``due`` itself, except inside the handler of
    a firing at watermark ``W`` when ``due <= W``: then ``W + 1``.

    While a family's ``due`` agrees with its close, the close the handler just ran at
    ``W`` left nothing due at or below ``W``, so this is a guard. A timer at or below
    ``W`` registered there can be the very time that fired, which Spark deletes after
    the handler (the group would hold no timer: the defect this module fixes); ``W + 1``
    differs from it and is the lowest time at which the close can have new work (the
    next batch whose watermark moves above ``W``)."""
    if due is None or firing is None or due > firing.watermark_ms:
        return due
    return firing.watermark_ms + 1


def settle(
    handle: TimerHandle,
    held: int | None,
    due: int | None,
    firing: Firing | None = None,
    *,
    held_known: bool = True,
) -> int | None:
    """Make Spark hold the group's timer for ``due``; returns it, to be saved.

    ``held``: the timer saved with the group's state. ``firing``: inside
    ``handleExpiredTimer``; a held timer equal to it is gone once the handler returns.
    ``held_known = False`` (state saved under an earlier rule): Spark may or may not
    hold ``held``, so it is deleted (harmless if absent) and the new one registered even
    when the two are equal."""
    if firing is not None and held == firing.expiry_ms:
        held = None
    want = wanted(due, firing)
    if held != want or not held_known:
        if held is not None:
            handle.deleteTimer(held)
        if want is not None:
            handle.registerTimer(want)
    return want
