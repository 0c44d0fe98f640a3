"""Infrastructure faults for the tests and ``make soak-long``: a TCP proxy in front of a
real server (an S3-compatible one, a broker) that can refuse and cut every connection,
then accept again on the same port while the server behind it keeps its state; and an
embedded PostgreSQL (the pgserver wheel) that can be stopped and started again on its
socket."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from flow_jobs_dev.service import free_port


class TcpProxy:
    """``127.0.0.1:port`` forwarded to ``backend``; ``down()`` closes the listener and
    every open connection (a client then finds the port refused), ``up()`` listens
    again."""

    def __init__(self, backend_host: str, backend_port: int, port: int | None = None) -> None:
        self.backend = (backend_host, backend_port)
        self.port = port or free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> TcpProxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            every, self._open = list(self._open), set()
        for s in every:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            try:
                server = socket.create_connection(self.backend, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # went down meanwhile
                    client.close()
                    server.close()
                    return
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._open -= {source, sink}


class Postgres:
    """A pgserver instance that can be stopped (``pg_ctl stop -m fast|immediate``) and
    started again on its socket, keeping its data."""

    def __init__(self, folder: Path) -> None:
        import pgserver

        self.server = pgserver.get_server(folder, cleanup_mode="stop")
        self.url = self.server.get_uri()

    def stop(self, mode: str) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", "stop", "-m", mode], pgdata=self.server.pgdata, user=self.server.system_user)

    def start(self) -> None:
        self.server.ensure_postgres_running()

    def cleanup(self) -> None:
        self.server.cleanup()
