"""Progress of long Spark jobs on stderr, from the driver's status tracker.

Input: the Spark context (its status tracker) while a job runs. Output: a line every couple of
seconds on stderr — each active stage's completed/total tasks (one updated line on a
terminal)."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType

from pyspark import SparkContext


class JobProgress:
    """Context manager printing task progress of active stages every ``interval`` seconds."""

    def __init__(self, sc: SparkContext, label: str, interval: float = 2.0,
                 enabled: bool = True) -> None:
        self.sc = sc
        self.label = label
        self.interval = interval
        self.enabled = enabled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="l2m-progress", daemon=True)
        self._start = time.monotonic()
        self._last = ""
        self._tty = sys.stderr.isatty()

    def __enter__(self) -> JobProgress:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.enabled and self._tty and self._last:
            sys.stderr.write("\n")

    def _run(self) -> None:
        tracker = self.sc.statusTracker()
        while not self._stop.wait(self.interval):
            parts = []
            for stage_id in sorted(tracker.getActiveStageIds()):
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    parts.append(f"stage {stage_id} {info.numCompletedTasks}/{info.numTasks} tasks")
            if not parts:
                continue
            elapsed = time.monotonic() - self._start
            line = f"{self.label}: {', '.join(parts)} ({elapsed:.0f}s)"
            if line != self._last:
                sys.stderr.write(("\r" + line.ljust(78)) if self._tty else line + "\n")
                sys.stderr.flush()
                self._last = line
