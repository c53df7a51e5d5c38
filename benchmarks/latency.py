"""Steady state at a fixed input rate: end-to-end latency (log produced → its counter sample
on the metrics topic) and per-partition lag over time.

A counter sample's timestamp is the event time of the newest log counted into it, and the
generator stamps each log with the wall clock when it produces it; the sample's Kafka
timestamp is when the sink produced it. Their difference is the latency of the freshest log
of each series in each micro-batch."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

from benchmarks.load import fresh_topics
from l2m.config.job import JobConfig, SourceConfig
from l2m.dev.demo import LogProducer
from l2m.rules.model import Rule
from l2m.runtime.runner import Runner


class RateProducer(LogProducer):
    """The demo's producer without malformed or late logs: every log is stamped with the wall
    clock when it is produced, round-robin over partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        super().__init__(bootstrap, topic, rate, partitions=partitions, seed=5,
                         malformed_ratio=0.0, late_ratio=0.0)


def partition_lag(progress: dict[str, Any]) -> dict[str, int]:
    source = progress["sources"][0]
    latest = json.loads(source["latestOffset"]) if source.get("latestOffset") else None
    end = json.loads(source["endOffset"]) if source.get("endOffset") else None
    if not latest or not end:
        return {}
    return {p: max(0, int(o) - int(end["partitions"].get(p, 0)))
            for p, o in latest["partitions"].items()}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def steady_config(bootstrap: str, prefix: str, partitions: int, workdir: Path,
                  trigger_ms: int) -> JobConfig:
    """A job on fresh topics that starts at the end of the logs topic: for scenarios that
    produce at a fixed rate while it runs."""
    topics = fresh_topics(bootstrap, prefix, partitions)
    suffix = topics.logs.rsplit("-", 1)[1]
    return JobConfig(kafka={"bootstrap.servers": bootstrap}, topics=topics,
                     checkpoint=str(workdir / f"ck-{suffix}"), counter_shards=4,
                     trigger_ms=trigger_ms, source=SourceConfig(starting_offsets="latest"))


def run_latency(spark: SparkSession, bootstrap: str, rules: list[Rule], workdir: Path,
                rate: float, seconds: float, partitions: int = 4, trigger_ms: int = 5000,
                warmup_s: float = 20.0) -> dict[str, Any]:
    cfg = steady_config(bootstrap, "lat", partitions, workdir, trigger_ms)
    topics = cfg.topics
    lags: list[dict[str, Any]] = []
    started_wall = time.time()

    def on_progress(name: str, progress: dict[str, Any]) -> None:
        if name == "metrics":
            lags.append({"t": round(time.time() - started_wall, 1),
                         "lag": partition_lag(progress),
                         "batch_ms": progress["durationMs"].get("triggerExecution", 0),
                         "rows": progress["numInputRows"]})

    runner = Runner(cfg, rules, out=None, on_progress=on_progress, spark=spark)  # type: ignore[arg-type]
    runner.start()
    producer = RateProducer(bootstrap, topics.logs, partitions, rate)
    producer.start()
    measure_from = time.time() + warmup_s
    runner.wait(duration=warmup_s + seconds, poll=0.5)
    producer.stopping.set()
    producer.join(timeout=30)
    latencies = collect_latencies(bootstrap, topics.metrics, since_ms=measure_from * 1000)
    return {
        "rate": rate, "seconds": seconds, "trigger_ms": trigger_ms, "produced": producer.sent,
        "samples": len(latencies),
        "latency_ms": {"p50": percentile(latencies, 0.5) if latencies else None,
                       "p99": percentile(latencies, 0.99) if latencies else None,
                       "max": max(latencies) if latencies else None},
        "p99_in_triggers": round(percentile(latencies, 0.99) / trigger_ms, 2)
        if latencies else None,
        "lag": lags,
        "median_batch_ms": statistics.median(x["batch_ms"] for x in lags) if lags else None,
        "cdf": sorted(latencies),
    }


def collect_latencies(bootstrap: str, topic: str, since_ms: float) -> list[float]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "log_level": "3"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[float] = []
    idle = 0
    while idle < 6:
        messages = consumer.consume(5000, timeout=0.5)
        idle = 0 if messages else idle + 1
        for msg in messages:
            if msg.error() is not None:
                continue
            sample = orjson.loads(msg.value())
            produced_at = msg.timestamp()[1]
            if sample["kind"] != "counter" or sample["rule"] == "l2m-input":
                continue
            if produced_at >= since_ms:
                out.append(float(produced_at - sample["timestamp"]))
    consumer.close()
    return out
