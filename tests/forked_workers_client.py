"""The client half of tests/forked_workers.py: run as ``python -S -I THIS SOCKET -m
MODULE ARGS...`` in place of ``python -m MODULE ARGS...``, standard library only (it
starts in about a hundredth of a second). It hands its standard streams, environment
and working directory to the server, passes SIGTERM and SIGINT on to the forked child,
and exits with the child's exit status."""

import contextlib
import json
import os
import signal
import socket
import struct
import sys


def _read_int(conn: socket.socket) -> int:
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return struct.unpack("!i", data)[0]


def main() -> int:
    path, flag, module, *args = sys.argv[1:]
    assert flag == "-m", sys.argv
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    body = json.dumps(
        {"module": module, "args": args, "env": dict(os.environ), "cwd": os.getcwd()}
    ).encode()
    message = struct.pack("!I", len(body)) + body
    socket.send_fds(conn, [message[: 1 << 15]], [0, 1, 2])
    if len(message) > 1 << 15:
        conn.sendall(message[1 << 15 :])
    pid = _read_int(conn)

    def forward(number: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, number)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        code = _read_int(conn)
    except EOFError:
        return 1  # the server went away: the child's status is unknown
    return 128 - code if code < 0 else code  # killed by a signal: as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
