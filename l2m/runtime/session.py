"""Spark session set-up shared by every command and the tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession

from l2m.defaults import MASTER
from l2m.errors import ConfigError
from l2m.runtime.jvm import java_options

if TYPE_CHECKING:
    from l2m.runtime import forkserver

PACKAGE = Path(__file__).resolve().parent.parent  # the installed l2m package
# Spark's logging: quiet (l2m reports failures itself, in one line), or in full for
# `l2m --debug`, which sets L2M_DEBUG=1 (the stack traces of Spark's failure logs).
LOG4J = PACKAGE / "log4j2.properties"
LOG4J_DEBUG = PACKAGE / "log4j2-debug.properties"
# The interpreter wrapper for every Python process Spark starts (see the script).
PYTHON = PACKAGE / "bin" / "python"
# The JVM moves partials, state and samples; all per-log work is in Python. C2's compiles of
# Spark's generated code for every new query cost more CPU than its faster code saves
# (warm drain, 2 cores: JVM 4.7 -> 2.0 CPU-s per 480k logs, 55k -> 65k logs/s). Huge
# methods compiled all the same: left interpreted, they were the route stage's bottleneck.
#
# All compiler threads start with the JVM (not added as the queue grows), so that a local
# session can lower their priority once it runs (compile_in_idle_time).
JIT = ("-XX:-DontCompileHugeMethods -XX:TieredStopAtLevel=1 "
       "-XX:-UseDynamicNumberOfCompilerThreads")
# A batch job (`l2m backfill`) runs one plan over all its input, and C2's compiles pay there:
# 1,000,000 logs with a unique id each, warm session, 7.7–7.9 → 7.3–7.5 s (350,000 samples
# moved through the JVM twice); the example rules' 3.5–3.8 s either way.
BATCH_JIT = "-XX:-DontCompileHugeMethods"
# Where the JVM runs on the Python workers' cores (a local master), a streaming session's
# compiler threads run at the lowest priority: the JIT compiles on a core the workers leave
# idle (between stages, between batches) instead of taking turns with them. `l2m run --once`
# of 1,000,000 logs on 2 cores: faster in 13 of 14 alternating pairs, 0.4-0.6 s on average,
# the first batch most. Executors' JVMs are left as they are: renicing local-cluster's made
# no difference. Their priority is only ever lowered: no privilege is needed, nothing is
# printed.
COMPILER_NICE = 19
COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")  # HotSpot's names, cut to 15

DEFAULTS: dict[str, str] = {
    # Loopback only: nothing of ours listens on other interfaces.
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    "spark.driver.memory": "2g",
    "spark.sql.adaptive.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.python.daemon.module": "l2m.runtime.daemon",
    # Every Column operation would otherwise record its Python call site (a stack inspection
    # and py4j calls): routing 1,000 rules built their expressions 3-4x slower. l2m's errors
    # name their cause themselves.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


# The master URLs Spark 4 accepts. Checked here because a bad one makes spark-submit exit
# before the JVM gateway starts, and all pyspark can say then is JAVA_GATEWAY_EXITED.
MASTER_URL = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|"
                    r"spark://\S+|k8s://\S+|yarn")


def build_session(master: str = MASTER, app_name: str = "l2m",
                  conf: Mapping[str, str] | None = None, jit: str = JIT) -> SparkSession:
    """A Spark session whose Python workers run this interpreter (so they see l2m and its
    dependencies, with or without an activated venv); ``jit``: the JVMs' compiler options
    (:data:`JIT` for streaming, :data:`BATCH_JIT` for a batch job). A master URL Spark would
    not accept is a :class:`~l2m.errors.ConfigError`."""
    if not MASTER_URL.fullmatch(master):
        raise ConfigError(f"Spark master '{master}' is not one Spark accepts: local, local[N], "
                          "local[*], local-cluster[N,CORES,MEMORY_MB], spark://HOST:PORT, "
                          "k8s://URL or yarn")
    os.environ.setdefault("PYSPARK_PYTHON", _worker_python())
    # Spark runs its lookup of installed Python data sources (a Python process, at the first
    # data source registered) with this interpreter: through the wrapper it imports the
    # installed pyspark, not the zip, and is forked by the fork server (0.68 -> 0.15 s). The
    # driver program itself is this process, already running: nothing else reads it.
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", _worker_python())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_settings(conf, jit).items():
        builder = builder.config(key, value)
    _start_fork_server(master)
    spark = _without_sigterm(builder.getOrCreate)
    spark.sparkContext.setLogLevel("ERROR")
    if jit == JIT and master.startswith("local"):
        from pyspark import SparkContext

        compile_in_idle_time(getattr(getattr(SparkContext._gateway, "proc", None), "pid", None))
    return spark


def compile_in_idle_time(pid: int | None) -> int:
    """Lower the JIT compiler threads of the JVM ``pid`` to :data:`COMPILER_NICE`, where the
    system has per-thread niceness (Linux's ``/proc``); returns how many run at it now. A
    thread that cannot be changed is left as it is: only speed depends on it."""
    if pid is None:
        return 0
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return 0
    lowered = 0
    for task in tasks.iterdir():
        try:
            if (task / "comm").read_text().strip() not in COMPILER_THREADS:
                continue
            tid = int(task.name)
            if os.getpriority(os.PRIO_PROCESS, tid) < COMPILER_NICE:
                os.setpriority(os.PRIO_PROCESS, tid, COMPILER_NICE)
            lowered += 1
        except (OSError, ValueError):  # gone meanwhile, or not ours to change
            continue
    return lowered


def session_settings(conf: Mapping[str, str] | None = None, jit: str = JIT) -> dict[str, str]:
    """The Spark settings :func:`build_session` starts with: l2m's defaults, the JVMs'
    compiler options ``jit`` and class-data archive, then ``conf`` over them."""
    cores = os.cpu_count() or 2
    settings = {"spark.sql.shuffle.partitions": str(max(4, 2 * cores)), **DEFAULTS,
                "spark.driver.extraJavaOptions":
                    f"-Dlog4j2.configurationFile=file:{log4j_config()} {jit}",
                "spark.executor.extraJavaOptions": jit,
                # Executors elsewhere (Kubernetes: the same image) run the same interpreter.
                "spark.executorEnv.L2M_PYTHON": os.environ.get("L2M_PYTHON", sys.executable),
                **(conf or {})}
    cds = java_options()
    if cds:
        key = "spark.driver.extraJavaOptions"
        settings[key] = f"{settings.get(key, '')} {cds}".strip()
    return settings


def log4j_config() -> Path:
    """The driver's log4j configuration: :data:`LOG4J_DEBUG` when ``L2M_DEBUG=1``."""
    return LOG4J_DEBUG if os.environ.get("L2M_DEBUG") == "1" else LOG4J


def _worker_python() -> str:
    """The wrapper (``l2m/bin/python``) around this interpreter, when it can run: Spark's
    Python processes then import the installed pyspark (bytecode cached) instead of its zip —
    about 0.8 s less for each of the half-dozen planner, source and worker processes a
    start waits for in turn."""
    os.environ.setdefault("L2M_PYTHON", sys.executable)
    if os.name == "posix" and os.access(PYTHON, os.X_OK):
        return str(PYTHON)
    return sys.executable


_fork_server: forkserver.Handle | None = None  # this process's fork server, once started


def _start_fork_server(master: str) -> None:
    """Start l2m's fork server (:mod:`l2m.runtime.forkserver`) for a master whose Python
    processes all run on this machine, before the JVM starts (it must inherit the server's
    name), unless ``L2M_FORKSERVER=off``, or this process's server or an earlier session's JVM
    is already there. A server named by an inherited ``L2M_FORKSERVER`` is forgotten either
    way. It imports pyspark, Arrow and l2m while the JVM starts, and forks each
    Python process Spark asks for instead of starting an interpreter for each: ≈ 2 s less on
    every ``l2m run`` start."""
    from l2m.runtime import forkserver

    global _fork_server
    if os.environ.get(forkserver.ENV) == "off":
        return
    if _fork_server is not None and _fork_server.process.poll() is None:
        os.environ[forkserver.ENV] = str(_fork_server.socket)  # this process's, still serving
        return
    # A server named by an inherited L2M_FORKSERVER (l2m started by a process that runs one)
    # is not this process's: whether or not it starts its own below, its JVM must not hand
    # its Python processes to another process's server.
    os.environ.pop(forkserver.ENV, None)
    if os.name != "posix" or not master.startswith("local"):
        return
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return  # the JVM runs already: it would never hear of the server
    if os.environ.get("PYSPARK_PYTHON") != str(PYTHON):
        return  # only the wrapper asks the server
    try:
        _fork_server = forkserver.start(os.environ.get("L2M_PYTHON", sys.executable))
    except OSError:  # no writable temp folder, no Unix sockets: Spark starts them as ever
        return


def _without_sigterm(launch: Callable[[], SparkSession]) -> SparkSession:
    """Run ``launch`` (the session's creation) so that the JVM it starts ignores SIGTERM.

    l2m's driver stops the job gracefully on SIGTERM (the running batch finishes and commits);
    a SIGTERM sent to the whole process group — `kill -TERM -PGID`, a terminal, some
    supervisors — would otherwise also reach the JVM, which would exit at once and fail the
    batch. Only the child is changed: pyspark starts the JVM with ``Popen`` and a ``preexec_fn``
    that ignores SIGINT; ours also ignores SIGTERM there, in the forked child before ``exec``
    (an ignored signal stays ignored across ``exec``). The driver keeps its own handler the
    whole time, so a SIGTERM during the slow start (on Kubernetes, up to 30 s waiting for
    executors) is not lost: it requests the stop the runner acts on once the session is up.
    The JVM still exits when the driver process ends."""
    from pyspark import java_gateway

    popen = getattr(java_gateway, "Popen", None)
    if popen is None or os.name != "posix":
        return launch()

    def ignoring_sigterm(*args: Any, **kwargs: Any) -> Any:
        inner = kwargs.get("preexec_fn")

        def preexec() -> None:
            if inner is not None:
                inner()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        kwargs["preexec_fn"] = preexec
        return popen(*args, **kwargs)

    # setattr: the module's Popen is subprocess.Popen, a class; ours is a function wrapping it
    setattr(java_gateway, "Popen", ignoring_sigterm)  # noqa: B010
    try:
        return launch()
    finally:
        setattr(java_gateway, "Popen", popen)  # noqa: B010


def stop_at_exit(spark: SparkSession) -> None:
    """Stop Spark as the last thing before the process exits. ``spark.stop()`` waits for
    pyspark's accumulator server to notice its shutdown, which polls its connection once a
    second: 0.87 s of every ``l2m run --once`` and ``l2m backfill``. Its thread is a daemon,
    so it is only told to end and left to end with the process; the JVM's context stops as
    ever.

    Then py4j's gateway is shut down: the driver JVM exits when this process does (its stdin
    closes), and the JVM's exit waits up to 0.3 s for threads inside native code to leave it —
    the gateway's server thread sits in ``accept()`` until its socket is closed. Whatever
    reads the command's output (a pipe, a log collector) saw its end ≈ 0.44 s after the
    process exited, ≈ 0.12 s with the gateway shut down. No Spark call can follow."""
    context = spark.sparkContext
    gateway = getattr(context, "_gateway", None)
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        server.server_shutdown = True  # its handler ends at its next poll, if still alive
        context._accumulatorServer = None  # type: ignore[assignment]
    spark.stop()
    if gateway is not None:
        with contextlib.suppress(Exception):  # the exit is what matters; the JVM ends anyway
            gateway.shutdown()
