"""Ask l2m's fork server (l2m/runtime/forkserver.py) for the Python process this command line
describes; run the interpreter as usual when there is no server or it declines.

Run by l2m/bin/python as ``$L2M_PYTHON -I -S forkclient.py ARGS``: an interpreter without
site-packages starts in ~10 ms, against 0.13–0.45 s for one that imports pyspark, Arrow and
l2m. It stays for the child's life: Spark sees this process, its signals (SIGTERM from a
``destroy()``) are passed on to the child, and its exit status is the child's. Standard
library only, no l2m import: this file is run as a script.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys

VERSION = "1"
# The signals a child takes as ignored when they are ignored here (the server's SIGNALS, and
# VERSION its VERSION: tests/unit/runtime/test_forkserver.py checks both); all but SIGCHLD, which
# is about this process's own children, are passed on to the child.
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)
FORWARDED = tuple(s for s in SIGNALS if s != signal.SIGCHLD)


def plain(args: list[str]) -> None:
    """Become the interpreter itself (no server, or it declined)."""
    python = os.environ.get("L2M_PYTHON") or "python3"
    os.execvp(python, [python, *args])


def receive_int(conn: socket.socket) -> int | None:
    data = b""
    while len(data) < 4:
        chunk = conn.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    return struct.unpack("!i", data)[0]


def main(args: list[str]) -> None:
    path = os.environ.get("L2M_FORKSERVER", "")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        plain(args)
    ignored = [str(int(s)) for s in SIGNALS if signal.getsignal(s) == signal.SIG_IGN]
    fields = [VERSION, os.getcwd(), str(len(args)), *args, ",".join(ignored)]
    fields += [f"{k}={v}" for k, v in os.environ.items() if "\0" not in k + v]
    body = b"\0".join(f.encode("utf-8", "surrogateescape") for f in fields)
    try:
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        pid = receive_int(conn)
    except OSError:
        pid = None
    if not pid:
        conn.close()
        plain(args)
        return
    child = pid

    def forward(number: int, frame: object) -> None:
        try:  # noqa: SIM105 — contextlib would be one more import on every start
            os.kill(child, number)
        except OSError:
            pass

    for number in FORWARDED:
        if signal.getsignal(number) != signal.SIG_IGN:
            signal.signal(number, forward)
    while True:
        try:
            status = receive_int(conn)
            break
        except InterruptedError:
            continue
    if status is None:  # the server went away: the child must not outlive this process
        try:  # noqa: SIM105
            os.kill(child, signal.SIGKILL)
        except OSError:
            pass
        sys.stderr.write("l2m: the fork server ended before its child\n")
        os._exit(1)
    if status < 0:  # ended by a signal: end by the same one, as the child did
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        os._exit(128 - status)
    os._exit(status)


if __name__ == "__main__":
    main(sys.argv[1:])
