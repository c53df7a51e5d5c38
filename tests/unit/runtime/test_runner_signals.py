"""A second SIGTERM (or Ctrl-C) stops l2m now, even when its KeyboardInterrupt is swallowed
where the handler raised it (Python prints an exception raised in a finalizer — py4j's
JavaObject.__del__ talks to the JVM — and goes on, and l2m then waited out the graceful stop),
and even when the main thread sits in a JVM call that does not return (the hard stop)."""

from __future__ import annotations

import dataclasses
import gc
import io
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from l2m.config.job import JobConfig
from l2m.errors import INTERRUPTED
from l2m.runtime import runner as runner_module
from l2m.runtime.runner import Runner


@pytest.fixture(autouse=True)
def restored_signals():
    """Every test here installs the runner's handlers: SIGINT and SIGTERM's put back after."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in before.items():
        signal.signal(number, handler)
    # A hard stop left armed ends the test process HARD_STOP_S later with os._exit(130):
    # the whole suite, after every test had passed (seen in CI).
    armed = [t for t in threading.enumerate() if t.name == "l2m-hard-stop" and t.is_alive()]
    assert not armed, "a test left the runner's hard stop armed"


class BusyQuery:
    """A query whose batch never ends (its executors never come)."""

    isActive = True
    status = {"isTriggerActive": True}  # noqa: RUF012

    def stop(self) -> None:
        raise AssertionError("a second signal does not wait for the query to stop")


class SignalsWhenCollected:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_second_signal_swallowed_by_a_finalizer_still_cuts_the_graceful_stop_short(
        tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(runner_module, "EXIT_GRACE_S", 0.05)
    cfg = dataclasses.replace(JobConfig(), checkpoint=str(tmp_path / "checkpoint"))
    runner = Runner(cfg, [], out=io.StringIO())
    runner.job = SimpleNamespace(queries=[BusyQuery()], close=lambda: None)  # type: ignore[assignment]
    exits: list[int] = []
    runner._exit = exits.append  # the second signal arms the hard stop: never os._exit here
    runner.install_signals()
    os.kill(os.getpid(), signal.SIGTERM)  # the first: finish the batch in flight
    assert runner._stop.wait(5)  # set by the signal relay's thread
    thing = SignalsWhenCollected()
    del thing  # the second, raised inside a finalizer: reported and swallowed
    gc.collect()
    assert runner._now.wait(5)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runner._shutdown()
    assert time.monotonic() - started < 1
    runner.closed()  # the command's stop of Spark: the hard stop only guards the exit
    assert runner._hard_stop is not None
    runner._hard_stop.join(5)
    assert exits == [INTERRUPTED]  # a test's process does not exit: the guard ends it


def _signalled_twice(runner: Runner) -> None:
    """The first SIGTERM (finish the batch), then the second (stop now)."""
    runner.install_signals()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)
    assert runner._now.wait(5)  # the relay's thread armed the hard stop, then set it


def _hard_stop_runner(tmp_path, exits: list[int], stopped: threading.Event) -> Runner:
    cfg = dataclasses.replace(JobConfig(), checkpoint=str(tmp_path / "checkpoint"))
    runner = Runner(cfg, [], out=io.StringIO())
    context = SimpleNamespace(_jsc=SimpleNamespace(stop=stopped.set))
    runner.spark = SimpleNamespace(sparkContext=context)  # type: ignore[assignment]
    runner._exit = exits.append
    return runner


def test_a_second_signal_stops_the_context_and_exits_when_spark_does_not_stop(
        tmp_path, monkeypatch, capsys) -> None:
    # The main thread never gets to stop Spark (a JVM call that does not return): after
    # HARD_STOP_S the hard stop stops the context itself and exits with 130.
    monkeypatch.setattr(runner_module, "HARD_STOP_S", 0.05)
    monkeypatch.setattr(runner_module, "CONTEXT_STOP_S", 0.2)
    exits: list[int] = []
    stopped = threading.Event()
    runner = _hard_stop_runner(tmp_path, exits, stopped)
    undone: list[str] = []

    def fails() -> None:
        raise OSError("the broker is gone already")

    # What os._exit would skip (the demo's broker, its folder): undone first, in order, an
    # error in one not stopping the next.
    runner.at_hard_stop += [lambda: undone.append("broker"), fails,
                            lambda: undone.append("folder")]
    _signalled_twice(runner)
    assert runner._hard_stop is not None
    runner._hard_stop.join(5)
    assert not runner._hard_stop.is_alive()
    assert stopped.is_set()
    assert exits == [INTERRUPTED]
    assert undone == ["broker", "folder"]
    assert "l2m: interrupted" in capsys.readouterr().err


def test_once_spark_is_stopped_the_hard_stop_only_sees_that_the_process_exits(
        tmp_path, monkeypatch, capsys) -> None:
    # Spark stopped in time, the process should exit its own way; when it is still there
    # EXIT_GRACE_S later (a CI run saw l2m print "interrupted" and hang on its way out), the
    # hard stop ends it — without stopping Spark's context again.
    monkeypatch.setattr(runner_module, "HARD_STOP_S", 0.5)
    monkeypatch.setattr(runner_module, "EXIT_GRACE_S", 0.3)
    exits: list[int] = []
    stopped = threading.Event()
    runner = _hard_stop_runner(tmp_path, exits, stopped)
    _signalled_twice(runner)
    runner.at_hard_stop.append(lambda: exits.append(-1))
    runner.closed()  # the command stopped Spark in time
    time.sleep(0.1)
    assert exits == []  # the process's own exit is given its time
    assert runner._hard_stop is not None
    runner._hard_stop.join(5)
    assert not stopped.is_set()
    assert exits == [-1, INTERRUPTED]  # undone first, as when the hard stop stops Spark
    assert "did not exit within 0.3 s of Spark's stop (threads: MainThread" in \
        capsys.readouterr().err


def test_the_hard_stop_gives_a_stop_under_way_its_time(tmp_path, monkeypatch) -> None:
    # The main thread is inside Spark's stop when the hard stop starts: the JVM's stop
    # returns at once (a stop is under way), and the hard stop waits for that one to finish
    # rather than exiting in the middle of it (executors being deleted).
    monkeypatch.setattr(runner_module, "HARD_STOP_S", 0.05)
    monkeypatch.setattr(runner_module, "CONTEXT_STOP_S", 5.0)
    monkeypatch.setattr(runner_module, "EXIT_GRACE_S", 0.05)
    exits: list[int] = []
    stopped = threading.Event()
    runner = _hard_stop_runner(tmp_path, exits, stopped)
    _signalled_twice(runner)
    assert stopped.wait(2)
    time.sleep(0.2)
    assert exits == []  # not in the middle of the stop
    runner.closed()  # the main thread's stop ends within CONTEXT_STOP_S
    assert runner._hard_stop is not None
    runner._hard_stop.join(5)
    assert not runner._hard_stop.is_alive()
    assert exits == [INTERRUPTED]  # a test's process does not exit: the guard ends it


_EXIT_HANGS = """
import atexit, sys, time
from l2m.config.job import JobConfig
from l2m.runtime import runner as m

m.EXIT_GRACE_S, m.LAST_RESORT_S = 0.5, 1.0
r = m.Runner(JobConfig(), [], out=None)
r._arm_hard_stop()  # a second signal
r.closed()  # the command stopped Spark; now the process's own exit hangs:


class Finalized:
    def __del__(self) -> None:  # as the interpreter finalizes: daemon threads stopped
        time.sleep(60)


if sys.argv[1] == "atexit":
    atexit.register(time.sleep, 60)
else:
    held = Finalized()
"""


@pytest.mark.parametrize(("where", "code"), [("atexit", INTERRUPTED), ("finalizing", 1)])
def test_a_process_whose_exit_hangs_after_a_second_signal_still_ends(tmp_path, where, code):
    # Hung in an at-exit hook (or waiting for a thread), the hard stop's thread still runs:
    # 130 and the threads named. Hung while the interpreter finalizes, that thread is gone:
    # faulthandler's watchdog ends the process, exit 1 with every thread's stack.
    script = tmp_path / "hang.py"
    script.write_text(_EXIT_HANGS)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script), where], capture_output=True,
                          text=True, timeout=30)
    assert time.monotonic() - started < 20
    assert done.returncode == code, done.stderr
    if code == INTERRUPTED:
        assert "did not exit within 0.5 s of Spark's stop (threads: none)" in done.stderr
    else:
        assert "Timeout (0:00:01.500000)!" in done.stderr and "__del__" in done.stderr


_SIGNAL_IN_EVENT_WAIT = """
import os, signal, sys
from l2m.config.job import JobConfig
from l2m.runtime.runner import Runner

r = Runner(JobConfig(), [], out=sys.stdout)
r._exit = lambda code: None  # the hard stop, armed by the second signal, never ends this
r.install_signals()
# The main thread holds the stop event's lock, as on its way into or out of Event.wait()
# (the runner's poll): both signals are handled right here, in this thread.
with r._stop._cond:
    os.kill(os.getpid(), signal.SIGTERM)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except KeyboardInterrupt:
        print("stop now")
print("stopping" if r._stop.wait(5) and r._now.wait(5) else "not stopped")
"""


def test_signals_while_the_main_thread_holds_the_stop_events_lock(tmp_path) -> None:
    # A handler that set the Event itself waited here forever for its own thread's lock, and
    # the second signal, handled inside that wait, was taken for a first: "SIGTERM received"
    # twice, no exit (a CI run of the Kubernetes SIGTERM test).
    script = tmp_path / "signals.py"
    script.write_text(_SIGNAL_IN_EVENT_WAIT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line]
    assert lines == ["stop now", "l2m: SIGTERM received, finishing the current batch…",
                     "stopping"] or lines == [
        "l2m: SIGTERM received, finishing the current batch…", "stop now", "stopping"]
