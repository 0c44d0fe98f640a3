"""Waiting out a store that is away: the state store's Postgres, the target's object
store.

A restart or a network cut of either should not end a run: the write of a micro-batch
is idempotent (its ledger row says whether it went in; a Delta commit carries the
batch's transaction id; dead letters are keyed by their record's position), so it is
simply tried again until the store answers, up to ``[runtime] retry_for_ms``. The wait
is logged once as it starts and once with its length as it ends; past the limit the run
fails with one line naming the store and the key to raise, and a new run resumes from
the checkpoint.

What counts as "away" (``away``): a lost or refused Postgres connection, or the pool
handing out none in time; an object-store request that could not be sent or got no
answer (delta-rs reports it as an ``OSError`` after its own retries). Anything else (a
refused credential, a missing bucket, a bad row) fails at once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from flow_jobs.secrets import redact

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a run waits for a store that is away (``[runtime] retry_for_ms``).
DEFAULT_RETRY_FOR_MS = 120_000
#: The waits between tries, in seconds (the last repeats).
RETRY_WAITS_S = (0.2, 0.5, 1.0, 2.0)
#: delta-rs / object_store's words for a request that found no server, or lost it
#: midway (an answer of the server, such as a refused credential, has none of them).
_TRANSPORT_WORDS = (
    "error sending request",
    "http error",
    "connection refused",
    "connection reset",
    "reset by peer",
    "connection closed",
    "error reading a body",
    "incomplete message",
    "unexpected eof",
    "timed out",
    "dns error",
    "broken pipe",
)
#: object_store's own retries ran out: transient by its judgement (a 4xx is not retried)
_RETRIED = re.compile(r"after [1-9]\d* retries")


class StoreUnreachable(RuntimeError):
    """A store did not answer for longer than ``[runtime] retry_for_ms``."""


def state_store_away(error: BaseException) -> str | None:
    if isinstance(error, psycopg.OperationalError | PoolTimeout):
        return "state store"
    return None


def away(error: BaseException) -> str | None:
    """Which store ``error`` says is away (None: another error, not waited out)."""
    found = state_store_away(error)
    if found is None and isinstance(error, OSError):
        text = str(error).lower()
        if any(word in text for word in _TRANSPORT_WORDS) or _RETRIED.search(text):
            found = "object store"
    return found


def wait_out(
    what: str,
    call: Callable[[], T],
    limit_ms: int,
    which: Callable[[BaseException], str | None] = away,
) -> T:
    """``call()``, tried again while ``which`` says a store is away, for up to
    ``limit_ms`` from the call's start. ``call`` must be idempotent."""
    began, waiting = time.monotonic(), None
    tries = 0
    while True:
        try:
            result = call()
        except Exception as e:
            store = which(e)
            if store is None:
                raise
            now = time.monotonic()
            reason = redact(str(e).strip().splitlines()[0] if str(e).strip() else repr(e))
            if waiting is None:
                waiting = store
                log.warning(
                    "%s unreachable while %s (%s); trying again for up to %d s "
                    "([runtime] retry_for_ms)",
                    store,
                    what,
                    reason,
                    limit_ms // 1000,
                )
            if (now - began) * 1000 > limit_ms:
                raise StoreUnreachable(
                    f"{store} unreachable for {now - began:.0f} s while {what}: {reason}; "
                    f"raise [runtime] retry_for_ms (now {limit_ms}) to wait longer; a new "
                    "run resumes from the checkpoint"
                ) from None
            time.sleep(RETRY_WAITS_S[min(tries, len(RETRY_WAITS_S) - 1)])
            tries += 1
            continue
        if waiting is not None:
            log.warning("%s back after %.1f s (%s)", waiting, time.monotonic() - began, what)
        return result
