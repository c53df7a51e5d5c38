"""Recovery: restart the job on a checkpoint holding many live counter series and
measure the time to the first sample and to caught up with the logs that arrived meanwhile."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import SparkSession

from benchmarks.load import close_partitions, fresh_topics
from l2m.config.job import JobConfig, SourceConfig
from l2m.rules.loader import load_text
from l2m.streaming.job import start_job

RULES = """\
rules:
  - {id: per-user, name: user_requests_total, kind: counter, query: "*", aggregation: count,
     group_by: [user]}
"""


def _produce(bootstrap: str, topic: str, partitions: int, users: range, start_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10_000, "log_level": "3"})
    for i in users:
        value = orjson.dumps({"@timestamp": start_ms + i, "user": f"u{i}", "service": "web",
                              "message": "request completed"})
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20_000 == 0:
            producer.poll(0)
    producer.flush(300)
    close_partitions(bootstrap, topic, partitions)


def _run_counters(spark: SparkSession, cfg: JobConfig, rules: list) -> Any:
    return start_job(spark, cfg, rules, once=True).query


def first_sample_after(bootstrap: str, topic: str, since_ms: float) -> float | None:
    """Kafka timestamp (ms) of the first sample produced at or after ``since_ms``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "log_level": "3"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    first = None
    idle = 0
    while idle < 6:
        messages = consumer.consume(10_000, timeout=0.5)
        idle = 0 if messages else idle + 1
        for msg in messages:
            if msg.error() is None:
                ts = msg.timestamp()[1]
                if ts >= since_ms and (first is None or ts < first):
                    first = ts
    consumer.close()
    return first


def run_recovery(spark: SparkSession, bootstrap: str, workdir: Path, series: int,
                 new_logs: int, partitions: int = 4) -> dict[str, Any]:
    rules, _ = load_text(RULES)
    topics = fresh_topics(bootstrap, "rec", partitions)
    suffix = topics.logs.rsplit("-", 1)[1]
    cfg = JobConfig(kafka={"bootstrap.servers": bootstrap}, topics=topics,
                    checkpoint=str(workdir / f"ck-{suffix}"), counter_shards=16,
                    source=SourceConfig(max_records_per_trigger=250_000,
                                        max_records_per_task=125_000))
    start_ms = 1_795_341_600_000
    _produce(bootstrap, topics.logs, partitions, range(series), start_ms)
    started = time.monotonic()
    query = _run_counters(spark, cfg, rules)
    query.awaitTermination()
    load_s = time.monotonic() - started
    state_rows = sum(s["numRowsTotal"] for s in query.lastProgress["stateOperators"])
    # Logs arriving while the job is down, touching existing series.
    _produce(bootstrap, topics.logs, partitions, range(0, series, max(1, series // new_logs)),
             start_ms + series)
    restart_wall = time.time() * 1000
    started = time.monotonic()
    query = _run_counters(spark, cfg, rules)
    query.awaitTermination()
    caught_up_s = time.monotonic() - started
    first = first_sample_after(bootstrap, topics.metrics, restart_wall)
    return {
        "series": series, "state_keys": state_rows, "initial_load_s": round(load_s, 1),
        "new_logs": len(range(0, series, max(1, series // new_logs))),
        "first_sample_s": round((first - restart_wall) / 1000, 2) if first else None,
        "caught_up_s": round(caught_up_s, 2),
    }
