"""One small pool of Postgres connections per URL and process, for the state store.

Every ``LedgerStore`` of a URL in a process shares its pool (Spark's batch thread, the
progress poller, Dagster's checks and sensors). The pool opens on first use and closes
when the last store that used it closes, or when the process exits; so a test that
creates many stores holds at most ``MAX_CONNECTIONS`` connections per URL.

A pool's first connection is made in the caller's thread with ``connect_postgres``: a
bad URL or an unreachable server fails at once, with the password masked, rather than
after the pool's timeout with its background worker retrying.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool, PoolTimeout

from flow_jobs.io.postgres import connect_postgres
from flow_jobs.io.waits import wait_out

log = logging.getLogger(__name__)

T = TypeVar("T")


class _ReconnectsToDebug(logging.Filter):
    """psycopg_pool logs a WARNING for each failed attempt to refill the pool: one a
    second or so while a server restarts. The run logs that wait once each way
    (``flow_jobs.io.waits``), so these go to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and record.getMessage().startswith("error connecting"):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


_pool_log = logging.getLogger("psycopg.pool")
if not any(isinstance(f, _ReconnectsToDebug) for f in _pool_log.filters):
    _pool_log.addFilter(_ReconnectsToDebug())

#: A run holds at most two at once (the batch's write, the progress update); the rest
#: is room for Dagster's checks and sensors in the same process.
MAX_CONNECTIONS = 4


@dataclass
class _Shared:
    pool: ConnectionPool
    users: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)


_lock = threading.Lock()
_pools: dict[str, _Shared] = {}
_closes_at_exit = False


def acquire(url: str, user: object) -> ConnectionPool:
    """``url``'s pool, opened if it is not; ``user`` holds it until ``release``."""
    global _closes_at_exit
    with _lock:
        shared = _pools.get(url)
        if shared is None:
            connect_postgres(url).close()  # fails here, masked, if it cannot connect
            pool = ConnectionPool(
                url,
                min_size=1,
                max_size=MAX_CONNECTIONS,
                # As a fresh connection was: a transaction per block, nothing prepared
                # server-side (a migration may change a table under a cached plan).
                kwargs={"autocommit": False, "prepare_threshold": None},
                check=ConnectionPool.check_connection,  # a restarted server: reconnect
                # a server away: give up a wait soon, the caller tries again and says so
                # (LedgerStore.retrying) rather than waiting 30 s in silence
                timeout=5,
                name=f"flow-jobs-state-store-{len(_pools) + 1}",  # never the URL
                open=True,
            )
            shared = _pools[url] = _Shared(pool)
            if not _closes_at_exit:
                # Registered after the embedded server's own exit hook (pgserver's, at
                # its start), so it runs before it: connections close, then the server.
                atexit.register(close_all)
                _closes_at_exit = True
        shared.users.add(user)
        return shared.pool


def release(url: str, user: object) -> None:
    """``user`` is done with ``url``'s pool: closed once no one holds it."""
    with _lock:
        shared = _pools.get(url)
        if shared is None:
            return
        shared.users.discard(user)
        if shared.users:
            return
        del _pools[url]
    shared.pool.close()


def close_all() -> None:
    """Close every pool (at exit)."""
    with _lock:
        pools = [shared.pool for shared in _pools.values()]
        _pools.clear()
    for pool in pools:
        try:
            pool.close()
        except Exception as e:  # at exit: report, and close the others
            log.warning("state store: could not close a connection pool: %s", e)


def _forget_after_fork() -> None:
    """A forked child must not use its parent's connections (nor its pools' threads,
    which do not exist in it): it opens its own."""
    global _lock
    _lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _pool_starved(error: BaseException) -> str | None:
    return "state store" if isinstance(error, PoolTimeout) else None


def retried_read(what: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A store method reading the ledger, tried again (up to the store's
    ``retry_for_ms``) while the URL's pool hands out no connection (its refills back off
    after a server restart, and outlast the pool's short wait on a busy machine). Only
    that: a URL that never connected fails at once, as it should for ``flow-jobs state
    show``."""

    def wrap(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def read(self: Any, *args: Any, **kwargs: Any) -> T:
            call = functools.partial(method, self, *args, **kwargs)
            return wait_out(what, call, self.retry_for_ms, _pool_starved)

        return read

    return wrap
