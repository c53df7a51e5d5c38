"""The streaming job end to end against the real embedded broker: produce, process
(availableNow), stop, restart from the checkpoint, and check exact results. Stateful semantics
(late data, the watermark, rule changes) are tested without the broker, faster, in
tests/spark/test_harness.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from l2m.batch.backfill import run_backfill
from l2m.config.job import JobConfig
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
)
from tests.support.rulesets import COUNTER_RULES

ROOT = Path(__file__).resolve().parents[2]
T0 = 1795341600000  # 2026-11-22T10:00:00Z


def run_once(spark, cfg: JobConfig, rules) -> Job:
    """Process everything available; return the finished job."""
    job = start_job(spark, cfg, rules, once=True)
    job.query.awaitTermination(300)
    assert job.query.exception() is None, job.query.exception()
    return job


def backfill_samples(spark, rules, lines: list[bytes], tmp: Path) -> list[dict]:
    logs = tmp / "backfill-input.jsonl"
    logs.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp / "backfill.jsonl"
    run_backfill(spark, rules, [str(logs)], out, progress=False)
    return [json.loads(x) for x in out.read_text().splitlines()]


def metrics(t, *, without_input: bool = True) -> list[dict]:
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    return [s for s in samples if not (without_input and s["rule"] in ("l2m-input", "l2m-late"))]


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
