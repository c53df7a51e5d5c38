"""Helpers for integration tests against the real embedded broker (never a mock)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from l2m.config.job import JobConfig, SourceConfig, Topics
from l2m.dev.broker import create_topics


@dataclass
class TestTopics:
    bootstrap: str
    topics: Topics
    partitions: int


def fresh_topics(bootstrap: str, partitions: int = 3) -> TestTopics:
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(logs=f"logs-{suffix}", metrics=f"metrics-{suffix}",
                    dead_letters=f"dead-{suffix}")
    create_topics(bootstrap, [topics.logs], partitions=partitions)
    create_topics(bootstrap, [topics.metrics, topics.dead_letters], partitions=1)
    return TestTopics(bootstrap, topics, partitions)


def produce(bootstrap: str, topic: str, lines: Iterable[bytes | str], partitions: int,
            partition_of: Any = None) -> int:
    """Produce ``lines`` round-robin (or by ``partition_of(i)``), then one single-record batch
    per partition. Returns how many closing records were added (empty messages: status
    ``blank``, ignored by every rule). The closers date from before l2m checked tansu's end
    offsets (it reports them only up to the newest batch's base, docs/streaming.md "The
    topic's end"); l2m no longer needs them, tests that count ``blank`` still expect them,
    and tests/integration/test_end_offsets.py produces without them."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": "3"})
    for i, line in enumerate(lines):
        value = line.encode() if isinstance(line, str) else line
        part = partition_of(i) if partition_of else i % partitions
        producer.produce(topic, value=value, partition=part)
    producer.flush(30)
    for part in range(partitions):
        producer.produce(topic, value=CLOSER, partition=part)
        producer.flush(30)
    return partitions


# An empty message: parsed as "blank", matched by no rule, sent to no dead-letter topic.
CLOSER = b""


def reader(bootstrap: str, topic: str, partitions: int = 1, **settings: Any) -> Consumer:
    """A consumer of its own group, reading ``topic``'s first ``partitions`` partitions from
    their start (``settings``: more client settings)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "log_level": "3", **settings})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer


def consume_all(bootstrap: str, topic: str, partitions: int = 1,
                idle: float = 2.0) -> list[Any]:
    """Every record of ``topic``'s first ``partitions`` partitions, in offset order per
    partition: up to each partition's end as the broker reports it when the read starts, then
    what the consumer already holds. Tansu reports the end as the first offset of the newest
    record batch + 1 (tests/integration/test_end_offsets.py), and that record arrives with
    its whole batch. ``idle``: the longest it waits for a record short of that end. (It used to
    read until ``idle`` seconds passed without a record: two seconds a call.)"""
    consumer = reader(bootstrap, topic, partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)}
    read = dict.fromkeys(ends, 0)  # the next offset per partition
    out = []
    last = time.monotonic()
    while time.monotonic() - last < idle:
        messages = consumer.consume(1000, timeout=0.3)
        for msg in messages:
            if msg.error() is None:
                out.append(msg)
                read[msg.partition()] = msg.offset() + 1
                last = time.monotonic()
        if not messages and all(read[p] >= end for p, end in ends.items()):
            break
    consumer.close()
    return out


def latest_samples(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """The last sample per Kafka key, as a downstream store would keep it."""
    latest: dict[bytes, dict[str, Any]] = {}
    for msg in messages:
        latest[msg.key()] = orjson.loads(msg.value())
    return list(latest.values())


def rule_samples(samples: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of the rules under test: without l2m's own (input statuses, late logs,
    cuts, refusals, the per-account view — rule ids ``l2m-…``, which backfill never writes)."""
    return [s for s in samples if not s["rule"].startswith("l2m-")]


def canonical(samples: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Samples as sorted tuples of every field, for exact comparison."""
    return sorted((s["rule"], s["name"], tuple(sorted(s["labels"].items())), s["timestamp"],
                   _shown(s), s["kind"], s["account"]) for s in samples)


def _shown(sample: dict[str, Any]) -> Any:
    """A sample's value, or its native histogram (format 2) as canonical JSON: every field
    compared, and comparable with the floats of other samples' tuples."""
    if "value" in sample:
        return (0, sample["value"], b"")
    return (1, 0, orjson.dumps(sample["histogram"], option=orjson.OPT_SORT_KEYS))


def job_config(t: TestTopics, tmp: Path, **source: Any) -> JobConfig:
    return JobConfig(kafka={"bootstrap.servers": t.bootstrap}, topics=t.topics,
                     checkpoint=str(tmp / "checkpoint"), counter_shards=2,
                     source=SourceConfig(poll_timeout_ms=20_000, **source))


EXAMPLE_RULES = Path(__file__).resolve().parents[2] / "rules"


def job_yaml(t: TestTopics, folder: Path, *extra: str) -> Path:
    """A job configuration file for ``l2m run`` against ``t``'s topics (the example rules,
    two shards, ``local[2]``), with ``extra`` YAML lines (``"trigger: 1 second"``; a
    ``rules:`` line replaces the example rules)."""
    config = folder / "job.yaml"
    rules = [] if any(x.startswith("rules:") for x in extra) else [f"rules: [{EXAMPLE_RULES}]"]
    config.write_text("\n".join([
        f'kafka: {{bootstrap.servers: "{t.bootstrap}"}}',
        f"topics: {{logs: {t.topics.logs}, metrics: {t.topics.metrics}, "
        f"dead_letters: {t.topics.dead_letters}}}",
        *rules,
        "checkpoint: checkpoint",
        "counter_shards: 2",
        'spark: {master: "local[2]", spark.sql.shuffle.partitions: 2}',
        *extra,
    ]) + "\n")
    return config
