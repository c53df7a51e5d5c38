"""Poison-proof input: no log can fail or stall the job, in streaming or backfill. Each hostile
record is either processed or counted (and, in streaming, dead-lettered with its reason); the
good logs around it are counted exactly."""

from __future__ import annotations

import time

import orjson
from confluent_kafka import Producer

from tests.integration.test_streaming import run_once
from tests.support.kafka_helpers import (
    CLOSER,
    consume_all,
    fresh_topics,
    job_config,
    latest_samples,
)
from tests.support.poison import HOSTILE_TIMES, MALFORMED_LINES, PROCESSED, RULES


def test_streaming_survives_every_hostile_record_and_counts_good_logs_exactly(
        spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    # Event times near the clock: logs dated by their Kafka time (now) move the watermark.
    base = (int(time.time() * 1000) // 60_000 - 10) * 60_000
    good = [orjson.dumps({"@timestamp": base + i, "svc": "ok", "b": i}) for i in range(1, 101)]
    huge_malformed = b"{" + b"x" * (5 * 1024 * 1024)  # 5 MB, not JSON
    future = orjson.dumps({"@timestamp": int(time.time() * 1000) + 86_400_000, "svc": "ok",
                           "b": 1})
    hostile = ([r for r, _ in HOSTILE_TIMES + MALFORMED_LINES + PROCESSED]
               + [huge_malformed, future, None])  # None: a tombstone
    producer = Producer({"bootstrap.servers": t.bootstrap, "message.max.bytes": 16 << 20,
                         "log_level": "3"})
    for i, record in enumerate(good[:50] + hostile + good[50:]):
        producer.produce(t.topics.logs, value=record, partition=i % 2)
    producer.flush(30)
    for p in range(2):
        producer.produce(t.topics.logs, value=CLOSER, partition=p)
        producer.flush(30)
    cfg = job_config(t, tmp_path)
    run_once(spark, cfg, RULES)
    # a late log for the first window (within the 20-minute grace): the future-dated log did
    # not move the watermark a day ahead, so the window is still open
    producer.produce(t.topics.logs,
                     value=orjson.dumps({"@timestamp": base + 5, "svc": "late", "b": 10**6}),
                     partition=0)
    producer.flush(30)
    for p in range(2):
        producer.produce(t.topics.logs, value=CLOSER, partition=p)
        producer.flush(30)
    run_once(spark, cfg, RULES)

    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    inputs = {s["labels"]["status"]: s["value"] for s in samples if s["rule"] == "l2m-input"}
    assert inputs == {"ok": 100.0 + len(PROCESSED) + 1,
                      "no_timestamp": float(len(HOSTILE_TIMES)),  # dated by Kafka time
                      "malformed": float(len(MALFORMED_LINES) + 1),
                      "future": 1.0, "blank": 5.0}  # the tombstone and 4 closers
    by = {(s["rule"], tuple(s["labels"].items()), s["timestamp"]): s["value"] for s in samples}
    assert by[("n", (("svc", "ok"),), base + 100)] == 100.0
    assert by[("g", (), base)] == 10.0**6  # the late log corrected the open window
    assert not [s for s in samples if s["rule"] == "l2m-late"]

    dead = consume_all(t.bootstrap, t.topics.dead_letters)
    assert len(dead) == len(MALFORMED_LINES) + 2
    headers = [dict(m.headers()) for m in dead]
    reasons = sorted(h["l2m.error"].decode().split(":")[0] for h in headers)
    assert reasons.count("future") == 1
    assert reasons.count("invalid JSON") == len(MALFORMED_LINES) + 1
    big = [(m, h) for m, h in zip(dead, headers, strict=True) if h.get("l2m.truncated")]
    assert len(big) == 1
    message, header = big[0]
    assert int(header["l2m.size"]) == len(huge_malformed)
    assert message.value() == huge_malformed[: len(message.value())]
    assert len(message.value()) < len(huge_malformed)
