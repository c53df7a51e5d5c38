"""Kafka producers for the tasks of a Python worker: cached (starting an idempotent producer
costs a broker round trip), fed without failing on a full local queue, forgotten after a
failure; and which errors refuse one message for good (:func:`refused`). Used by the sink
(:mod:`l2m.kafka.sink`) and the dead letters (:mod:`l2m.kafka.deadletters`).

Input: client settings and messages. Output: the worker's cached producer for those
settings; messages queued (delivery is each caller's to check, with a flush)."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

# Producers outlive tasks: Spark reuses Python workers, and starting an idempotent producer
# costs a broker round trip (InitProducerId; ~0.5 s on tansu) that would otherwise be paid by
# every task of every micro-batch. Each task still flushes and checks its own deliveries.
_PRODUCERS: dict[str, Any] = {}


def cached_producer(config: dict[str, Any], topic: str | None = None) -> Any:
    """A producer for ``config``, shared by the tasks a Python worker runs one after another.
    A new one starts fetching ``topic``'s metadata at once (:func:`_warm`)."""
    from confluent_kafka import Producer

    key = repr(sorted(config.items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = Producer(config)
        if topic is not None:
            threading.Thread(target=_warm, args=(producer, topic), daemon=True,
                             name="l2m-producer-warm").start()
    return producer


def _warm(producer: Any, topic: str) -> None:
    """Ask for ``topic``'s metadata now, not at the first message. A new idempotent producer
    sends nothing before its producer id and its topic's leaders are known; librdkafka asks
    for a topic's leaders only when a message for it is queued, and then a message queued
    0.1–0.5 s after the producer's creation was delivered 1.0 s after it on tansu, against
    0.5 s with the metadata asked for at creation. The first micro-batch's writers queue their
    first samples about 0.5 s after creating the producer: its flush took 0.55 s, later ones
    1 ms. Errors are the first message's to report, not this thread's."""
    with contextlib.suppress(Exception):
        producer.list_topics(topic=topic, timeout=10)


def produce(producer: Any, topic: str, **message: Any) -> None:
    """Queue one message, waiting while the producer's local queue is full (deliveries
    drain it) instead of failing the task."""
    while True:
        try:
            producer.produce(topic, **message)
            return
        except BufferError:
            producer.poll(0.1)


def drop_producer(producer: Any) -> None:
    """Forget a producer after a failure, so the next task starts from a clean one."""
    for key, cached in list(_PRODUCERS.items()):
        if cached is producer:
            del _PRODUCERS[key]


# Errors about a message itself, not about the cluster's state: sending it again cannot help.
# MSG_SIZE_TOO_LARGE (10: over the producer's message.max.bytes at produce(), or over the
# topic's max.message.bytes in the delivery report), RECORD_LIST_TOO_LARGE (18),
# INVALID_MSG_SIZE (4), INVALID_RECORD (87: the broker's validation refused the record).
REFUSED_CODES = frozenset({10, 18, 4, 87})


def refused(error: Any) -> bool:
    """Whether a Kafka error (a ``KafkaError``) refuses its message for good."""
    return error is not None and error.code() in REFUSED_CODES

