"""Drain scenario: a pre-loaded backlog, uniform or skewed over partitions, drained by the
streaming job (availableNow) with the balanced or the classic plan. Measures
throughput and, per micro-batch, records per task (max/mean) from the source's plan log."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.load import LoadSpec, Skew, Topics, fresh_topics, preload
from l2m.config.job import JobConfig, SourceConfig
from l2m.rules.model import Rule
from l2m.streaming.job import start_job


@dataclass(frozen=True)
class DrainCase:
    records: int
    partitions: int
    skew: Skew
    planner: str  # balanced | partition
    per_batch: int
    per_task: int
    accounts: int = 0  # > 0: logs spread over this many tenant accounts

    @property
    def name(self) -> str:
        plan = "skew-aware" if self.planner == "balanced" else "per-partition"
        return f"{self.skew.label}, {plan}"


def balance(plan_log: Path) -> list[dict[str, float]]:
    """Per planned batch: tasks, max, mean and max/mean records per task."""
    out = []
    if not plan_log.exists():
        return out
    for line in plan_log.read_text().splitlines():
        tasks = json.loads(line)["tasks"]
        mean = sum(tasks) / len(tasks)
        out.append({"tasks": len(tasks), "max": max(tasks), "mean": round(mean, 1),
                    "max_over_mean": round(max(tasks) / mean, 3)})
    return out


def executor_balance(plan_log: Path) -> list[dict[str, Any]]:
    """Per micro-batch (tasks grouped under the latest plan before they started): tasks and
    records per executor, and their max/mean over the executors that ran tasks."""
    plans_path, tasks_path = Path(f"{plan_log}"), Path(f"{plan_log}.tasks")
    if not plans_path.exists() or not tasks_path.exists():
        return []
    plan_times = [json.loads(x)["time"] for x in plans_path.read_text().splitlines()]
    batches: dict[int, dict[str, list[int]]] = {}
    for line in tasks_path.read_text().splitlines():
        task = json.loads(line)
        index = max((i for i, t in enumerate(plan_times) if t <= task["time"]), default=0)
        batches.setdefault(index, {}).setdefault(task["executor"], []).append(task["records"])
    out = []
    for index in sorted(batches):
        per = batches[index]
        tasks = [len(v) for v in per.values()]
        records = [sum(v) for v in per.values()]
        out.append({"batch": index, "executors": len(per), "tasks": tasks, "records": records,
                    "tasks_max_over_mean": round(max(tasks) / (sum(tasks) / len(tasks)), 3),
                    "records_max_over_mean": round(max(records) / (sum(records) / len(records)),
                                                   3)})
    return out


def run_drain(spark: SparkSession, bootstrap: str, case: DrainCase, rules: list[Rule],
              workdir: Path,
              alongside: Callable[[Topics], AbstractContextManager[Any]] | None = None,
              ) -> dict[str, Any]:
    """Drain a fresh backlog of ``case`` with ``rules``; ``alongside``: what runs beside the
    job on its topics while it drains (outside the timed part's start-up: it is entered first)."""
    topics = fresh_topics(bootstrap, "bench", case.partitions)
    suffix = topics.logs.rsplit("-", 1)[1]
    load_s = preload(LoadSpec(bootstrap, topics.logs, case.partitions, case.records, case.skew,
                              accounts=case.accounts))
    plan_log = workdir / f"plan-{suffix}"
    cfg = JobConfig(
        kafka={"bootstrap.servers": bootstrap}, topics=topics,
        checkpoint=str(workdir / f"ck-{suffix}"), counter_shards=4,
        source=SourceConfig(max_records_per_trigger=case.per_batch,
                            max_records_per_task=case.per_task, planner=case.planner,
                            plan_log=str(plan_log)),
    )
    with alongside(topics) if alongside is not None else contextlib.nullcontext():
        started = time.monotonic()
        job = start_job(spark, cfg, rules, once=True)
        for query in job.queries:
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(f"{query.name} failed: {query.exception()}")
        elapsed = time.monotonic() - started
    batches = {q.name: [p for p in q.recentProgress if p["numInputRows"]] for q in job.queries}
    durations = [p["durationMs"]["triggerExecution"] for ps in batches.values() for p in ps]
    plans = balance(plan_log)
    data_plans = [b for b in plans if b["tasks"] > 0]
    executors = [b for b in executor_balance(plan_log)
                 if sum(b["records"]) >= case.partitions * 10]  # not the closing batch
    return {
        "case": case.name,
        "skew": case.skew.label,
        "planner": case.planner,
        **{k: v for k, v in asdict(case).items() if k not in ("skew", "planner")},
        "preload_s": round(load_s, 1),
        "drain_s": round(elapsed, 2),
        "logs_per_s": round(case.records / elapsed),
        "batches": len(batches.get("l2m-metrics", [])),
        "durations": [p["durationMs"] for ps in batches.values() for p in ps],
        "median_batch_ms": statistics.median(durations) if durations else None,
        "records_per_task_max_over_mean": max((b["max_over_mean"] for b in data_plans),
                                              default=None),
        "plans": data_plans,
        "executors": executors,
        "master": spark.sparkContext.master,
    }
