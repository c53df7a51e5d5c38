"""Executor loss in ``local-cluster``: the job runs at a steady rate on two executor JVMs;
one is killed mid-run. Measured: the processing gap — the longest batch (or wait between
batches) after the kill against the median batch before it, in micro-batches."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.latency import RateProducer, steady_config
from l2m.rules.model import Rule
from l2m.runtime.runner import Runner


def executor_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                         text=True, check=False).stdout
    return sorted(int(p) for p in out.split())


def _end_time(progress: dict[str, Any]) -> float:
    start = dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return start + progress["durationMs"].get("triggerExecution", 0) / 1000


def run_executor_loss(spark: SparkSession, bootstrap: str, rules: list[Rule], workdir: Path,
                      rate: float, before_s: float, after_s: float, partitions: int = 4,
                      trigger_ms: int = 3000) -> dict[str, Any]:
    cfg = steady_config(bootstrap, "loss", partitions, workdir, trigger_ms)
    topics = cfg.topics
    batches: list[dict[str, Any]] = []

    def on_progress(name: str, progress: dict[str, Any]) -> None:
        if name == "metrics":
            batches.append({"end": _end_time(progress), "rows": progress["numInputRows"],
                            "ms": progress["durationMs"].get("triggerExecution", 0)})

    runner = Runner(cfg, rules, out=None, on_progress=on_progress, spark=spark)  # type: ignore[arg-type]
    runner.start()
    producer = RateProducer(bootstrap, topics.logs, partitions, rate)
    producer.start()
    started = time.monotonic()
    killed: dict[str, Any] = {}

    def tick() -> None:
        if not killed and time.monotonic() - started >= before_s:
            pids = executor_pids()
            killed["pids"] = pids
            killed["at"] = time.time()
            if pids:
                os.kill(pids[-1], signal.SIGKILL)

    code = runner.wait(duration=before_s + after_s, poll=0.5, on_tick=tick)
    producer.stopping.set()
    producer.join(timeout=30)
    result = summarize(batches, killed.get("at", time.time()), trigger_ms)
    return {"rate": rate, "executors_before": len(killed.get("pids", [])),
            "exit_code": code, "trigger_ms": trigger_ms, **result, "batches": batches}


def summarize(batches: list[dict[str, Any]], killed_at: float, trigger_ms: int
              ) -> dict[str, Any]:
    before = [b for b in batches if b["end"] < killed_at and b["rows"] > 0]
    after = [b for b in batches if b["end"] >= killed_at]
    median = statistics.median(b["ms"] for b in before[1:] or before) if before else None
    ends = [b["end"] for b in batches]
    # the longest time without a completed batch, from the kill on
    last_before = max((e for e in ends if e < killed_at), default=killed_at)
    gaps = [after[0]["end"] - last_before] if after else []
    gaps += [b2["end"] - b1["end"] for b1, b2 in itertools.pairwise(after)]
    normal_gap = max(trigger_ms / 1000, (median or 0) / 1000)
    worst = max(gaps, default=None)
    return {
        "median_batch_ms_before": median,
        "worst_gap_after_kill_s": round(worst, 2) if worst is not None else None,
        "normal_gap_s": round(normal_gap, 2),
        "delay_in_batches": round((worst - normal_gap) / normal_gap, 2)
        if worst is not None else None,
        "batches_after": len(after),
    }
