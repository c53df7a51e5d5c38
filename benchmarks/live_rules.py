"""Live rule changes (issue 23, deliverable 4): how soon a rule added to a running job's rule
folder gives its first sample, and what a reload from 20 to 10,000 rules and back costs the
batches and the memory — the job never restarts (compare the roll-out gap, a restart per
change, in :mod:`benchmarks.rollout`).

Input: the broker, a warm Spark session, a producer at ``rate`` logs/s (wall-clock event
times), the benchmark rules in a folder ``l2m run`` watches (``rules_poll``), the trigger.
Output:

- per added rule: file written → its first sample on the metrics topic (seen by a consumer
  polling every 50 ms), in seconds and trigger intervals; with 20 rules loaded and with
  ``big`` more (the tenant generator's, 10 per account) loaded;
- each reload's own time (validate, compile, ship), and around the 20 → ``big`` → 20
  reloads the longest gap between two micro-batches' ends, against the trigger;
- the peak resident memory of the JVM and the Python workers over the whole run, and their
  memory after each of ``round_trips`` round trips 20 → ``big`` → 20 (growth from one to the
  next would be a leak per reload)."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

from benchmarks.latency import RateProducer, steady_config
from benchmarks.rules_scale import PeakMemory
from benchmarks.tenants import write_rules
from l2m.rules.loader import load_rules
from l2m.runtime.reload import RuleWatcher
from l2m.runtime.runner import Runner

ROOT = Path(__file__).resolve().parent.parent


def _added(i: int) -> str:
    return ("rules:\n"
            f"  - {{id: live-{i}, name: live_{i}_total, kind: counter, query: \"*\", "
            "aggregation: count, group_by: [service]}\n")


class FirstSample:
    """Consumes the metrics topic from its end; :meth:`wait` for a rule's first sample."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "log_level": "3",
                                  "group.id": f"live-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        self.seen: dict[str, float] = {}

    def wait(self, rule: str, timeout: float) -> float | None:
        """When the first sample of ``rule`` arrived (time.time()), or None."""
        deadline = time.monotonic() + timeout
        while rule not in self.seen and time.monotonic() < deadline:
            for message in self.consumer.consume(1000, timeout=0.05):
                if message.error() is None:
                    found = orjson.loads(message.value())["rule"]
                    self.seen.setdefault(found, time.time())
        return self.seen.get(rule)

    def close(self) -> None:
        self.consumer.close()


def run_live_rules(spark: SparkSession, bootstrap: str, workdir: Path, rate: float,
                   trigger_ms: int, poll_ms: int, big: int, adds: int = 3,
                   settle_s: float = 20.0, partitions: int = 4, round_trips: int = 2,
                   watch_triggers: int = 6) -> dict[str, Any]:
    folder = workdir / f"live-rules-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    (folder / "rules.yaml").write_text((ROOT / "benchmarks" / "rules.yaml").read_text())
    tenants = write_rules(workdir / f"tenants-{big}.yaml", big // 10)
    cfg = steady_config(bootstrap, "live", partitions, workdir, trigger_ms)
    from dataclasses import replace

    cfg = replace(cfg, rules=(str(folder),), rules_poll_ms=poll_ms)
    ends: list[float] = []  # each micro-batch's end (time.time())

    def on_progress(name: str, progress: dict[str, Any]) -> None:
        if name == "metrics":
            ends.append(time.time())

    loaded = load_rules([folder])
    watcher = RuleWatcher([str(folder)], lambda: load_rules([folder]), poll_ms / 1000)
    watcher.started(loaded)
    runner = Runner(cfg, loaded.rules, out=None, on_progress=on_progress, spark=spark,
                    watcher=watcher)
    first = FirstSample(bootstrap, cfg.topics.metrics)
    adds_out: list[dict[str, Any]] = []
    around: list[dict[str, Any]] = []
    after: list[tuple[float, float]] = []

    def add(i: int, loaded_rules: int) -> None:
        written = time.time()
        (folder / f"added-{i}.yaml").write_text(_added(i))
        seen = first.wait(f"live-{i}", timeout=max(120, 30 * trigger_ms / 1000))
        latency = None if seen is None else round(seen - written, 2)
        adds_out.append({"rules_loaded": loaded_rules, "seconds": latency,
                         "trigger_intervals": None if latency is None
                         else round(latency / (trigger_ms / 1000), 2),
                         "reload_s": round(watcher.status.loaded_at - written, 2)})

    def swap(write: bool) -> None:
        """Add or remove the big rule set, then watch the batches for a while."""
        before, rules_before = len(ends), len(watcher.rules)
        started = time.time()
        target = folder / "tenants.yaml"
        if write:
            target.write_text(tenants.read_text())
        else:
            target.unlink()
        version = watcher.status.version
        while watcher.status.version == version and time.time() - started < 300:
            time.sleep(0.1)
        loaded_at = watcher.status.loaded_at
        time.sleep(watch_triggers * trigger_ms / 1000)  # the batches planned with the new set
        window = ends[max(0, before - 1):]
        gaps = [b - a for a, b in itertools.pairwise(window)]
        around.append({"reload": f"{rules_before:,} → {len(watcher.rules):,} rules",
                       "reload_s": round(loaded_at - started, 2),
                       "longest_gap_s": round(max(gaps), 2) if gaps else None,
                       "longest_gap_triggers": round(max(gaps) / (trigger_ms / 1000), 2)
                       if gaps else None})

    with PeakMemory() as peak:
        runner.start()
        producer = RateProducer(bootstrap, cfg.topics.logs, partitions, rate)
        producer.start()
        watching = threading.Thread(target=runner.wait, kwargs={"poll": 0.2}, daemon=True)
        watching.start()
        try:
            time.sleep(settle_s)
            for i in range(adds):
                add(i, len(watcher.rules))
                time.sleep(2 * trigger_ms / 1000)
            swap(True)
            add(adds, len(watcher.rules))
            swap(False)
            after.append(PeakMemory.now())
            # Again: memory after each round trip, to see it does not grow with reloads.
            for _ in range(round_trips - 1):
                swap(True)
                swap(False)
                after.append(PeakMemory.now())
        finally:
            runner.stop()
            watching.join(timeout=120)
            producer.stopping.set()
            producer.join(timeout=30)
            first.close()
    small = [a["seconds"] for a in adds_out if a["rules_loaded"] < big and a["seconds"]]
    large = [a["seconds"] for a in adds_out if a["rules_loaded"] >= big and a["seconds"]]
    return {"rate": rate, "trigger_ms": trigger_ms, "poll_ms": poll_ms, "big": big,
            "adds": adds_out, "reloads": around,
            "median_first_sample_s": statistics.median(small) if small else None,
            "max_first_sample_triggers": max((a["trigger_intervals"] or 0) for a in adds_out
                                             if a["rules_loaded"] < big) if small else None,
            "big_first_sample_triggers": max((a["trigger_intervals"] or 0) for a in adds_out
                                             if a["rules_loaded"] >= big) if large else None,
            "peak_jvm_rss_mib": round(peak.jvm),
            "peak_python_worker_rss_mib": round(peak.python_worker),
            "rss_after_round_trips_mib": [{"jvm": round(j), "python_worker": round(w)}
                                          for j, w in after],
            "batches": len(ends)}
