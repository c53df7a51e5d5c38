"""The process tests/unit/runtime/test_forkserver.py starts, run as ``python -m forkprobe MODE
...`` from this folder, forked by the fork server or on the plain interpreter. Input: the mode
and its arguments (see :func:`_main`). Output: one JSON line of what the process sees, then
what the mode does.

A module of its own, importing only the standard library: as the test file itself it imported
pytest and l2m first, 0.5-0.7 s of every one of the ~40 processes the tests start."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCHLD")
# The trap mode's wait for SIGTERM: the test's limit on every process it starts.
TIMEOUT = 20


def _disposition(name: str) -> str:
    handler = signal.getsignal(getattr(signal, name))
    if handler == signal.SIG_IGN:
        return "ignored"
    if handler == signal.SIG_DFL:
        return "default"
    if handler is signal.default_int_handler:
        return "KeyboardInterrupt"
    return repr(handler)


def _report(**more: object) -> None:
    """One JSON line of what this process sees, flushed."""
    try:
        import l2m_forkserver_marker  # type: ignore[import-not-found]  # a PYTHONPATH test's

        marker = l2m_forkserver_marker.FOUND
    except ImportError:
        marker = None
    streams = {name: {"buffer": type(stream.buffer).__name__,
                      "line_buffering": stream.line_buffering,
                      "write_through": getattr(stream, "write_through", None),
                      "encoding": stream.encoding, "errors": stream.errors}
               for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout),
                                    ("stderr", sys.stderr))}
    report = {
        "pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "name": __name__,
        "spec": __spec__.name if __spec__ else None, "cwd": os.getcwd(), "path0": sys.path[0],
        "path": sys.path, "env": dict(os.environ), "hash": hash("abc"),
        "signals": {name: _disposition(name) for name in SIGNALS}, "streams": streams,
        "flags": repr(sys.flags), "no_user_site": bool(sys.flags.no_user_site),
        "executable": sys.executable, "marker": marker, **more,
    }
    print(json.dumps(report), flush=True)


def _main(mode: str, args: list[str]) -> None:
    if mode == "report":  # report [CODE [ARGS]]: reads stdin, writes both streams
        _report(stdin=sys.stdin.read())
        print("on stdout")
        print("on stderr", file=sys.stderr)
        sys.exit(int(args[0]) if args else 0)
    elif mode == "exit":  # exit MESSAGE
        _report()
        sys.exit(args[0])
    elif mode == "raise":
        _report()
        raise RuntimeError("boom")
    elif mode == "echo":  # stdin to stdout, through the text layer
        _report()
        sys.stdout.write(sys.stdin.read())
    elif mode == "sleep":  # sleep SECONDS
        _report()
        time.sleep(float(args[0]))
    elif mode == "trap":  # until SIGTERM, then exit 7
        def stop(number: int, frame: object) -> None:
            print("got SIGTERM", flush=True)
            sys.exit(7)

        signal.signal(signal.SIGTERM, stop)
        _report()
        time.sleep(TIMEOUT)
    elif mode == "failed-start":  # failed-start FOLDER: a server whose Python does not exist
        from l2m.runtime import forkserver  # only here: the other modes import nothing of l2m

        tempfile.tempdir = args[0]
        before = set(os.listdir("/proc/self/fd"))
        try:
            forkserver.start(os.path.join(args[0], "no-such-python"))
        except FileNotFoundError:
            after = set(os.listdir("/proc/self/fd"))
            print(json.dumps({"opened": sorted(after - before), "closed": sorted(before - after),
                              "env_set": forkserver.ENV in os.environ}))
        else:
            sys.exit("the server started")
    else:
        raise SystemExit(f"unknown probe mode {mode!r}")


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2:])
