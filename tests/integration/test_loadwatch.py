"""l2m load's metrics-topic watcher against the embedded broker: sample records produced as
l2m writes them (Kafka time and the l2m-time header = the micro-batch's time), read from the
look-back before the load's start, with an injected clock — exact latencies, the input
counter's baseline from before the start, the lag against a timeline."""

from __future__ import annotations

import time
import uuid

import orjson
from confluent_kafka import Producer

from l2m.dev.broker import create_topics
from l2m.dev.loadwatch import INPUT_METRIC, INPUT_RULE_ID, LagPoint, LatencyStats, MetricsWatcher
from l2m.engine.samples import NEW, record_headers


def _sample(ts: int, rule: str, name: str, value: float, labels: dict[str, str]) -> bytes:
    return orjson.dumps({"name": name, "kind": "counter", "labels": labels, "value": value,
                         "timestamp": ts, "account": None if rule.startswith("l2m-") else "a",
                         "rule": rule})


def test_watcher_reads_baseline_and_latencies(broker: object) -> None:
    bootstrap = broker.bootstrap  # type: ignore[attr-defined]
    topic = f"metrics-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, [topic], partitions=2)
    start = int(time.time() * 1000) - 20_000  # the load "began" 20 s ago
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": "3"})

    def put(value: bytes, batch_ms: int, partition: int, mark: str | None = None) -> None:
        producer.produce(topic, value=value, partition=partition, timestamp=batch_ms,
                         headers=record_headers(mark, batch_ms))

    # Before the load: older than the look-back (ignored), then the baseline.
    put(_sample(start - 200_000, INPUT_RULE_ID, INPUT_METRIC, 10, {"status": "ok"}),
        start - 200_000, 0)
    put(_sample(start - 6_000, INPUT_RULE_ID, INPUT_METRIC, 1_000, {"status": "ok"}),
        start - 5_000, 0)
    put(_sample(start - 6_000, "errors", "errors_total", 3, {}), start - 5_000, 1)
    # During the load: two batches.
    put(_sample(start + 1_200, "errors", "errors_total", 4, {}), start + 2_000, 1)
    put(_sample(start + 1_500, "lat", "lat_count", 9, {}), start + 2_000, 1)
    put(_sample(start + 1_500, INPUT_RULE_ID, INPUT_METRIC, 1_400, {"status": "ok"}),
        start + 2_000, 0)
    put(_sample(start + 1_500, INPUT_RULE_ID, INPUT_METRIC, 5, {"status": "malformed"}),
        start + 2_000, 0, NEW)
    put(b"\x00 not a sample", start + 2_000, 1)
    put(_sample(start + 3_000, INPUT_RULE_ID, INPUT_METRIC, 2_000, {"status": "ok"}),
        start + 4_000, 0)
    assert producer.flush(30) == 0

    arrival = start / 1000 + 4.5  # every record "arrives" 4.5 s after the start
    watcher = MetricsWatcher({"bootstrap.servers": bootstrap}, topic, start,
                             clock=lambda: arrival).start()
    try:
        assert watcher.wait_processed(1_005, 30)
    finally:
        result = watcher.stop()
    assert result.error is None
    assert (result.records, result.not_samples, result.samples, result.before_start) == \
        (6, 1, 2, 0)
    assert result.latency == LatencyStats(2, 3000, 3300, 3300, 3300, 3000)
    assert result.processed == [(arrival, 1_005)]
    assert result.baseline_exact is True
    timeline = [(start / 1000, 0), (start / 1000 + 5.0, 1_000)]
    assert result.lag(timeline) == [LagPoint(4.5, 900, 1_005, -105, 0.0)]
