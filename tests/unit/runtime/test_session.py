"""The Spark settings every l2m session starts with (l2m.runtime.session), without a JVM."""

from __future__ import annotations

import os

import pytest
from pyspark import SparkContext

from l2m.runtime.session import (
    BATCH_JIT,
    COMPILER_NICE,
    compile_in_idle_time,
    session_settings,
)

JAVA = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def test_streaming_jvms_stop_at_c1_and_a_batch_job_s_compile_with_c2():
    streaming, batch = session_settings(), session_settings(jit=BATCH_JIT)
    for key in JAVA:
        assert "-XX:TieredStopAtLevel=1" in streaming[key].split()
        # every compiler thread there from the start, for compile_in_idle_time to find
        assert "-XX:-UseDynamicNumberOfCompilerThreads" in streaming[key].split()
        assert "-XX:-UseDynamicNumberOfCompilerThreads" not in batch[key].split()
        assert "-XX:-DontCompileHugeMethods" in batch[key].split()
        assert not any(o.startswith("-XX:TieredStopAtLevel") for o in batch[key].split())
    # l2m's log4j configuration stays on the driver either way
    assert "-Dlog4j2.configurationFile=" in batch["spark.driver.extraJavaOptions"]


def test_a_job_s_own_spark_settings_win():
    assert session_settings({"spark.executor.extraJavaOptions": "-Dx=1"})[
        "spark.executor.extraJavaOptions"] == "-Dx=1"


class _Started:
    """A stand-in for forkserver.start: records the calls, serves nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, python: str) -> object:
        from l2m.runtime import forkserver

        self.calls.append(python)
        handle = type("Handle", (), {})()
        handle.socket = f"/nowhere/{len(self.calls)}"
        handle.process = type("Process", (), {"poll": lambda self: None})()
        os.environ[forkserver.ENV] = handle.socket
        return handle


def _fork_server_env(monkeypatch: pytest.MonkeyPatch, value: str | None) -> _Started:
    from l2m.runtime import forkserver, session

    started = _Started()
    monkeypatch.setattr(forkserver, "start", started)
    monkeypatch.setattr(session, "_fork_server", None)
    # the suite's shared Spark session may run in this process already: no JVM for these
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setenv("PYSPARK_PYTHON", str(session.PYTHON))
    if value is None:
        monkeypatch.delenv(forkserver.ENV, raising=False)
    else:
        monkeypatch.setenv(forkserver.ENV, value)
    return started


def test_a_local_master_gets_one_fork_server_per_process(monkeypatch):
    from l2m.runtime import forkserver, session

    # one inherited from a parent l2m is not this process's: its own replaces it
    started = _fork_server_env(monkeypatch, "/parent/fork.sock")
    session._start_fork_server("local[2]")
    session._start_fork_server("local[2]")  # a second session in the same process: the same
    assert len(started.calls) == 1
    assert os.environ[forkserver.ENV] == "/nowhere/1"


def test_no_fork_server_when_turned_off_or_for_executors_elsewhere(monkeypatch):
    from l2m.runtime import session

    started = _fork_server_env(monkeypatch, "off")
    session._start_fork_server("local[2]")
    assert started.calls == []
    started = _fork_server_env(monkeypatch, None)
    for master in ("k8s://https://10.0.0.1:443", "spark://host:7077", "yarn"):
        session._start_fork_server(master)
    assert started.calls == []


def test_no_fork_server_when_spark_runs_a_python_of_its_own(monkeypatch):
    from l2m.runtime import session

    started = _fork_server_env(monkeypatch, None)
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")  # the user's choice: not our wrapper
    session._start_fork_server("local[2]")
    assert started.calls == []


@pytest.mark.parametrize("master", ["local[2]", "k8s://https://10.0.0.1:443"])
def test_a_parent_s_fork_server_is_forgotten_when_no_server_of_its_own_starts(monkeypatch,
                                                                              master):
    from l2m.runtime import forkserver, session

    # l2m started by a process that runs a server (the test suite, a wrapper script): its JVM
    # must not hand its Python processes to that process's server
    started = _fork_server_env(monkeypatch, "/parent/fork.sock")
    if master.startswith("local"):
        monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    session._start_fork_server(master)
    assert started.calls == []
    assert forkserver.ENV not in os.environ


# A process standing in for a JVM: threads named as HotSpot names its compilers, and one other.
_THREADS = """
import sys, threading
names = sys.argv[1:]
ready, stop, tids = threading.Barrier(len(names) + 1), threading.Event(), {}
def run(name):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write(name)
    tids[name] = threading.get_native_id()
    ready.wait()
    stop.wait()
for name in names:
    threading.Thread(target=run, args=(name,), daemon=True).start()
ready.wait()
# one writer: lines printed by the threads themselves could interleave
print("".join(f"{tid} {name}\\n" for name, tid in tids.items()), end="", flush=True)
sys.stdin.read()
"""


def test_a_jvm_s_compiler_threads_are_lowered_and_nothing_else():
    import subprocess
    import sys

    names = ["C1 CompilerThre", "C2 CompilerThre", "VM Thread"]
    child = subprocess.Popen([sys.executable, "-c", _THREADS, *names], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        tids = {line.split(" ", 1)[1].strip(): int(line.split()[0])
                for line in (child.stdout.readline() for _ in names)}
        before = os.getpriority(os.PRIO_PROCESS, tids["VM Thread"])
        assert compile_in_idle_time(child.pid) == 2
        assert os.getpriority(os.PRIO_PROCESS, tids["C1 CompilerThre"]) == COMPILER_NICE
        assert os.getpriority(os.PRIO_PROCESS, tids["C2 CompilerThre"]) == COMPILER_NICE
        assert os.getpriority(os.PRIO_PROCESS, tids["VM Thread"]) == before
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == before
        assert compile_in_idle_time(child.pid) == 2  # again: already there, nothing raised
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)


def test_no_jvm_or_a_gone_one_lowers_nothing():
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert compile_in_idle_time(None) == 0
    assert compile_in_idle_time(gone.pid) == 0
