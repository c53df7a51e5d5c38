"""Scale model: drain throughput for 4 … 256 cores with one-task-per-partition plans versus
split (skew-aware) plans, from the per-record and per-task costs measured on this machine.

A micro-batch is modelled as the read tasks of the query (``queries`` > 1 models the older
layout where counters and gauges each read the same ranges) scheduled greedily on the
cores — each task a fixed cost plus a cost per record, everything downstream of the read
included — so the batch takes as long as its most loaded core. The two costs are calibrated
on the 2-core uniform drains (the skew-aware plan has few tasks, the per-partition plan many)
and the model is checked against the measured median batch of every 2-core scenario before
it is extrapolated."""

from __future__ import annotations

import heapq
import math
from typing import Any

from benchmarks.load import Skew, partition_counts
from l2m.kafka.offsets import OffsetRange, plan_tasks


def makespan(task_seconds: list[float], cores: int) -> float:
    """Greedy list scheduling in plan order (how Spark hands tasks to free cores)."""
    free = [0.0] * cores
    heapq.heapify(free)
    for seconds in task_seconds:
        start = heapq.heappop(free)
        heapq.heappush(free, start + seconds)
    return max(free)


def batch_seconds(records: int, partitions: int, skew: Skew, cores: int, planner: str,
                  per_record_s: float, per_task_s: float, max_per_task: int,
                  queries: int = 1) -> float:
    """One micro-batch: each query reads the same plan; ``per_record_s`` is the cost of a
    log through all queries."""
    counts = partition_counts(records, skew.weights(partitions))
    ranges = [OffsetRange(p, 0, n) for p, n in enumerate(counts)]
    tasks = plan_tasks(ranges, max_per_task, min_tasks=cores, balanced=planner == "balanced")
    one = [per_task_s + per_record_s / queries * sum(r.size for r in t) for t in tasks]
    return makespan(one * queries, cores)


def _tasks(d: dict[str, Any], cores: int) -> int:
    if d["planner"] == "partition":
        return d["partitions"]
    return max(cores, math.ceil(d["per_batch"] / d["per_task"]))


def calibrate(drains: list[dict[str, Any]], cores: int, queries: int = 1) -> dict[str, float]:
    """Per-record and per-task costs from the uniform drains' median batch: cores × batch =
    queries × tasks × per_task + records × per_record, for the two plans."""
    def find(planner: str) -> dict[str, Any]:
        return next(d for d in drains if d["skew"] == "uniform" and d["planner"] == planner)

    balanced, classic = find("balanced"), find("partition")
    n_bal, n_cls = _tasks(balanced, cores), _tasks(classic, cores)
    t_bal, t_cls = balanced["median_batch_ms"] / 1000, classic["median_batch_ms"] / 1000
    per_task = max(0.0, (t_cls - t_bal) * cores / (queries * max(1, n_cls - n_bal)))
    per_record = max(1e-9, (t_bal * cores - queries * n_bal * per_task) / balanced["per_batch"])
    return {"per_record_s": per_record, "per_task_s": per_task}


def model(drains: list[dict[str, Any]], cores_measured: int,
          cores_list: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256)) -> dict[str, Any]:
    costs = calibrate(drains, cores_measured)
    check = []
    for d in drains:
        predicted = batch_seconds(d["per_batch"], d["partitions"], _skew(d["skew"]),
                                  cores_measured, d["planner"], costs["per_record_s"],
                                  costs["per_task_s"], d["per_task"])
        check.append({"case": d["case"], "measured_batch_s": d["median_batch_ms"] / 1000,
                      "predicted_batch_s": round(predicted, 2)})
    # At scale: partitions and batch grow with the cluster; every core gets the same share.
    rows = []
    for cores in cores_list:
        partitions = max(16, cores)
        records = 80_000 * cores
        row: dict[str, Any] = {"cores": cores, "partitions": partitions,
                               "records_per_batch": records}
        for skew in (Skew("uniform"), Skew("hot", 0.7), Skew("zipf", zipf_s=1.2)):
            for planner in ("balanced", "partition"):
                seconds = batch_seconds(records, partitions, skew, cores, planner,
                                        costs["per_record_s"], costs["per_task_s"],
                                        max_per_task=max(1, records // (2 * cores)))
                row[f"{skew.label}|{planner}"] = round(records / seconds)
        rows.append(row)
    return {"costs": costs, "check": check, "logs_per_s": rows}


def _skew(label: str) -> Skew:
    if label.startswith("hot"):
        return Skew("hot", float(label.split()[1].rstrip("%")) / 100)
    if label.startswith("zipf"):
        return Skew("zipf", zipf_s=float(label.split("=")[1]))
    return Skew("uniform")
