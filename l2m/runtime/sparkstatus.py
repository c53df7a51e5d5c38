"""What each executor did in a micro-batch, from Spark's status store (through py4j): the
one place l2m reads Spark's JVM-side bookkeeping.

Input: the Spark session, the query's run id and a batch id. Output: :class:`ExecutorLoad` per
executor (tasks run, records read) and the number of registered executors, for the driver's
metrics (:mod:`l2m.runtime.telemetry`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ExecutorLoad:
    """What one executor did in a micro-batch."""

    tasks: int = 0
    records: int = 0


class BatchTasks:
    """What each executor did in a micro-batch, from Spark's status store (what its UI
    shows; kept with the UI off too): the tasks of the batch's jobs — the streaming engine
    runs them in the job group of the query's run id, described ``… batch = N`` — and the
    records their tasks read. Only new jobs are looked at, so a scrape costs a few py4j calls
    per job of the batch."""

    def __init__(self, spark: Any) -> None:
        self.sc = spark.sparkContext
        self._store = self.sc._jsc.sc().statusStore()
        self._described: dict[int, tuple[str, list[int]]] = {}

    def loads(self, run_id: str, batch_id: int) -> dict[str, ExecutorLoad]:
        suffix = f"batch = {batch_id}"
        loads: dict[str, list[int]] = {}
        for job in self.sc.statusTracker().getJobIdsForGroup(run_id):
            description, stages = self._job(job)
            if not description.endswith(suffix):
                continue
            for stage in stages:
                for executor, records in self._tasks(stage):
                    entry = loads.setdefault(executor, [0, 0])
                    entry[0] += 1
                    entry[1] += records
        for job in [j for j in self._described if j not in set(
                self.sc.statusTracker().getJobIdsForGroup(run_id))]:
            del self._described[job]  # jobs the store no longer keeps
        return {e: ExecutorLoad(t, r) for e, (t, r) in loads.items()}

    def _job(self, job_id: int) -> tuple[str, list[int]]:
        if job_id not in self._described:
            data = self._store.job(job_id)
            description = data.description()
            stages = data.stageIds()
            self._described[job_id] = (
                description.get() if description.isDefined() else "",
                [int(stages.apply(i)) for i in range(stages.size())])
        return self._described[job_id]

    def _tasks(self, stage: int) -> Iterator[tuple[str, int]]:
        try:
            attempt = self._store.lastStageAttempt(stage)
        except Exception:  # a stage skipped (its shuffle output reused) has no attempt
            return
        tasks = self._store.taskList(stage, attempt.attemptId(), 2**31 - 1).iterator()
        while tasks.hasNext():
            task = tasks.next()
            metrics = task.taskMetrics()
            records = int(metrics.get().inputMetrics().recordsRead()) \
                if metrics.isDefined() else 0
            yield str(task.executorId()), records

    def registered(self) -> int:
        """Executors registered now (in local mode, the driver itself: 1)."""
        executors = self._store.executorList(True)
        ids = [str(executors.apply(i).id()) for i in range(executors.size())]
        return len([i for i in ids if i != "driver"]) or len(ids)
