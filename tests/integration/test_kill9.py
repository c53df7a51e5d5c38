"""Crash-safe restarts, in the spirit of Spark's ``runStressTest`` and Kafka's EOS system tests:
produce logs in chunks while ``l2m run`` (a real subprocess against the real broker) is killed
with SIGKILL — the whole process group: Python driver, JVM, Python workers — at random
moments (starting, planning, reading, state commit, sink, commit), restarted on the same
checkpoint each time, and finally finished with ``--once``. The last sample of every counter
and gauge series must equal ``l2m backfill`` over the same logs: nothing lost, nothing
counted twice. Then ``l2m deliver`` sends the metrics topic — every replay's records
included — to a real Prometheus: ``increase()`` over every counter equals backfill (no false
reset across the kills), every published gauge window holds backfill's value, and nothing is
refused, by l2m's count or Prometheus's own.

Bounded (about two minutes); the seed is printed, and ``L2M_STRESS_SEED=<seed>`` replays a
run's choices (chunk sizes and kill moments; the machine's timing still varies)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Producer

from l2m.config.loader import load_config
from l2m.remotewrite.outbox import summary
from l2m.rules.loader import load_rules
from l2m.runtime.deliver import deliver
from tests.integration.test_deliver import _increase, _rejected, _stored
from tests.integration.test_prometheus import promql
from tests.integration.test_streaming import backfill_samples, generated
from tests.support.kafka_helpers import (
    canonical,
    consume_all,
    fresh_topics,
    job_yaml,
    latest_samples,
    produce,
    rule_samples,
)

ROOT = Path(__file__).resolve().parents[2]
KILLS = 10
# Counters (count, exact sum, histogram) and gauges (avg, max) with labels: every kind of
# state. Few rules keep each restart's first batch short, so the kills spread over batches.
RULES = """\
rules:
  - {id: requests, name: requests_total, kind: counter, query: "*", aggregation: count,
     group_by: [service, http.status]}
  - {id: bytes, name: bytes_total, kind: counter, query: "_exists_:http.bytes",
     aggregation: sum, field: http.bytes, group_by: [service]}
  - {id: latency, name: latency_ms, kind: counter, query: "_exists_:http.duration_ms",
     aggregation: histogram, field: http.duration_ms, buckets: [10, 50, 250, 1000]}
  - {id: latency-avg, name: latency_avg_ms, kind: gauge, query: "service:*",
     aggregation: avg, field: http.duration_ms, group_by: [service]}
  - {id: bytes-max, name: bytes_max, kind: gauge, query: "level:error OR http.status:[500 TO 599]",
     aggregation: max, field: http.bytes}
"""


def start(config: Path, log: Path, once: bool = False) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "l2m.cli", "run", "--config", str(config)]
    with log.open("ab") as out:
        return subprocess.Popen(args + (["--once"] if once else []), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def last_batch(folder: Path) -> int:
    """The highest batch id with a file in a checkpoint folder (offsets or commits), or -1."""
    if not folder.is_dir():
        return -1
    return max((int(p.name) for p in folder.iterdir() if p.name.isdigit()), default=-1)


def test_kill_9_at_random_moments_loses_and_double_counts_nothing(spark, broker, prometheus,
                                                                  tmp_path):
    seed = int(os.environ.get("L2M_STRESS_SEED", random.randrange(1 << 30)))
    print(f"\nkill -9 stress test: seed {seed} (replay with L2M_STRESS_SEED={seed})")
    rng = random.Random(seed)
    t = fresh_topics(broker.bootstrap, partitions=3)
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(RULES)
    rules = load_rules([rule_file]).rules
    # Dated from 10 minutes ago (200 s of logs): recent enough for Prometheus to take.
    start_ms = int(time.time() * 1000) - 600_000
    lines = generated(4000, seed=seed % 1000, malformed_ratio=0.01, start_ms=start_ms)
    config = job_yaml(t, tmp_path, f"rules: [{rule_file}]", "trigger: 1 second",
                      "source: {max_records_per_trigger: 400, max_records_per_task: 200}",
                      f'remote_write: {{poll: 200 ms, endpoints: [{{url: "{prometheus}/api/v1/'
                      'write", name: prom, tenant_header: null}]}')
    log = tmp_path / "runs.log"
    cuts = sorted(rng.sample(range(1, len(lines)), KILLS - 1))
    chunks = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
    moments: list[str] = []
    in_flight = 0
    checkpoint = tmp_path / "checkpoint" / "metrics"
    for chunk in chunks:
        # Small producer batches: tansu shows a reader only up to the last batch's first
        # record, so each chunk is visible to the running job but for a few records.
        producer = Producer({"bootstrap.servers": t.bootstrap, "log_level": "3",
                             "batch.num.messages": 20, "linger.ms": 0})
        for i, line in enumerate(chunk):
            producer.produce(t.topics.logs, value=line, partition=i % t.partitions)
        producer.flush(30)
        before = (last_batch(checkpoint / "offsets"), last_batch(checkpoint / "commits"))
        job = start(config, log)
        # Here a start takes about 13 s (JVM, session, query) and a restart's first batch
        # (often the replay of the batch the last kill cut) another 11-15 s (Python workers,
        # state load): most moments fall inside that batch — reading, state commit, sink,
        # commit — some into start-up and planning, some after a commit.
        delay = rng.uniform(1.0, 12.0) if rng.random() < 0.3 else rng.uniform(12.0, 32.0)
        time.sleep(delay)
        planned, committed = last_batch(checkpoint / "offsets"), last_batch(checkpoint / "commits")
        if (planned, committed) == before and planned > committed:
            phase = f"start-up or replay of batch {planned}"
        elif (planned, committed) == before:
            phase = "start-up"
        elif planned > committed:
            phase = f"batch {planned} running"
        else:
            phase = f"after batch {committed} committed"
        moment = f"{delay:.1f}s ({phase})"
        exited = job.poll()
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        assert exited is None, f"l2m run exited by itself ({exited}) before the kill:\n" \
                               + log.read_text()[-3000:]
        in_flight += planned > committed
        moments.append(moment)
    print(f"killed {len(moments)} times ({in_flight} with a batch planned but not committed):"
          f" {', '.join(moments)}")
    assert len(moments) >= KILLS

    produce(t.bootstrap, t.topics.logs, [], t.partitions)  # closers: every record visible
    final = start(config, log, once=True)
    assert final.wait(300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]

    expected = backfill_samples(spark, rules, lines, tmp_path)
    got = rule_samples(latest_samples(consume_all(t.bootstrap, t.topics.metrics)))
    kinds = {s["kind"] for s in expected}
    print(f"compared {len(expected)} samples ({', '.join(sorted(kinds))}) with backfill")
    assert kinds == {"counter", "gauge"}
    assert canonical(got) == canonical(expected)

    tally = deliver(load_config(config), once=True, once_idle_s=1.0)["prom"]
    assert tally.refused == {}
    counters = [s for s in expected if s["kind"] == "counter"]
    for sample in counters:
        # At the series' own last point: increase() extrapolates past a range's last sample.
        at = _stored(prometheus, sample)[-1][0] / 1000
        assert _increase(prometheus, sample, at) == [sample["value"]], sample
    windows = {(s["name"], tuple(sorted(s["labels"].items())), s["timestamp"]): s["value"]
               for s in expected if s["kind"] == "gauge"}
    published = {(r["metric"]["__name__"], tuple(sorted((k, v) for k, v in r["metric"].items()
                                                        if k != "__name__")), round(
                  float(t_) * 1000)): float(v)
                 for name in {k[0] for k in windows}
                 for r in promql(prometheus, f"{name}[1h]") for t_, v in r["values"]}
    assert published and {k: windows[k] for k in published} == published
    assert _rejected(prometheus) == 0
    print(f"delivered: {summary(tally)}; {len(published)} of {len(windows)} gauge windows "
          "published")
