"""Spark's per-query Python processes of the shared test session, forked from a process
that has imported them already.

Each streaming query Spark starts runs a fresh ``python -m`` for every source's planner
(``python_streaming_source_runner``) and, for a state-API operator, one more
(``transform_with_state_driver_worker``) that only reads the processor's state schema.
Each spends most of its half second of CPU importing PySpark, pyarrow and flow-jobs'
reader, hundreds of times a suite run (BENCHMARKS.md, "How long make test takes").

Here the shared session's ``pythonExec`` is a small script: for those two modules it
hands its standard streams, arguments, environment and working directory over a Unix
socket to a server that has imported the modules once, which forks a child that runs
the module as ``python -m`` would and reports its exit status back. Everything else
(PySpark's daemon and its executor workers) the script hands to the real interpreter.
The modules' code is Spark's and ours, unchanged: what differs is only how the process
starts. The CLI, Dagster, demo and cluster tests start their own JVMs, whose workers
start as in a user's run.

No library fits: ``multiprocessing``'s forkserver forks Python functions for a parent
that is Python, where the parent here is the JVM, which starts an executable.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The modules whose processes are forked; the rest run the real interpreter.
FORKED_MODULES = (
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
)
#: Imported by the server before it forks: what those modules and flow-jobs' source
#: import first thing (a child imports anything else itself).
PRELOADED = (
    *FORKED_MODULES,
    "flow_jobs.kafka.source",
    "confluent_kafka",
)

_CLIENT = Path(__file__).with_name("forked_workers_client.py")


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request: a 4-byte length, that much JSON, and the client's three standard
    streams as file descriptors with its first chunk."""
    fds = array.array("i")
    chunks: list[bytes] = []
    size = None
    received = 0
    while size is None or received < size + 4:
        data, ancdata, _flags, _addr = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * fds.itemsize))
        if not data:
            raise EOFError("client closed before its request was whole")
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
        chunks.append(data)
        received += len(data)
        if size is None and received >= 4:
            size = struct.unpack("!I", b"".join(chunks)[:4])[0]
    body = b"".join(chunks)[4:]
    return json.loads(body), list(fds)


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m MODULE`` with the client's streams,
    environment and working directory. Never returns."""
    code = 1
    try:
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's own streams
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        # as ``python -m`` would start: the working directory, then $PYTHONPATH, first
        paths = request["env"].get("PYTHONPATH", "").split(os.pathsep)
        sys.path[:0] = [request["cwd"], *(p for p in paths if p)]
        module = request["module"]
        sys.argv = [module, *request["args"]]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(path: str) -> None:
    """Import ``PRELOADED``, then fork a child per request until stdin closes (the
    fixture that started this process went away) or SIGTERM."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for module in PRELOADED:
        __import__(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through the fd
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "signal")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    clients: dict[int, socket.socket] = {}  # child pid -> its client's connection
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "stdin":
                if not os.read(key.fd, 1024):
                    return
            elif key.data == "signal":
                os.read(wake_r, 1024)
            else:
                conn, _ = listener.accept()
                conn.settimeout(30)
                try:
                    request, fds = _recv_request(conn)
                except (OSError, EOFError, ValueError) as e:
                    print(f"forked_workers: bad request: {e}", file=sys.stderr, flush=True)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    selector.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    listener.close()
                    conn.close()
                    _run_child(request, fds)
                for fd in fds:
                    os.close(fd)
                with open(f"{path}.log", "a") as forks:  # what was forked, for a look
                    print(pid, request["module"], file=forks)
                conn.sendall(struct.pack("!i", pid))
                clients[pid] = conn
        while clients:  # reap every child that ended; tell its client how
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = clients.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):  # a client killed: nobody to tell
                    conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                conn.close()


class ForkedWorkers:
    """The server process and the ``pythonExec`` script that reaches it."""

    def __init__(self, folder: Path) -> None:
        self.socket_path = str(folder / "forks.sock")
        self.python = folder / "python"
        modules = "|".join(FORKED_MODULES)
        self.python.write_text(
            "#!/bin/sh\n"
            f'if [ "$1" = -m ]; then case "$2" in {modules})\n'
            f'  exec "{sys.executable}" -S -I "{_CLIENT}" "{self.socket_path}" "$@";;\n'
            "esac; fi\n"
            f'exec "{sys.executable}" "$@"\n'
        )
        self.python.chmod(0o755)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forked_workers", self.socket_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=Path(__file__).parent.parent,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # once it has imported what it forks
        if line.strip() != b"ready":
            self.close()
            raise RuntimeError(f"the forked workers' server did not start: {line!r}")

    @contextmanager
    def as_python(self) -> Iterator[None]:
        """While a session starts: ``PYSPARK_PYTHON`` is the script, which PySpark's
        context takes as the ``pythonExec`` of every function and data source it wraps.
        Afterwards what it was (or this interpreter, as the session sets it), so that
        the processes the tests start themselves see what a user's would."""
        before = os.environ.get("PYSPARK_PYTHON")
        os.environ["PYSPARK_PYTHON"] = str(self.python)
        try:
            yield
        finally:
            os.environ["PYSPARK_PYTHON"] = before or sys.executable

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


if __name__ == "__main__":
    serve(sys.argv[1])
