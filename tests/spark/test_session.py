"""The suite's own session, built as every l2m command builds one (l2m/runtime/session.py):
what the driver JVM it started was set up with."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark import SparkContext

from l2m.runtime.session import COMPILER_NICE, COMPILER_THREADS


def test_the_local_jvm_s_compiler_threads_run_at_the_lowest_priority(spark: object) -> None:
    proc = getattr(SparkContext._gateway, "proc", None)
    assert proc is not None, "the suite's session started its own JVM"
    found = {}
    for task in Path(f"/proc/{proc.pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:  # a thread that ended since the listing (not a compiler's)
            continue
        if name in COMPILER_THREADS:
            found[int(task.name)] = os.getpriority(os.PRIO_PROCESS, int(task.name))
    # -XX:-UseDynamicNumberOfCompilerThreads: they were all there when the session lowered them
    assert found and set(found.values()) == {COMPILER_NICE}, found
