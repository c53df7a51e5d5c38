"""Load generator for the benchmarks: realistic JSON logs (300–600 bytes) on a configurable
number of partitions, with partition skew (uniform, one hot partition, Zipf), key skew (a few
services carrying most logs), late records, as a pre-loaded backlog (parallel producer
processes) or at a fixed rate. The skews (:class:`Skew`, :func:`partition_counts`) are
``l2m load``'s too, so they live in :mod:`l2m.dev.skew` (a wheel ships no benchmarks/)."""

from __future__ import annotations

import multiprocessing as mp
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Producer

from l2m.config.job import Topics
from l2m.dev.broker import create_topics
from l2m.dev.generator import SERVICES, GeneratorConfig, LogGenerator
from l2m.dev.skew import Skew, partition_counts

__all__ = ["LoadSpec", "Skew", "close_partitions", "fresh_topics", "partition_counts",
           "preload"]


@dataclass(frozen=True)
class LoadSpec:
    bootstrap: str
    topic: str
    partitions: int
    records: int
    skew: Skew = field(default_factory=Skew)
    key_skew: float = 0.0  # > 0: services drawn Zipf(key_skew) instead of uniformly
    late_ratio: float = 0.0
    malformed_ratio: float = 0.0
    start_ms: int = 1_795_341_600_000
    seed: int = 11
    accounts: int = 0  # > 0: logs spread over this many tenant accounts (GeneratorConfig)


def _produce_slice(spec: LoadSpec, worker: int, workers: int, counts: list[int]) -> int:
    """Produce this worker's share of every partition's records."""
    gen = LogGenerator(GeneratorConfig(seed=spec.seed + worker, start_ms=spec.start_ms,
                                       rate_per_s=2000, late_ratio=spec.late_ratio,
                                       malformed_ratio=spec.malformed_ratio,
                                       accounts=spec.accounts))
    if spec.key_skew > 0:
        services = list(SERVICES)
        weights = [1.0 / (k ** spec.key_skew) for k in range(1, len(services) + 1)]
        rng = random.Random(spec.seed * 31 + worker)
        original = gen._request

        def skewed_request(ts: int) -> dict:
            doc = original(ts)
            doc["service"] = rng.choices(services, weights)[0]
            return doc

        gen._request = skewed_request  # type: ignore[method-assign]
    return produce_share(spec.bootstrap, spec.topic, counts, worker, workers, gen.next_line)


def produce_share(bootstrap: str, topic: str, counts: list[int], worker: int, workers: int,
                  next_line: Callable[[], bytes]) -> int:
    """Worker ``worker`` of ``workers``' share of each partition's ``counts`` records, each
    ``next_line()``, produced to ``topic`` (a full queue waited out); how many were sent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10_000, "queue.buffering.max.messages": 500_000,
                         "log_level": "3"})
    sent = 0
    for partition, count in enumerate(counts):
        mine = count // workers + (1 if worker < count % workers else 0)
        for _ in range(mine):
            line = next_line()
            while True:
                try:
                    producer.produce(topic, value=line, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
            if sent % 20_000 == 0:
                producer.poll(0)
    producer.flush(300)
    return sent


def preload(spec: LoadSpec, workers: int = 2) -> float:
    """Produce the backlog with ``workers`` processes, then close every partition with a
    one-record batch (tansu's end offset only covers complete batches). Returns seconds."""
    counts = partition_counts(spec.records, spec.skew.weights(spec.partitions))
    started = time.monotonic()
    if workers <= 1:
        _produce_slice(spec, 0, 1, counts)
    else:
        ctx = mp.get_context("spawn")
        with ctx.Pool(workers) as pool:
            pool.starmap(_produce_slice, [(spec, w, workers, counts) for w in range(workers)])
    close_partitions(spec.bootstrap, spec.topic, spec.partitions)
    return time.monotonic() - started


def close_partitions(bootstrap: str, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": "3"})
    for p in range(partitions):
        producer.produce(topic, value=b"", partition=p)
        producer.flush(30)


def fresh_topics(bootstrap: str, prefix: str, partitions: int) -> Topics:
    """Create a scenario's own logs (``partitions``), metrics and dead-letter topics."""
    suffix = uuid.uuid4().hex[:6]
    topics = Topics(logs=f"{prefix}-logs-{suffix}", metrics=f"{prefix}-metrics-{suffix}",
                    dead_letters=f"{prefix}-dead-{suffix}")
    create_topics(bootstrap, [topics.logs], partitions=partitions)
    create_topics(bootstrap, [topics.metrics, topics.dead_letters])
    return topics
