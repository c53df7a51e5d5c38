"""The fork server (l2m.runtime.forkserver), its client (l2m/bin/forkclient.py) and the
interpreter wrapper (l2m/bin/python), without a JVM: a ``python -m`` the server can run as a
fresh interpreter would is forked by it, with the client's argv, working directory,
environment, standard streams, ignored signals and exit status; anything else, and every
process when there is no server, runs on the plain interpreter.

The processes are forkprobe.py beside this file, run as ``python -m forkprobe MODE ...`` from
this folder (``-m`` puts the working directory first on the path, forked or not; a
``PYTHONPATH`` entry would make the server decline): each mode prints what the process sees as
one JSON line (see forkprobe's ``_main``). A forked process's parent is the server; a plain
one's is this process, since the wrapper and the client ``exec`` the interpreter."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import l2m
from l2m.runtime import forkserver
from tests.unit.runtime.forkprobe import SIGNALS

BIN = Path(l2m.__file__).resolve().parent / "bin"
WRAPPER = BIN / "python"
CLIENT = BIN / "forkclient.py"
HERE = Path(__file__).resolve().parent
PROBE = ["-m", "forkprobe"]
# Every process a test starts ends well within this, or the test fails instead of hanging.
TIMEOUT = 20
# The server's hash seed (forkserver.start): a request must carry it to be forked.
SEED = os.environ.get("PYTHONHASHSEED", forkserver.HASH_SEED)
OTHER_SEED = "1" if SEED != "1" else "2"


def _fresh_signals() -> dict[str, str]:
    """What a fresh interpreter started from this process does with each of them: what this
    process ignores stays ignored (a suite run under ``nohup`` or as a background job
    ignores SIGHUP, SIGINT and SIGQUIT), the rest is the default (SIGINT: Python's
    KeyboardInterrupt)."""
    fresh = {}
    for name in SIGNALS:
        if signal.getsignal(getattr(signal, name)) == signal.SIG_IGN:
            fresh[name] = "ignored"
        else:
            fresh[name] = "KeyboardInterrupt" if name == "SIGINT" else "default"
    return fresh


FRESH_SIGNALS = _fresh_signals()


# ---------------------------------------------------------------------------------------------
# Helpers


def _env(server: forkserver.Handle | None, **changes: str | None) -> dict[str, str]:
    """This process's environment for a wrapper call: the server's own (start() copied this
    environment), naming ``server`` (or none), with ``changes`` (None: removed)."""
    env = {k: v for k, v in os.environ.items() if k != forkserver.ENV}
    env.update(L2M_PYTHON=sys.executable, PYTHONHASHSEED=SEED, PWD=str(HERE))
    if not env.get("PYTHONPATH"):
        env.pop("PYTHONPATH", None)  # the wrapper unsets an empty one
    if server is not None:
        env[forkserver.ENV] = str(server.socket)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _run(args: Sequence[str], env: Mapping[str, str], stdin: bytes = b"",
         **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(WRAPPER), *args], cwd=HERE, env=env, input=stdin,
                          capture_output=True, timeout=TIMEOUT, check=False,
                          **kwargs)  # type: ignore[call-overload]


def _probe(args: Sequence[str], env: Mapping[str, str], stdin: bytes = b"",
           **kwargs: object) -> tuple[dict[str, Any], subprocess.CompletedProcess[bytes]]:
    """This file run as ``-m`` in ``MODE args``: what it reported, and how it ended."""
    done = _run([*PROBE, *args], env, stdin, **kwargs)
    assert done.stdout, done.stderr.decode(errors="replace")
    return json.loads(done.stdout.splitlines()[0]), done


@contextlib.contextmanager
def _started(args: Sequence[str], env: Mapping[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """The probe in ``MODE args``, running; killed if it outlives the test."""
    process = subprocess.Popen([str(WRAPPER), *PROBE, *args], cwd=HERE, env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=TIMEOUT)


def _first_line(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], TIMEOUT)
    assert ready, "the probe reported nothing"
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else b""
    return json.loads(line)


def _wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{condition} still false after {timeout} s"
        time.sleep(0.01)


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _catches(pid: int, number: int) -> bool:
    """Whether process ``pid`` has a handler for signal ``number`` (/proc's SigCgt mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    return False


def _hash(seed: str) -> int:
    """hash("abc") in a fresh interpreter with this seed."""
    done = subprocess.run([sys.executable, "-S", "-c", "print(hash('abc'))"],
                          env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True,
                          timeout=TIMEOUT, check=True)
    return int(done.stdout)


def _restore(saved: str | None) -> None:
    if saved is None:
        os.environ.pop(forkserver.ENV, None)
    else:
        os.environ[forkserver.ENV] = saved


@contextlib.contextmanager
def _own_server(folder: Path | None = None) -> Iterator[forkserver.Handle]:
    """A server of this process's (its socket's folder in ``folder``, else in ``tempfile``'s
    folder), once its socket is there; stopped after, and the environment's
    :data:`~l2m.runtime.forkserver.ENV` as it was."""
    saved = os.environ.get(forkserver.ENV)
    saved_tempdir = tempfile.tempdir
    if folder is not None:
        tempfile.tempdir = str(folder)
    try:
        handle = forkserver.start(sys.executable)
    finally:
        tempfile.tempdir = saved_tempdir
    try:
        # The wrapper looks for the socket; once it is there a request waits for the
        # server's imports (~1 s), and every later one is forked at once.
        _wait_until(handle.socket.exists, TIMEOUT)
        yield handle
    finally:
        handle.stop(wait=True)
        _restore(saved)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[forkserver.Handle]:
    """The file's server (each start imports pyspark and l2m, ~1 s), in a folder of its own:
    the only server there, which a sweep of it can count on."""
    with _own_server(tmp_path_factory.mktemp("forkserver")) as handle:
        report, _ = _probe(["report"], _env(handle))
        assert report["ppid"] == handle.process.pid
        yield handle


# ---------------------------------------------------------------------------------------------
# Forked: the process the client asked for


@pytest.mark.parametrize("code", [0, 3])
def test_a_module_is_forked_with_the_client_s_argv_cwd_environment_streams_and_status(
        server: forkserver.Handle, code: int) -> None:
    env = _env(server, L2M_TEST_X="1")
    report, done = _probe(["report", str(code), "two words", "", "ü"], env,
                          stdin=b"line one\nline two\n")
    assert report["ppid"] == server.process.pid
    assert report["argv"] == [str(HERE / "forkprobe.py"),
                              "report", str(code), "two words", "", "ü"]
    assert report["name"] == "__main__" and report["spec"] == "forkprobe"
    assert report["cwd"] == str(HERE) and report["path0"] == str(HERE)
    assert report["env"] == env  # exactly: L2M_TEST_X and nothing of the server's own
    assert report["stdin"] == "line one\nline two\n"
    assert report["hash"] == _hash(SEED)
    assert report["signals"] == FRESH_SIGNALS
    assert done.stdout.splitlines()[1:] == [b"on stdout"]
    assert done.stderr == b"on stderr\n"
    assert done.returncode == code


def test_sys_exit_with_a_message_prints_it_and_ends_with_status_1(
        server: forkserver.Handle) -> None:
    report, done = _probe(["exit", "going away"], _env(server))
    assert report["ppid"] == server.process.pid
    assert done.stderr == b"going away\n"
    assert done.returncode == 1


def test_an_uncaught_exception_prints_its_traceback_and_ends_with_status_1(
        server: forkserver.Handle) -> None:
    report, done = _probe(["raise"], _env(server))
    assert report["ppid"] == server.process.pid
    assert done.stderr.startswith(b"Traceback (most recent call last):\n")
    assert done.stderr.endswith(b"\nRuntimeError: boom\n")
    assert done.returncode == 1


def test_a_missing_module_is_reported_as_python_reports_it(server: forkserver.Handle) -> None:
    done = _run(["-m", "no_such_module"], _env(server))
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == f"{sys.executable}: No module named no_such_module\n".encode()


def test_spark_s_pythonpath_is_forked(server: forkserver.Handle) -> None:
    # Spark's PYTHONPATH: the zips of a pip-installed pyspark (the wrapper drops them: the
    # package beside them is the same code), a jar (no Python code) and an entry the server
    # has on its path already.
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    lib = Path(spec.origin).parent / "python" / "lib"
    stdlib = os.path.dirname(os.__file__)
    entries = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"),
               "/opt/spark/jars/spark-core.jar", stdlib]
    report, done = _probe(["report"], _env(server, PYTHONPATH=os.pathsep.join(entries)))
    assert report["ppid"] == server.process.pid
    assert report["env"]["PYTHONPATH"] == f"/opt/spark/jars/spark-core.jar{os.pathsep}{stdlib}"
    assert done.returncode == 0


def test_pythonunbuffered_and_spark_s_worker_variables_may_differ_from_the_server_s(
        server: forkserver.Handle) -> None:
    env = _env(server, PYTHONUNBUFFERED="YES" if not os.environ.get("PYTHONUNBUFFERED")
               else None, PYTHON_WORKER_FACTORY_PORT="40123")
    report, done = _probe(["report"], env)
    assert report["ppid"] == server.process.pid
    assert report["env"] == env
    assert done.returncode == 0


# ---------------------------------------------------------------------------------------------
# Fresh-interpreter fidelity: the same request, forked and on the plain interpreter


def _both(server: forkserver.Handle, args: Sequence[str], stdin: bytes = b"",
          **changes: str | None) -> tuple[subprocess.CompletedProcess[bytes],
                                          subprocess.CompletedProcess[bytes]]:
    forked = _run(args, _env(server, **changes), stdin)
    plain = _run(args, _env(None, **changes), stdin)
    return forked, plain


@pytest.mark.parametrize("unbuffered", ["1", None])
def test_a_forked_child_sees_what_a_fresh_interpreter_sees(
        server: forkserver.Handle, unbuffered: str | None) -> None:
    forked, plain = _both(server, [*PROBE, "report"], b"in", PYTHONUNBUFFERED=unbuffered)
    mine, theirs = (json.loads(done.stdout.splitlines()[0]) for done in (forked, plain))
    assert (mine["ppid"], theirs["ppid"]) == (server.process.pid, os.getpid())
    for key in ("argv", "name", "spec", "cwd", "path0", "stdin", "hash", "signals", "flags",
                "executable"):
        assert mine[key] == theirs[key], key
    assert mine["env"] == {**theirs["env"], forkserver.ENV: str(server.socket)}
    # What the interpreter's settings make of the standard streams, apart from the errors
    # handlers and stderr's line buffering (the tests below).
    for stream in ("stdin", "stdout", "stderr"):
        assert mine["streams"][stream]["buffer"] == theirs["streams"][stream]["buffer"], stream
        assert mine["streams"][stream]["encoding"] == theirs["streams"][stream]["encoding"]
    for stream in ("stdout", "stderr"):
        assert mine["streams"][stream]["write_through"] == \
            theirs["streams"][stream]["write_through"], stream
    assert mine["streams"]["stdout"]["line_buffering"] == \
        theirs["streams"]["stdout"]["line_buffering"]
    assert (forked.stderr, forked.returncode) == (plain.stderr, plain.returncode)


@pytest.mark.parametrize("unbuffered", ["1", None])
def test_stderr_is_line_buffered_as_in_a_fresh_interpreter(
        server: forkserver.Handle, unbuffered: str | None) -> None:
    forked, plain = _both(server, [*PROBE, "report"], PYTHONUNBUFFERED=unbuffered)
    mine, theirs = (json.loads(done.stdout.splitlines()[0]) for done in (forked, plain))
    assert mine["ppid"] == server.process.pid
    assert mine["streams"]["stderr"]["line_buffering"] == \
        theirs["streams"]["stderr"]["line_buffering"]


# A fresh interpreter reads and writes undecodable bytes on stdin/stdout as surrogate escapes
# when its locale is C, POSIX or C.UTF-8 (or in UTF-8 mode): a child must do as it does.
def test_undecodable_bytes_pass_stdin_and_stdout_as_in_a_fresh_interpreter(
        server: forkserver.Handle) -> None:
    forked, plain = _both(server, [*PROBE, "echo"], b"caf\xe9\n")
    mine, theirs = (json.loads(done.stdout.splitlines()[0]) for done in (forked, plain))
    assert mine["ppid"] == server.process.pid
    # After the report: the echo (b"caf\xe9" here, where a fresh interpreter passes it).
    assert (forked.stdout.splitlines()[1:], forked.returncode) == \
        (plain.stdout.splitlines()[1:], plain.returncode)
    for stream in ("stdin", "stdout", "stderr"):
        assert mine["streams"][stream]["errors"] == theirs["streams"][stream]["errors"], stream


def test_a_forked_child_s_module_path_is_a_fresh_interpreter_s(
        server: forkserver.Handle) -> None:
    forked, plain = _both(server, [*PROBE, "report"])
    mine, theirs = (json.loads(done.stdout.splitlines()[0]) for done in (forked, plain))
    assert mine["ppid"] == server.process.pid
    assert mine["path"] == theirs["path"]


# ---------------------------------------------------------------------------------------------
# Declined: run on the plain interpreter, and still right


def test_a_command_line_without_m_runs_on_the_plain_interpreter(
        server: forkserver.Handle) -> None:
    done = _run(["-c", "import os, sys; print(os.getppid(), sys.argv[1:])", "x y"],
                _env(server))
    assert done.stdout == f"{os.getpid()} ['x y']\n".encode()
    assert (done.stderr, done.returncode) == (b"", 0)


def test_interpreter_options_before_m_run_on_the_plain_interpreter(
        server: forkserver.Handle) -> None:
    done = _run(["-u", *PROBE, "report"], _env(server, PYTHONUNBUFFERED=None))
    report = json.loads(done.stdout.splitlines()[0])
    assert report["ppid"] == os.getpid()
    assert report["streams"]["stdout"]["write_through"] is True  # -u: unbuffered
    assert done.returncode == 0


def test_another_hash_seed_runs_on_the_plain_interpreter(server: forkserver.Handle) -> None:
    report, done = _probe(["report"], _env(server, PYTHONHASHSEED=OTHER_SEED))
    assert report["ppid"] == os.getpid()
    assert report["hash"] == _hash(OTHER_SEED) != _hash(SEED)
    assert done.returncode == 0


def test_another_interpreter_setting_runs_on_the_plain_interpreter(
        server: forkserver.Handle) -> None:
    # The server has PYTHONNOUSERSITE as this process has it: ask for the other (a setting
    # that changes nothing on disk, unlike PYTHONDONTWRITEBYTECODE).
    mine = bool(os.environ.get("PYTHONNOUSERSITE"))
    report, done = _probe(["report"], _env(server, PYTHONNOUSERSITE=None if mine else "1"))
    assert report["ppid"] == os.getpid()
    assert report["no_user_site"] is not mine
    assert done.returncode == 0


def test_a_pythonpath_entry_with_code_runs_on_the_plain_interpreter(
        server: forkserver.Handle, tmp_path: Path) -> None:
    (tmp_path / "l2m_forkserver_marker.py").write_text("FOUND = 'here'\n")
    report, done = _probe(["report"], _env(server, PYTHONPATH=str(tmp_path)))
    assert report["ppid"] == os.getpid()
    assert report["path"][:2] == [str(HERE), str(tmp_path)]  # python -m's order
    assert report["marker"] == "here"
    assert done.returncode == 0


# ---------------------------------------------------------------------------------------------
# Signals and the client's life


def test_sigterm_to_the_client_ends_the_child_and_the_client_by_it(
        server: forkserver.Handle) -> None:
    with _started(["sleep", "30"], _env(server)) as client:
        child = _first_line(client)
        assert child["ppid"] == server.process.pid
        # The client forwards once it knows its child: before that, SIGTERM would end the
        # client itself (and the server would kill the child), which is not what is tested.
        _wait_until(lambda: _catches(client.pid, signal.SIGTERM))
        client.send_signal(signal.SIGTERM)
        assert client.wait(timeout=TIMEOUT) == -signal.SIGTERM
        _wait_until(lambda: _gone(child["pid"]))


def test_sigterm_to_the_client_reaches_the_child_s_handler(server: forkserver.Handle) -> None:
    # The child handles SIGTERM by exiting 7: the client's status shows the child got it.
    with _started(["trap"], _env(server)) as client:
        child = _first_line(client)
        assert child["ppid"] == server.process.pid
        _wait_until(lambda: _catches(client.pid, signal.SIGTERM))
        client.send_signal(signal.SIGTERM)
        assert client.wait(timeout=TIMEOUT) == 7
        assert client.stdout is not None and client.stdout.read() == b"got SIGTERM\n"


def _ignore_sigterm_and_sigint() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_signals_ignored_by_the_client_are_ignored_by_the_child(
        server: forkserver.Handle) -> None:
    # What Spark's launcher (or nohup) ignores, the process it starts ignores from birth.
    ignored = {**FRESH_SIGNALS, "SIGTERM": "ignored", "SIGINT": "ignored"}
    forked, _ = _probe(["report"], _env(server), preexec_fn=_ignore_sigterm_and_sigint)
    plain, _ = _probe(["report"], _env(None), preexec_fn=_ignore_sigterm_and_sigint)
    assert (forked["ppid"], plain["ppid"]) == (server.process.pid, os.getpid())
    assert forked["signals"] == plain["signals"] == ignored


def test_a_killed_client_takes_its_child_along(server: forkserver.Handle) -> None:
    with _started(["sleep", "30"], _env(server)) as client:
        child = _first_line(client)
        assert child["ppid"] == server.process.pid
        client.kill()
        assert client.wait(timeout=TIMEOUT) == -signal.SIGKILL
        # The server kills (and reaps) the child when its client's connection closes.
        _wait_until(lambda: _gone(child["pid"]))


# ---------------------------------------------------------------------------------------------
# No server


@pytest.mark.parametrize("where", [None, "/nonexistent/l2m-fork/fork.sock"])
def test_without_a_server_the_wrapper_runs_the_plain_interpreter(where: str | None) -> None:
    report, done = _probe(["report", "4"], _env(None, L2M_FORKSERVER=where), stdin=b"x")
    assert report["ppid"] == os.getpid()
    assert report["stdin"] == "x"
    assert (done.stderr, done.returncode) == (b"on stderr\n", 4)


def test_a_stale_socket_runs_the_plain_interpreter(tmp_path: Path) -> None:
    # A socket file nobody listens on (a server that died): the wrapper runs the client,
    # whose connection is refused.
    path = tmp_path / "fork.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))
    report, done = _probe(["report"], _env(None, L2M_FORKSERVER=str(path)))
    assert report["ppid"] == os.getpid()
    assert done.returncode == 0


def test_the_client_alone_runs_the_plain_interpreter_without_a_server() -> None:
    env = _env(None, L2M_FORKSERVER="/nonexistent/l2m-fork/fork.sock")
    done = subprocess.run([sys.executable, "-I", "-S", str(CLIENT), *PROBE, "report", "5"],
                          cwd=HERE, env=env, capture_output=True, timeout=TIMEOUT, check=False)
    assert json.loads(done.stdout.splitlines()[0])["ppid"] == os.getpid()
    assert done.returncode == 5


# ---------------------------------------------------------------------------------------------
# The protocol, without processes


def test_the_client_speaks_the_server_s_version_and_reports_its_signals() -> None:
    # The client is a script and cannot import the server: its copies must match exactly.
    spec = importlib.util.spec_from_file_location("forkclient", CLIENT)
    assert spec is not None and spec.loader is not None
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    assert client.VERSION == forkserver.VERSION
    assert client.SIGNALS == forkserver.SIGNALS
    assert set(client.SIGNALS) - set(client.FORWARDED) == {signal.SIGCHLD}


def _body(args: Sequence[str], env: Mapping[str, str], ignored: str = "", cwd: str = "/w",
          version: str = forkserver.VERSION) -> bytes:
    """A request as l2m/bin/forkclient.py encodes it."""
    fields = [version, cwd, str(len(args)), *args, ignored, *(f"{k}={v}" for k, v in
                                                              env.items())]
    return b"\0".join(f.encode("utf-8", "surrogateescape") for f in fields)


def test_a_request_decodes_to_its_fields() -> None:
    request = forkserver.Request.decode(_body(
        ["-m", "x", "A=B", ""], {"K": "v=w", "E": ""}, ignored="15,2", cwd="/tmp/ü"))
    assert request == forkserver.Request("/tmp/ü", ["-m", "x", "A=B", ""], {15, 2},
                                         {"K": "v=w", "E": ""})
    assert request.module() == "x"
    with pytest.raises(ValueError, match="version"):
        forkserver.Request.decode(_body(["-m", "x"], {}, version="0"))


OWN_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/root"}
OWN_PATH = ["/srv/app", "/usr/lib/python3.11"]


@pytest.mark.parametrize(("args", "changes", "fits"), [
    (["-m", "x"], {}, True),
    (["-m", "x", "-c", "y"], {}, True),  # the module's own arguments
    (["-c", "pass"], {}, False),
    (["-u", "-m", "x"], {}, False),
    (["-m", ""], {}, False),
    (["x.py"], {}, False),
    ([], {}, False),
    (["-m", "x"], {"PYTHONPATH": "/opt/spark/jars/a.jar"}, True),
    (["-m", "x"], {"PYTHONPATH": "/srv/app:/opt/spark/jars/a.jar:"}, True),
    (["-m", "x"], {"PYTHONPATH": ""}, True),
    (["-m", "x"], {"PYTHONPATH": "/srv/app:/tmp/code"}, False),
    (["-m", "x"], {"PYTHONPATH": "/opt/spark/python/lib/pyspark.zip"}, False),
    (["-m", "x"], {"PYTHONHASHSEED": "1"}, False),
    (["-m", "x"], {"PYTHONHASHSEED": "random"}, False),
    # No seed asked for: a fresh interpreter would draw one, and the server's is as good.
    (["-m", "x"], {"PYTHONHASHSEED": None}, True),
    (["-m", "x"], {"PYTHONDONTWRITEBYTECODE": None}, False),
    (["-m", "x"], {"PYTHONDONTWRITEBYTECODE": ""}, False),
    (["-m", "x"], {"PYTHONOPTIMIZE": "1"}, False),
    (["-m", "x"], {"PYTHONUNBUFFERED": "YES"}, True),
    # Spark's own variables for its workers are not the interpreter's.
    (["-m", "x"], {"PYTHON_WORKER_FACTORY_PORT": "40123"}, True),
    (["-m", "x"], {"PYTHON_WORKER_FACTORY_SECRET": "s"}, True),
    (["-m", "x"], {"HOME": "/elsewhere", "L2M_TEST_X": "1"}, True),
])
def test_what_a_forked_child_can_run(args: list[str], changes: dict[str, str | None],
                                     fits: bool) -> None:
    env = {k: v for k, v in {**OWN_ENV, **changes}.items() if v is not None}
    request = forkserver.Request.decode(_body(args, env))
    assert request.fits(OWN_ENV, OWN_PATH) is fits


def test_a_request_the_server_cannot_read_is_answered_run_it_yourself(
        server: forkserver.Handle) -> None:
    def answer(body: bytes, fds: list[int]) -> int:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(TIMEOUT)
            conn.connect(str(server.socket))
            socket.send_fds(conn, [struct.pack("!I", len(body)) + body], fds)
            reply = conn.recv(4)
        return int(struct.unpack("!i", reply)[0])

    env = _env(server)
    with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
        fds = [null_in.fileno(), null_out.fileno(), null_out.fileno()]
        assert answer(_body([*PROBE, "report"], env, version="0"), fds) == 0
        assert answer(_body([*PROBE, "report"], env), fds[:2]) == 0  # not 3 streams
        assert answer(b"1\0/w\0many", fds) == 0
    # ... and it goes on serving.
    report, _ = _probe(["report"], env)
    assert report["ppid"] == server.process.pid


# ---------------------------------------------------------------------------------------------
# Stopping


def test_stopping_lets_running_children_finish_and_later_processes_run_plain() -> None:
    with _own_server() as handle:
        assert os.environ[forkserver.ENV] == str(handle.socket)
        env = _env(handle)
        with _started(["sleep", "0.3"], env) as running:
            assert _first_line(running)["ppid"] == handle.process.pid
            handle.stop(wait=True)
            # stop() waited for the running child, whose client got its status.
            assert running.wait(timeout=TIMEOUT) == 0
        assert handle.process.returncode == 0
        assert not handle.socket.exists() and not handle.socket.parent.exists()
        assert forkserver.ENV not in os.environ
        # A process started with the old environment runs on the plain interpreter.
        report, done = _probe(["report"], env)
        assert report["ppid"] == os.getpid()
        assert done.returncode == 0


def test_a_server_that_cannot_start_leaves_nothing_behind(tmp_path: Path) -> None:
    # In the probe's interpreter: this process's other threads (a Spark session's, a Kafka
    # client's, left by earlier tests) open and close descriptors of their own meanwhile,
    # which a before/after listing of /proc/self/fd took for a leak (a CI run: 73, 74 → 77,
    # 78).
    env = {k: v for k, v in os.environ.items() if k != forkserver.ENV}
    done = subprocess.run([sys.executable, *PROBE, "failed-start", str(tmp_path)], cwd=HERE,
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    # No descriptor left open (the listener, both pipe ends) or closed, the variable unset.
    assert json.loads(done.stdout) == {"opened": [], "closed": [], "env_set": False}
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its socket


# ---------------------------------------------------------------------------------------------
# What killed servers leave behind


def _server_folder(root: Path, name: str, listening: bool,
                   age_s: float) -> tuple[Path, socket.socket | None]:
    """A server's folder under ``root`` with its socket: still listened on (the socket is
    returned, open) or left by a killed server (bound, then closed without being removed)."""
    folder = root / f"{forkserver.PREFIX}{name}"
    folder.mkdir()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / forkserver.SOCKET_NAME))
    stamp = time.time() - age_s
    os.utime(folder, (stamp, stamp))
    if listening:
        sock.listen(1)
        return folder, sock
    sock.close()
    return folder, None


def test_a_start_removes_what_killed_servers_left(tmp_path: Path) -> None:
    stale_s = forkserver.STALE_S
    dead, _ = _server_folder(tmp_path, "dead", listening=False, age_s=stale_s + 5)
    live, sock = _server_folder(tmp_path, "live", listening=True, age_s=stale_s * 100)
    young, _ = _server_folder(tmp_path, "young", listening=False, age_s=1)  # maybe starting
    crowded, _ = _server_folder(tmp_path, "crowded", listening=False, age_s=stale_s + 5)
    (crowded / "notes.txt").write_text("not a server's")
    emptied = tmp_path / f"{forkserver.PREFIX}emptied"  # a server killed before its bind
    emptied.mkdir()
    os.utime(emptied, (time.time() - stale_s - 5,) * 2)
    other = tmp_path / "other-dead"
    other.mkdir()
    link = tmp_path / f"{forkserver.PREFIX}link"  # a link to a folder is not a server's
    link.symlink_to(other)
    os.utime(link, (time.time() - stale_s - 5,) * 2, follow_symlinks=False)
    try:
        assert forkserver.sweep(tmp_path) == 2
        assert not dead.exists() and not emptied.exists()
        assert (live / forkserver.SOCKET_NAME).exists()
        assert (young / forkserver.SOCKET_NAME).exists()
        assert (crowded / "notes.txt").exists() and other.exists() and link.is_symlink()
        assert forkserver.sweep(tmp_path) == 0
    finally:
        assert sock is not None
        sock.close()


def test_a_live_server_survives_the_probe(server: forkserver.Handle) -> None:
    # The sweep's probe connects and goes at once: the server answers nothing and serves on.
    # The file's server is alone in its private folder, where the sweep's count can be exact
    # (the shared temporary folder may hold other runs' servers).
    folder = server.socket.parent.parent
    assert [p.name[:len(forkserver.PREFIX)] for p in folder.iterdir()] == [forkserver.PREFIX]
    assert forkserver.sweep(folder, now=time.time() + 10 * forkserver.STALE_S) == 0
    assert server.socket.exists() and server.process.poll() is None
    report, done = _probe(["report"], _env(server))
    assert done.returncode == 0 and report["ppid"] == server.process.pid
