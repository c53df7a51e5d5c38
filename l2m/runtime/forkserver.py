"""A fork server for the Python processes Spark starts on this machine.

Input: requests from ``l2m/bin/forkclient.py`` (the interpreter wrapper ``l2m/bin/python``
runs it when :data:`ENV` names a live server): a ``python -m MODULE ARGS`` command line, its
working directory, environment, ignored signals and standard streams (passed as file
descriptors). Output: a child forked from this server running that module exactly as a fresh
``python -m`` would, its pid, and later its exit status, relayed to the client.

Why: on every query start Spark runs l2m's code in fresh Python processes, one after another
(the source's creation and runner, the state processor's ``init``, read planning, the sink's
writer and commit, then the executors' worker daemons), and each spends 0.13–0.45 s starting
an interpreter and importing pyspark, Arrow and l2m before it does milliseconds of work, on
the start's critical path. This server is started beside the JVM
(:func:`start`), imports all of that once while the JVM starts, and forks each of them.

A request the server cannot run exactly as a fresh interpreter would (other interpreter
options, another ``PYTHONPATH`` entry with Python code, another hash seed, other interpreter
environment variables) is answered "run it yourself", and the client ``exec``\\ s the
interpreter as before. The server runs on the driver's machine only: Spark's processes on
other machines (Kubernetes executors) never see its socket and start as before.

Protocol (one Unix stream connection per process, the server's user only):
client → ``u32`` length + the request (NUL-separated: version, cwd, argument count, the
arguments, the ignored signals, then ``KEY=VALUE`` environment entries) with fds 0, 1, 2;
server → ``i32`` the child's pid, or 0 for "run it yourself"; later ``i32`` its exit status
(the code, or minus the signal that ended it). A client that goes away (killed) takes its
child with it: the server kills the child when the connection closes first.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# The environment variable naming the server's socket, for the interpreter wrapper; set to
# "off" before l2m starts to keep every process on the plain interpreter.
ENV = "L2M_FORKSERVER"
VERSION = "1"
SOCKET_NAME = "fork.sock"
PREFIX = "l2m-fork-"  # each server's folder in the temporary folder, holding its socket
# A server killed outright (SIGKILL: it ignores SIGINT and SIGTERM; a killed process group, a
# cut-short CI job) cannot remove its folder; the next start removes those whose socket
# nobody listens on any more and that are at least this old (a folder is made a moment
# before its socket is bound: a younger one may be a server starting).
STALE_S = 60.0
# Interpreter settings read once at start-up, which a forked child would inherit from the
# server instead of reading them: a request must carry the server's own values for these.
# PYTHONPATH, PYTHONUNBUFFERED and PYTHONHASHSEED are handled apart (see Request.fits).
HANDLED = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONHASHSEED"})
# The seed Spark gives its Python workers (pyspark's context sets it for the executors), and
# so the server's: every child has the server's string hashes.
HASH_SEED = "0"
# How long children may outlive the process that started the server (they end with their
# JVM, which ends with that process) before they are killed.
DRAIN_S = 10.0
# How long a client may take to send its request once connected.
REQUEST_S = 5.0
# Signals whose disposition a child takes from its client (ignored there: ignored here);
# l2m/bin/forkclient.py keeps the same list (a script: it cannot import this module).
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
           signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)
# What Spark's processes import, imported once here: pyspark's daemon, worker and planner
# entry points, then l2m's worker daemon, whose stages (Arrow, l2m) _preload imports.
PRELOAD = (
    "pyspark.daemon", "pyspark.worker",
    "pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source", "pyspark.sql.worker.commit_data_source_write",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "l2m.runtime.daemon",
)
_INT = struct.Struct("!i")
_LEN = struct.Struct("!I")


class Handle:
    """A running fork server, owned by the process that started it (:func:`start`)."""

    def __init__(self, process: subprocess.Popen[bytes], lifeline: int, folder: Path) -> None:
        self.process = process
        self.socket = folder / SOCKET_NAME
        self._lifeline = lifeline
        self._folder = folder

    def stop(self, wait: bool = False) -> None:
        """Stop serving: new processes start on the plain interpreter, running children end
        on their own (within :data:`DRAIN_S`), then the server; ``wait`` for all of that."""
        if self._lifeline >= 0:
            with contextlib.suppress(OSError):
                os.close(self._lifeline)
            self._lifeline = -1
        if os.environ.get(ENV) == str(self.socket):
            del os.environ[ENV]
        if wait:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=DRAIN_S + 5)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            with contextlib.suppress(OSError):
                self._folder.rmdir()


def start(python: str | None = None) -> Handle:
    """Start a fork server running ``python`` (this interpreter by default) and name it in
    this process's environment (:data:`ENV`), so that a JVM started afterwards hands it
    every Python process Spark starts. It imports in the background: a process asked for
    meanwhile waits for the imports, which it would otherwise have paid itself. The server
    ends when this process does (or at :meth:`Handle.stop`). What servers killed outright
    left behind is removed first (:func:`sweep`)."""
    with contextlib.suppress(OSError):
        sweep()
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))  # 0700: only this user connects
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", HASH_SEED)}
    env.pop(ENV, None)
    listener: socket.socket | None = None
    read = write = -1
    try:
        # Bound here, so the socket exists when this returns: a client that finds it waits
        # in the listen queue while the server imports, instead of starting an interpreter.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(folder / SOCKET_NAME))
        listener.listen(64)
        read, write = os.pipe()
        process = subprocess.Popen(
            [python or sys.executable, "-m", __name__, str(listener.fileno()), str(read)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            pass_fds=(listener.fileno(), read), env=env)
    except OSError:  # no server (the caller goes on without one), and nothing left behind
        if write >= 0:
            os.close(write)
        _remove_folder(folder)
        raise
    finally:
        if listener is not None:
            listener.close()
        if read >= 0:
            os.close(read)
    handle = Handle(process, write, folder)
    atexit.register(handle.stop)
    os.environ[ENV] = str(handle.socket)
    return handle


def sweep(root: Path | None = None, now: float | None = None) -> int:
    """Remove what killed servers left in ``root`` (the temporary folder): this user's
    server folders at least :data:`STALE_S` old whose socket accepts no connection, with
    nothing in them but the socket. Returns how many were removed."""
    root = Path(tempfile.gettempdir()) if root is None else root
    now = time.time() if now is None else now
    removed = 0
    for folder in root.glob(PREFIX + "*"):
        try:
            info = folder.lstat()  # not followed: a link is not a folder of ours
            if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
                    or now - info.st_mtime < STALE_S or _listening(folder / SOCKET_NAME)):
                continue
        except OSError:
            continue
        if _remove_folder(folder):
            removed += 1
    return removed


def _remove_folder(folder: Path) -> bool:
    """Remove a server's folder: its socket, then the folder, which is refused when anything
    else is in it (then it is not ours to take). Whether it is gone."""
    with contextlib.suppress(OSError):
        (folder / SOCKET_NAME).unlink()
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def _listening(path: Path) -> bool:
    """A server accepts connections on the socket ``path`` (or it cannot be told: kept)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
        return True
    except (FileNotFoundError, ConnectionRefusedError):
        return False
    except OSError:
        return True
    finally:
        probe.close()


# ---------------------------------------------------------------------------------------------
# The server


@dataclass
class Request:
    """What a client asks for: a fresh ``python ARGS`` in ``cwd`` with ``env``."""

    cwd: str
    args: list[str]
    ignored: set[int]
    env: dict[str, str]

    @classmethod
    def decode(cls, body: bytes) -> Request:
        """The request's fields from its NUL-separated encoding (module docstring)."""
        parts = [p.decode("utf-8", "surrogateescape") for p in body.split(b"\0")]
        if parts[0] != VERSION:
            raise ValueError(f"fork client speaks version {parts[0]!r}, not {VERSION}")
        count = int(parts[2])
        args = parts[3:3 + count]
        ignored = {int(s) for s in parts[3 + count].split(",") if s}
        env = dict(entry.split("=", 1) for entry in parts[4 + count:] if "=" in entry)
        return cls(parts[1], args, ignored, env)

    def module(self) -> str | None:
        """The module of a plain ``-m MODULE ...`` command line, else None."""
        if len(self.args) >= 2 and self.args[0] == "-m" and self.args[1]:
            return self.args[1]
        return None

    def fits(self, own_env: Mapping[str, str], own_path: Sequence[str]) -> bool:
        """Whether a child of this server would run the request as a fresh interpreter
        would: ``python -m``, the same interpreter settings and hash seed, and no
        ``PYTHONPATH`` entry with Python code the server has not on its path (Spark's jars
        hold none: they are kept, harmless)."""
        if self.module() is None:
            return False
        for key in set(self.env) | set(own_env):
            if key.startswith("PYTHON") and "_" not in key and key not in HANDLED \
                    and self.env.get(key) != own_env.get(key):
                return False
        seed = self.env.get("PYTHONHASHSEED")
        if seed is not None and seed != own_env.get("PYTHONHASHSEED"):
            return False
        return all(not entry or entry in own_path or entry.endswith(".jar")
                   for entry in self.env.get("PYTHONPATH", "").split(os.pathsep))


class Server:
    """The accept-fork-reap loop: single-threaded, so that forking is safe."""

    def __init__(self, listener: socket.socket, lifeline: int) -> None:
        self.listener = listener
        self.lifeline = lifeline
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # pid → its client's connection
        self.wake_read, self.wake_write = socket.socketpair()
        self.own_env = dict(os.environ)
        # Without its first entry: the server's own working directory, there as `-m` puts
        # it, which a child replaces with its own.
        self.own_path = sys.path[1:]

    def serve(self, drain_s: float = DRAIN_S) -> None:
        """Serve until the lifeline closes (the process that started the server ended), then
        let the children end on their own (they end with their JVM) for up to ``drain_s``."""
        self.wake_read.setblocking(False)
        self.wake_write.setblocking(False)
        signal.set_wakeup_fd(self.wake_write.fileno())
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop through the fd
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.lifeline, selectors.EVENT_READ, "lifeline")
        self.selector.register(self.wake_read, selectors.EVENT_READ, "wake")
        deadline: float | None = None
        while deadline is None or (self.children and time.monotonic() < deadline):
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for key, _ in self.selector.select(timeout):
                if key.data == "accept":
                    self._accept()
                elif key.data == "lifeline":
                    deadline = time.monotonic() + drain_s
                    self._stop_serving()
                elif key.data == "wake":
                    with contextlib.suppress(OSError):
                        self.wake_read.recv(512)
                else:  # a client's connection: readable only when its client went away
                    self._client_gone(key.data)
            self._reap()
        self._shutdown()

    def _stop_serving(self) -> None:
        """New processes start on the plain interpreter from now on, and the server lets go
        of the output it shares with the process that started it: whatever reads that (a
        pipe, a log collector) sees its end when the driver and its JVM have ended."""
        self.selector.unregister(self.listener)
        self.selector.unregister(self.lifeline)
        with contextlib.suppress(OSError):
            os.unlink(self.listener.getsockname())
        self.listener.close()
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        os.close(null)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        fds: list[int] = []
        try:
            if not _same_user(conn):
                conn.close()
                return
            # Bounded: one client that connects and stalls must not hold up the others.
            conn.settimeout(REQUEST_S)
            head, fds, _, _ = socket.recv_fds(conn, _LEN.size, 3)
            body = _recv_exactly(conn, _LEN.unpack(head)[0]) if len(head) == _LEN.size else b""
            conn.settimeout(None)
            request = Request.decode(body)
            if len(fds) != 3 or not request.fits(self.own_env, self.own_path):
                conn.sendall(_INT.pack(0))
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self._child(conn, fds, request)  # never returns
            self.children[pid] = conn
            conn.sendall(_INT.pack(pid))
            self.selector.register(conn, selectors.EVENT_READ, pid)
        except (OSError, ValueError, IndexError):
            with contextlib.suppress(OSError):
                conn.sendall(_INT.pack(0))
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _client_gone(self, pid: int) -> None:
        conn = self.children.pop(pid, None)
        if conn is None:
            return
        self.selector.unregister(conn)
        conn.close()
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # reaped by _reap, without waiting here

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            self.selector.unregister(conn)
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                conn.sendall(_INT.pack(code))
            conn.close()

    def _shutdown(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for conn in self.children.values():
            conn.close()

    def _child(self, conn: socket.socket, fds: list[int], request: Request) -> None:
        """In the forked child: become the process the request describes, run its module,
        exit with its status. Never returns."""
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for number in SIGNALS:
                if number in request.ignored:
                    signal.signal(number, signal.SIG_IGN)
                elif number == signal.SIGINT:
                    signal.signal(number, signal.default_int_handler)
                else:
                    signal.signal(number, signal.SIG_DFL)
            self.selector.close()
            for held in (self.listener, self.wake_read, self.wake_write, conn,
                         *self.children.values()):
                held.close()
            os.close(self.lifeline)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            code = _run(request)
        except BaseException:  # the child must end here, whatever happened
            with contextlib.suppress(BaseException):
                traceback.print_exc()
        finally:
            os._exit(code)


def _run(request: Request) -> int:
    """Run ``python -m MODULE ARGS`` of ``request`` in this (forked) process; its status."""
    module = request.module()
    assert module is not None
    os.chdir(request.cwd)
    os.environ.clear()
    os.environ.update(request.env)
    extra = [e for e in request.env.get("PYTHONPATH", "").split(os.pathsep)
             if e and e not in sys.path]
    # What `python -m` puts first: the working directory (in place of the server's), then
    # PYTHONPATH's entries.
    sys.path[:1] = [request.cwd, *extra]
    _fresh_stdio(bool(request.env.get("PYTHONUNBUFFERED")))
    atexit._clear()
    sys.argv = ["-m", *request.args[2:]]
    # A fresh `python -m` has not imported its module yet; runpy warns when it has been.
    sys.modules.pop(module, None)
    import runpy
    import threading

    code = 0
    try:
        runpy._run_module_as_main(module)  # type: ignore[attr-defined]  # CPython's own `-m`
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # printed as the interpreter prints it
        sys.excepthook(*sys.exc_info())
        code = 1
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own wait
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    return code


def _exit_code(code: object) -> int:
    """The process status ``sys.exit(code)`` gives, as the interpreter computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):
        print(code, file=sys.stderr)
    return 1


def _fresh_stdio(unbuffered: bool) -> None:
    """``sys.stdin``/``stdout``/``stderr`` over the new fds 0–2, buffered as a fresh
    interpreter with this environment buffers them (stderr always by line, stdout by line on
    a terminal), with the server's encodings and error handlers (its locale is the child's)."""
    def stream(fd: int, mode: str, like: io.TextIOWrapper) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        writing = mode == "w"
        buffer: io.BufferedIOBase | io.FileIO
        if writing and unbuffered:
            buffer = raw
        elif writing:
            buffer = io.BufferedWriter(raw)
        else:
            buffer = io.BufferedReader(raw)
        return io.TextIOWrapper(buffer, encoding=like.encoding, errors=like.errors,
                                line_buffering=writing and not unbuffered
                                and (fd == 2 or raw.isatty()),
                                write_through=writing and unbuffered)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        new = stream(fd, mode, getattr(sys, f"__{name}__"))
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this process's user (the socket's folder is 0700 too)."""
    peer = getattr(socket, "SO_PEERCRED", None)
    if peer is None:
        return True
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, peer, 12))
    return uid == os.getuid()


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(size - len(chunks))
        if not chunk:
            raise ValueError("fork client went away mid-request")
        chunks += chunk
    return bytes(chunks)


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(Exception):  # a module missing here is imported on demand
            importlib.import_module(name)
    daemon = sys.modules.get("l2m.runtime.daemon")
    if daemon is not None:
        daemon.preload()
    # Frozen before forking: never scanned by a child's collections, their pages stay shared.
    gc.collect()
    gc.freeze()


def main(argv: Sequence[str]) -> int:
    """Import, then serve on the listening socket fd ``argv[0]`` until fd ``argv[1]``
    closes."""
    # It ends by its lifeline only: a SIGINT or SIGTERM sent to the driver's process group
    # stops the driver gracefully, and the batch it finishes still needs its processes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    listener = socket.socket(fileno=int(argv[0]))
    listener.setblocking(False)
    path = listener.getsockname()
    _preload()
    try:
        Server(listener, int(argv[1])).serve()
    finally:
        listener.close()
        _remove_folder(Path(path).parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
