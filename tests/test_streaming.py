"""The streaming job against the real embedded broker: produce, process (availableNow), stop,
restart from the checkpoint, and check exact results — in the manner of Spark's StreamTest."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import orjson
import pytest

from l2m.backfill import run_backfill
from l2m.config import JobConfig
from l2m.generator import GeneratorConfig, LogGenerator
from l2m.rules import load_rules, load_text
from l2m.streaming import Job, start_job

from .kafka_helpers import (
    canonical,
    consume_all,
    fresh_topics,
    job_config,
    latest_samples,
    produce,
)

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent
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


COUNTER_RULES = """\
rules:
  - {id: all, name: logs_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
  - {id: bytes, name: bytes_total, kind: counter, query: "_exists_:http.bytes",
     aggregation: sum, field: http.bytes, group_by: [service]}
  - {id: lat, name: latency, kind: counter, query: "_exists_:http.duration_ms",
     aggregation: histogram, field: http.duration_ms, buckets: [10, 50, 250]}
"""


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


GAUGE_RULES = """\
rules:
  - {id: avg, name: latency_avg, kind: gauge, query: "*", aggregation: avg, field: ms}
"""


def log(ts: int, ms: float) -> bytes:
    return orjson.dumps({"@timestamp": ts, "ms": ms})


def test_late_data_within_grace_corrects_beyond_grace_is_dropped(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=1)
    rules, _ = load_text(GAUGE_RULES)
    cfg = job_config(t, tmp_path)
    w0 = T0
    # 1: window w0 gets 10 and 20
    produce(t.bootstrap, t.topics.logs, [log(w0 + 1000, 10), log(w0 + 2000, 20)], 1)
    run_once(spark, cfg, rules)
    # 2: event time moves 10 minutes on (watermark = w0 + 10 min − 20 min: w0 still open)
    produce(t.bootstrap, t.topics.logs, [log(w0 + 10 * 60_000, 1)], 1)
    run_once(spark, cfg, rules)
    # 3: a late log for w0, within the grace: the window is corrected and re-emitted
    produce(t.bootstrap, t.topics.logs, [log(w0 + 3000, 60)], 1)
    run_once(spark, cfg, rules)
    by_window = {s["timestamp"]: s["value"] for s in metrics(t)}
    assert by_window[w0] == 30.0
    # 4: event time moves 40 minutes on: w0 is past the watermark; a log for it is dropped
    produce(t.bootstrap, t.topics.logs, [log(w0 + 40 * 60_000, 2)], 1)
    run_once(spark, cfg, rules)
    produce(t.bootstrap, t.topics.logs, [log(w0 + 4000, 1000)], 1)
    job = run_once(spark, cfg, rules)
    assert job.counts is not None and job.counts.late.value == 1
    by_window = {s["timestamp"]: s["value"] for s in metrics(t)}
    assert by_window == {w0: 30.0, w0 + 10 * 60_000: 1.0, w0 + 40 * 60_000: 2.0}
    # the late log is counted where it lasts: l2m's own counter, in the checkpoint
    late = [s for s in metrics(t, without_input=False) if s["rule"] == "l2m-late"]
    assert [(s["name"], s["value"], s["timestamp"]) for s in late] == [
        ("l2m_late_logs_total", 1.0, w0 + 4000)]


def test_rules_changed_between_restarts(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    before = textwrap.dedent("""\
        rules:
          - {id: same, name: same_total, kind: counter, query: "*", aggregation: count}
          - {id: changed, name: changed_total, kind: counter, query: "service:web",
             aggregation: count}
          - {id: removed, name: removed_total, kind: counter, query: "*", aggregation: count}
          - {id: g, name: g_max, kind: gauge, query: "*", aggregation: max,
             field: http.bytes}
        """)
    after = textwrap.dedent("""\
        rules:
          - {id: added, name: added_total, kind: counter, query: "*", aggregation: count}
          - {id: same, name: same_total, kind: counter, query: "*", aggregation: count}
          - {id: changed, name: changed_total, kind: counter, query: "service:cart",
             aggregation: count}
          - {id: g2, name: g2_min, kind: gauge, query: "*", aggregation: min,
             field: http.bytes, group_by: [service]}
        """)
    rules_a, _ = load_text(before)
    rules_b, _ = load_text(after)
    first = generated(800, seed=21)
    second = generated(600, seed=22)
    cfg = job_config(t, tmp_path)
    produce(t.bootstrap, t.topics.logs, first, t.partitions)
    run_once(spark, cfg, rules_a)
    produce(t.bootstrap, t.topics.logs, second, t.partitions)
    run_once(spark, cfg, rules_b)  # both checkpoints load with a different rule set

    def service_count(lines: list[bytes], service: str) -> int:
        return sum(1 for x in lines if orjson.loads(x).get("service") == service)

    totals = {s["rule"]: s["value"] for s in metrics(t) if s["kind"] == "counter"}
    assert totals == {
        "same": float(len(first) + len(second)),
        "changed": float(service_count(first, "web") + service_count(second, "cart")),
        "removed": float(len(first)),
        "added": float(len(second)),
    }
    g2 = [s for s in metrics(t) if s["rule"] == "g2"]
    expected_g2 = [s for s in backfill_samples(spark, rules_b, second, tmp_path)
                   if s["rule"] == "g2"]
    assert canonical(g2) == canonical(expected_g2)
