"""The streaming job end to end against the real embedded broker: produce, process
(availableNow), stop, restart from the checkpoint, and check exact results. Stateful semantics
(late data, the watermark, rule changes) are tested without the broker, faster, in
tests/spark/test_harness.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from l2m.batch.backfill import BackfillSummary, run_backfill
from l2m.config.job import JobConfig, LimitsConfig
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.rules.loader import load_rules, load_text
from l2m.streaming.job import LOCAL_CHECKPOINT_CONF, STREAMING_CONF, Job, start_job, streaming_conf
from tests.support.kafka_helpers import (
    canonical,
    consume_all,
    fresh_topics,
    job_config,
    latest_samples,
    produce,
    rule_samples,
)
from tests.support.rulesets import COUNTER_RULES

ROOT = Path(__file__).resolve().parents[2]
T0 = 1795341600000  # 2026-11-22T10:00:00Z


def run_once(spark, cfg: JobConfig, rules) -> Job:
    """Process everything available; return the finished job."""
    job = start_job(spark, cfg, rules, once=True)
    job.query.awaitTermination(300)
    assert job.query.exception() is None, job.query.exception()
    job.close()
    return job


def backfill_summary(spark, rules, lines: list[bytes], tmp: Path) -> BackfillSummary:
    logs = tmp / "summary-input.jsonl"
    logs.write_bytes(b"\n".join(lines) + b"\n")
    return run_backfill(spark, rules, [str(logs)], tmp / "summary.jsonl", progress=False)


def backfill_samples(spark, rules, lines: list[bytes], tmp: Path, **options) -> list[dict]:
    logs = tmp / "backfill-input.jsonl"
    logs.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp / "backfill.jsonl"
    run_backfill(spark, rules, [str(logs)], out, progress=False, **options)
    return [json.loads(x) for x in out.read_text().splitlines()]


def metrics(t, *, without_input: bool = True) -> list[dict]:
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    return rule_samples(samples) if without_input else samples


def input_counts(t) -> dict[str, float]:
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    return {s["labels"]["status"]: s["value"] for s in samples if s["rule"] == "l2m-input"}


def generated(n: int, seed: int, **kw) -> list[bytes]:
    gen = LogGenerator(GeneratorConfig(seed=seed, rate_per_s=20, **kw))
    return list(gen.lines(n))


def test_streaming_equals_batch_and_dead_letters(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=3)
    rules = load_rules([ROOT / "rules"]).rules
    lines = generated(3000, seed=5, malformed_ratio=0.01)
    closers = produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    run_once(spark, job_config(t, tmp_path, max_records_per_task=400), rules)

    expected = backfill_samples(spark, rules, lines, tmp_path)
    got = metrics(t)
    assert len(expected) > 200
    assert canonical(got) == canonical(expected)

    malformed = [line for line in lines if not line.startswith(b"{") or not line.endswith(b"}")]
    dead = consume_all(t.bootstrap, t.topics.dead_letters)
    assert sorted(m.value() for m in dead) == sorted(malformed)
    reasons = {dict(m.headers())["l2m.error"].decode().split(":")[0] for m in dead}
    assert reasons <= {"invalid JSON", "not a JSON object (a list)"}
    assert all(dict(m.headers())["l2m.origin"].decode().startswith(t.topics.logs)
               for m in dead)
    assert input_counts(t) == {"ok": float(len(lines) - len(malformed)),
                               "malformed": float(len(malformed)), "blank": float(closers)}
    # The per-tenant view the driver writes after each batch: the logs each account's rules
    # matched, as backfill counts them (one clean run: the accumulators are exact).
    matched: dict[str, float] = {}
    counted = backfill_summary(spark, rules, lines, tmp_path)
    for rule in rules:
        if rule.enabled:
            account = rule.account or ""
            matched[account] = matched.get(account, 0) + counted.matches[rule.id]
    view = {s["labels"]["account"]: s["value"] for s in metrics(t, without_input=False)
            if s["name"] == "l2m_account_logs_matched_total"}
    assert view == matched


def test_restart_continues_counters_exactly(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    rules, _ = load_text(COUNTER_RULES)
    lines = generated(2000, seed=8)
    cfg = job_config(t, tmp_path)
    produce(t.bootstrap, t.topics.logs, lines[:1200], t.partitions)
    run_once(spark, cfg, rules)
    produce(t.bootstrap, t.topics.logs, lines[1200:], t.partitions)
    run_once(spark, cfg, rules)  # same checkpoint: continues, never recounts
    expected = backfill_samples(spark, rules, lines, tmp_path)
    assert canonical(metrics(t)) == canonical(expected)


@pytest.mark.parametrize(("checkpoint", "local"), [
    ("checkpoints/l2m", True), ("/var/lib/l2m", True), ("file:///var/lib/l2m", True),
    ("s3a://bucket/l2m", False), ("gs://bucket/l2m", False), ("hdfs://nn/l2m", False)])
def test_local_checkpoints_are_written_without_forking_readlink(checkpoint, local):
    conf = streaming_conf(checkpoint)
    assert conf == {**STREAMING_CONF, **(LOCAL_CHECKPOINT_CONF if local else {})}


def with_huge_service(lines: list[bytes], at: int, size: int = 1_100_000) -> list[bytes]:
    """``lines`` with the log at ``at`` grouped under a ``size``-character service (issue 20),
    with the fields every COUNTER_RULES rule reads."""
    doc = orjson.loads(lines[at])
    doc["service"] = "s" * size
    doc["http"] = {"bytes": 1234, "duration_ms": 42}
    return [*lines[:at], orjson.dumps(doc), *lines[at + 1:]]


def produce_big(t, lines: list[bytes]) -> int:
    """Like ``produce``, for records over librdkafka's default 1 MB message size."""
    producer = Producer({"bootstrap.servers": t.bootstrap, "message.max.bytes": 5_000_000,
                         "log_level": "3"})
    big = [line for line in lines if len(line) > 500_000]
    for line in big:
        producer.produce(t.topics.logs, value=line, partition=0)
    producer.flush(30)
    return produce(t.bootstrap, t.topics.logs, [x for x in lines if len(x) <= 500_000],
                   t.partitions)


def test_a_huge_group_by_value_is_cut_counted_and_the_stream_keeps_going(spark, broker,
                                                                           tmp_path):
    """Issue 20: a 1.1 MB group-by value among ordinary logs used to make a sample the metrics
    topic refused, retried forever. Now its label is cut to 1,024 characters, the cut counted,
    the run ends normally, and every series equals backfill's of the same logs."""
    t = fresh_topics(broker.bootstrap, partitions=2)
    rules, _ = load_text(COUNTER_RULES)
    lines = with_huge_service(generated(600, seed=41), at=300)
    closers = produce_big(t, lines)
    run_once(spark, job_config(t, tmp_path), rules)

    expected = backfill_samples(spark, rules, lines, tmp_path)
    got = metrics(t)
    assert canonical(got) == canonical(expected)
    cut = "s" * 1018 + "…(cut)"
    assert {s["rule"] for s in got if s["labels"].get("service") == cut} == {"all", "bytes"}
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    assert all(len(m) < 10_000 for m in map(orjson.dumps, samples))
    counted = {s["labels"]["rule"]: s["value"] for s in samples if s["rule"] == "l2m-label-cut"}
    assert counted == {"all": 1.0, "bytes": 1.0}
    assert input_counts(t) == {"ok": 600.0, "blank": float(closers)}


def test_a_sample_the_topic_refuses_is_dead_lettered_and_the_rest_delivered(spark, broker,
                                                                           tmp_path):
    """No sample can make the sink fail: with label values allowed up to 100,000 characters
    and a sink that takes messages of at most 20,000 bytes, the huge series' samples are
    refused at produce() — they go to the dead-letter topic, the batch commits, and every
    other series equals backfill's."""
    t = fresh_topics(broker.bootstrap, partitions=2)
    rules, _ = load_text(COUNTER_RULES)
    lines = with_huge_service(generated(400, seed=42), at=100)
    produce_big(t, lines)
    cfg = replace(job_config(t, tmp_path), limits=LimitsConfig(max_label_value_length=100_000),
                  sink_kafka={"message.max.bytes": "20000"})
    run_once(spark, cfg, rules)

    expected = backfill_samples(spark, rules, lines, tmp_path, max_label_value_length=100_000)
    big = [s for s in expected if len(s["labels"].get("service", "")) > 10_000]
    assert {s["rule"] for s in big} == {"all", "bytes"}
    assert canonical(metrics(t)) == canonical(s for s in expected if s not in big)
    letters = [m for m in consume_all(t.bootstrap, t.topics.dead_letters)
               if dict(m.headers()).get("l2m.kind") == b"sample"]
    assert len(letters) == 2
    for letter in letters:
        headers = dict(letter.headers())
        assert headers["l2m.origin"] == t.topics.metrics.encode()
        assert b"too large" in headers["l2m.error"].lower()
        assert int(headers["l2m.size"]) > 100_000
