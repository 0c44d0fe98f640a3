"""What the broker and the standalone cluster share: a free loopback port, and
``with service:`` starting it and stopping it; what a command run by make needs of
the terminal."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Self


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether nothing listens on loopback ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class Service:
    """A process (or a few) started by ``start()`` and stopped by ``stop()``; ``with``
    starts it and stops it whatever happens inside."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def the_terminal() -> Iterator[None]:
    """Ctrl-C for this process's group alone, while it runs in a terminal's
    foreground: under `make demo` or `make broker`, make shares that group, and make reports a
    Ctrl-C it receives itself as "make: *** [demo] Interrupt" whatever its command then
    does. So the command takes the terminal's foreground for a group of its own, as a
    shell does for a job, and gives it back as it ends."""
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    try:
        before = os.tcgetpgrp(fd)
    except OSError:  # not a terminal, or none of ours
        before = None
    if before is None or before != os.getpgrp():
        yield  # not in the foreground: nothing to take
        return
    with _no_ttou():
        if os.getpgrp() != os.getpid():
            os.setpgid(0, 0)
        os.tcsetpgrp(fd, os.getpgrp())
    try:
        yield
    finally:
        with _no_ttou(), contextlib.suppress(OSError):  # the group may be gone already
            os.tcsetpgrp(fd, before)


@contextmanager
def _no_ttou() -> Iterator[None]:
    """A process group not in the foreground that sets the terminal's foreground gets
    SIGTTOU, which would stop it: ignored while it does."""
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTTOU, previous)
