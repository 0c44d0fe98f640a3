"""One run per pipeline: a run (and a reset) holds a session-level advisory lock keyed by
the schema and the pipeline's name on a connection of its own for as long as it runs;
another start is refused (``PipelineBusy``) naming the holder, and Postgres releases
the lock when the holder's connection ends, however its process ended."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC
from typing import Protocol, TypeVar

import psycopg

from flow_jobs.io.postgres import connect_postgres

T = TypeVar("T")


class LockStore(Protocol):
    """What the lock needs of the ledger's store (``flow_jobs.ledger.store.LedgerStore``,
    which holds its runs' locks: the store imports this module, not the reverse)."""

    @property
    def url(self) -> str: ...

    @property
    def schema(self) -> str: ...

    def retrying(self, what: str, call: Callable[[], T]) -> T: ...


log = logging.getLogger(__name__)


def lock_key(schema: str, name: str) -> int:
    """The pipeline's advisory lock key: 64 bits of a hash of schema and name."""
    digest = hashlib.sha256(f"flow-jobs/{schema}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PipelineBusy(RuntimeError):
    """Another run (or reset) of the pipeline holds its lock."""


class RunLockLost(PipelineBusy):
    """The run's lock went with its connection (a restarted server), and another run
    took it before this one could again."""


class RunLock:
    """A run's hold on its pipeline's advisory lock (``hold``), on a
    connection of its own. Postgres releases the lock when that connection ends, a
    restart of the server included: ``ensure`` runs before each write, and takes it
    again on a new connection, or stops the run if another one took it meanwhile."""

    def __init__(self, store: LockStore, name: str, command: str) -> None:
        self.store, self.name = store, name
        self.key = lock_key(store.schema, name)
        self.holder = f"flow-jobs {command} pid {os.getpid()}@{socket.gethostname()}"[:63]
        self._conn: psycopg.Connection | None = None

    def take(self) -> None:
        conn = _lock_connection(self.store.url, self.holder)
        try:
            acquired = conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)).fetchone()
            if not (acquired and acquired[0]):
                raise PipelineBusy(
                    f"pipeline {self.name} is busy: {_holder(conn, self.key, self.store.schema)}"
                )
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def ensure(self, before: str) -> None:
        """The lock still held before ``before`` (e.g. "writing batch 7"); taken again if
        its connection was lost, or ``RunLockLost``."""
        assert self._conn is not None
        try:
            self._conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            self._conn.close()
        log.warning(
            "%s: the run lock's connection to the state store was lost (a restart?); "
            "taking the lock again before %s",
            self.name,
            before,
        )
        try:
            self.store.retrying(f"taking the run lock again before {before}", self.take)
        except PipelineBusy as e:
            raise RunLockLost(
                f"{e}: it took the lock while the state store was away; this run stops "
                f"before {before}"
            ) from None
        log.warning("%s: the run lock is held again", self.name)

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # ends the session, which releases the lock
            self._conn = None


@contextmanager
def hold(store: LockStore, name: str, command: str = "run") -> Iterator[RunLock]:
    """Hold pipeline ``name``'s lock until the block ends, or raise ``PipelineBusy``.

    A session-level ``pg_try_advisory_lock`` on a connection of its own, named after
    this process (``application_name``) so a refused start can say who holds it.
    Postgres releases it when that connection closes: at the end of the block, when the
    process dies (server-side TCP keepalives bound how long a vanished host keeps it),
    or when the server restarts (``RunLock.ensure`` takes it again)."""
    lock = RunLock(store, name, command)
    try:
        lock.take()
    except PipelineBusy as e:
        raise PipelineBusy(
            f"{e}; {command} refused — wait for that run to end or stop it, then try again"
        ) from None
    log.debug("%s: holding the run lock (%s)", name, lock.holder)
    try:
        yield lock
    finally:
        lock.release()


def _lock_connection(url: str, holder: str) -> psycopg.Connection:
    conn = connect_postgres(url, autocommit=True, application_name=holder)
    conn.execute("SET tcp_keepalives_idle = 30")
    conn.execute("SET tcp_keepalives_interval = 10")
    conn.execute("SET tcp_keepalives_count = 3")
    return conn


def _holder(conn: psycopg.Connection, key: int, schema: str) -> str:
    """Who holds advisory lock ``key``: its application name, since when, its backend."""
    row = conn.execute(
        """SELECT l.pid, a.application_name, a.backend_start
        FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid::bigint = %s AND l.objid::bigint = %s""",
        ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
    ).fetchone()
    where = f"state store schema {schema}"
    if row is None:  # released in between: a retry will likely succeed
        return f"a session that has just ended held it ({where})"
    pid, application, started = row
    who = repr(application) if application else "another session"
    since = f" since {started.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if started else ""
    return f"{who} holds it{since} (Postgres backend {pid}, {where})"
