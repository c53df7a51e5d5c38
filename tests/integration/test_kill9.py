"""Crash-safe restarts, in the spirit of Spark's ``runStressTest`` and Kafka's EOS system tests:
produce logs in chunks while ``l2m run`` (a real subprocess against the real broker) is killed
with SIGKILL — the whole process group: Python driver, JVM, Python workers — at random
moments (starting, planning, reading, state commit, sink, commit), restarted on the same
checkpoint each time, and finally finished with ``--once``. Meanwhile the rules change —
a rule added, a query changed, a group-by changed, a rule removed — some while the job runs
(live), some while it is down. The last sample of every counter and gauge series must equal
``l2m backfill`` run segment by segment, each micro-batch's logs with the rule set its offset
log entry names (a replayed batch keeps the rules it was first planned with): nothing lost,
nothing counted twice. Then ``l2m deliver`` sends the metrics topic — every replay's records
included — to a real Prometheus: ``increase()`` over every counter equals backfill (no false
reset across the kills), every published gauge window holds backfill's value, and nothing is
refused, by l2m's count or Prometheus's own.

Each run's kill moment is drawn from three kinds and follows the checkpoint, not a fixed
clock, so a slower machine stretches the moments without changing their kind: during start-up
(a random part of the shortest start seen), inside the run's first batch (a random part of
the longest batch seen, after it is planned — or, on a restart that replays the batch the last
kill cut, after about a start: the replay itself is cut), or within a second of its first
commit (planning the next batch; the first run is killed so, and times the start and the
batch for the others). Bounded: ten runs, each killed at most about 2 minutes after its
start, then one ``--once`` run; the seed is printed, and ``L2M_STRESS_SEED=<seed>`` replays
a run's choices (chunk sizes, kinds and fractions of the moments; the machine's timing still
varies)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from l2m.config.loader import load_config
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.remotewrite.outbox import summary
from l2m.rules.loader import load_rules
from l2m.rules.model import Rule
from l2m.rules.snapshot import snapshot
from l2m.runtime.deliver import deliver
from l2m.state.counters import signature
from l2m.streaming.rulesets import ruleset_of, ruleset_version
from tests.integration.test_deliver import _increase, _rejected, _stored
from tests.integration.test_prometheus import promql
from tests.integration.test_streaming import backfill_samples
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
# Where each run is killed: during start-up, inside its first batch, or just after a commit.
KINDS = ("start-up", "batch", "commit")
LIMIT_S = 120.0  # the longest a run waits for its batch to be planned or committed
# Counters (count, exact sum, histogram) and gauges (avg, max) with labels: every kind of
# state. Few rules keep each restart's first batch short, so the kills spread over batches.
GAUGES = """\
  - {id: latency-avg, name: latency_avg_ms, kind: gauge, query: "service:*",
     aggregation: avg, field: http.duration_ms, group_by: [service]}
  - {id: bytes-max, name: bytes_max, kind: gauge, query: "level:error OR http.status:[500 TO 599]",
     aggregation: max, field: http.bytes}
"""
COUNTERS = {
    "requests": """\
  - {id: requests, name: requests_total, kind: counter, query: "*", aggregation: count,
     group_by: [service, http.status]}
""",
    "bytes": """\
  - {id: bytes, name: bytes_total, kind: counter, query: "_exists_:http.bytes",
     aggregation: sum, field: http.bytes, group_by: [service]}
""",
    "latency": """\
  - {id: latency, name: latency_ms, kind: counter, query: "_exists_:http.duration_ms",
     aggregation: histogram, field: http.duration_ms, buckets: [10, 50, 250, 1000]}
""",
    # A series per log (about 800 of the 2,400): past a rule's small size its series move to
    # pages, which grow as the series do — moved, split and rewritten across the kills.
    "traces": """\
  - {id: traces, name: traced_writes_total, kind: counter,
     query: "http.method:(POST OR PUT OR DELETE)", aggregation: count, group_by: [trace_id]}
""",
}
# The rule changes, in order (the gauges never change: a window's value spans the batches of
# several rule sets). A changed query continues its counters; a changed group-by restarts
# the series whose labels both sets have (a log without http.status: {service} either way).
CHANGES = [
    ("errors", """\
  - {id: errors, name: errors_total, kind: counter, query: "level:error", aggregation: count,
     group_by: [service]}
"""),
    ("bytes", COUNTERS["bytes"].replace('"_exists_:http.bytes"',
                                        '"_exists_:http.bytes AND NOT level:debug"')),
    ("requests", COUNTERS["requests"].replace("[service, http.status]", "[service]")),
    ("latency", None),
]


def rule_text(counters: dict[str, str]) -> str:
    return "rules:\n" + "".join(counters[k] for k in sorted(counters)) + GAUGES


RULES = rule_text(COUNTERS)


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


class Watch:
    """One run of ``l2m run`` and its checkpoint, looked at every 50 ms while the test waits:
    when (seconds after the start) the run planned and committed its first batch of its own
    (a replayed batch is planned already)."""

    def __init__(self, checkpoint: Path, job: subprocess.Popen[bytes]) -> None:
        self.checkpoint = checkpoint
        self.job = job
        self.started = time.monotonic()
        self.before = self.state()
        self.planned_at: float | None = None
        self.committed_at: float | None = None

    def state(self) -> tuple[int, int]:
        """The last batch planned and the last committed."""
        return last_batch(self.checkpoint / "offsets"), last_batch(self.checkpoint / "commits")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def wait(self, seconds: float, until: str | None = None) -> None:
        """Until ``seconds`` pass, the job exits or (``until``: ``planned_at``,
        ``committed_at``) that is seen."""
        deadline = time.monotonic() + seconds
        while True:
            planned, committed = self.state()
            if self.planned_at is None and planned > self.before[0]:
                self.planned_at = self.elapsed()
            if self.committed_at is None and committed > self.before[1]:
                self.committed_at = self.elapsed()
            if ((until is not None and getattr(self, until) is not None)
                    or time.monotonic() >= deadline or self.job.poll() is not None):
                return
            time.sleep(0.05)

    def sleep(self, seconds: float) -> None:
        self.wait(seconds)


class Timing:
    """What runs took here: from the start to planning a batch of their own (the shortest
    seen: start-up kills stay in start-up) and how long a batch took to commit (the longest
    seen: batch kills spread over the whole batch; a replayed batch counted from about when a
    batch would be planned). Set by the first run, which is killed after its first commit."""

    def __init__(self) -> None:
        self.start_up: float | None = None
        self.batch = 0.0

    def saw(self, watch: Watch, replay: bool) -> None:
        if watch.planned_at is not None and not replay:
            self.start_up = min(self.start_up or watch.planned_at, watch.planned_at)
        if self.start_up is None or watch.committed_at is None:
            return
        began = self.start_up if replay else watch.planned_at
        if began is not None:
            self.batch = max(self.batch, watch.committed_at - began)


def key(sample: dict[str, Any]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    return sample["rule"], sample["name"], tuple(sorted(sample["labels"].items()))


def planned_segments(offsets: Path, t: Any) -> list[tuple[int, int, str, list[bytes]]]:
    """The logs of each run of micro-batches planned with one rule set, from the offset log
    (each entry: the batch's end offsets and rule set; it starts where the one before ended),
    in batch order: (first batch, last batch, version, logs)."""
    records = {(m.partition(), m.offset()): m.value()
               for m in consume_all(t.bootstrap, t.topics.logs, t.partitions)}
    segments: list[tuple[int, int, str, list[bytes]]] = []
    begin: dict[int, int] = {}
    for batch in sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()):
        entry = (offsets / str(batch)).read_text()
        version = ruleset_of(entry)
        assert version is not None, entry
        end = {int(p): o for p, o in json.loads(entry.splitlines()[2])["partitions"].items()}
        logs = [records[(p, o)] for p in sorted(end) for o in range(begin.get(p, 0), end[p])
                if records[(p, o)]]  # not the closers (empty records)
        begin = end
        if segments and segments[-1][2] == version:
            first, _, _, before = segments[-1]
            segments[-1] = (first, batch, version, before + logs)
        else:
            segments.append((batch, batch, version, logs))
    return segments


def _add(a: float, b: float) -> float:
    """As the job adds a series' partials: exactly (decimal), rounded once."""
    return float(Decimal(repr(a)) + Decimal(repr(b)))


def segment_by_segment(spark: Any, segments: list[tuple[int, int, str, list[bytes]]],
                       rule_sets: dict[str, Sequence[Rule]], tmp: Path
                       ) -> tuple[list[dict[str, Any]], dict[Any, float]]:
    """What the metrics topic must hold last: each counter series summed over the segments
    that counted it — restarted where its rule's signature changed (docs/streaming.md "Rules
    and restarts"), its timestamp the newest event time counted — and the gauges (never
    changed) over every log; and each counter's total over every segment, what increase()
    reads across a restart."""
    latest: dict[Any, dict[str, Any]] = {}
    totals: dict[Any, float] = {}
    generation: dict[str, tuple[int, list[Any]]] = {}
    for index, (_, _, version, logs) in enumerate(segments):
        rules = [r for r in rule_sets[version] if r.kind == "counter"]
        for rule in rules:
            gen, sig = generation.get(rule.id, (0, signature(rule)))
            generation[rule.id] = (gen + (sig != signature(rule)), signature(rule))
        folder = tmp / f"segment-{index}"
        folder.mkdir()
        for sample in backfill_samples(spark, rules, logs, folder) if logs else []:
            k = key(sample)
            gen = generation[sample["rule"]][0]
            totals[k] = _add(totals.get(k, 0), sample["value"])
            before = latest.get(k)
            if before is not None and before["gen"] == gen:
                sample = {**sample, "value": _add(before["value"], sample["value"]),
                          "timestamp": max(before["timestamp"], sample["timestamp"])}
            latest[k] = {**sample, "gen": gen}
    counters = [{k: v for k, v in s.items() if k != "gen"} for s in latest.values()]
    gauges = [r for r in rule_sets[segments[0][2]] if r.kind == "gauge"]
    folder = tmp / "gauges"
    folder.mkdir()
    every = [log for *_, logs in segments for log in logs]
    return counters + backfill_samples(spark, gauges, every, folder), totals


def test_kill_9_at_random_moments_loses_and_double_counts_nothing(spark, broker, prometheus,
                                                                  tmp_path):
    seed = int(os.environ.get("L2M_STRESS_SEED", random.randrange(1 << 30)))
    print(f"\nkill -9 stress test: seed {seed} (replay with L2M_STRESS_SEED={seed})")
    rng = random.Random(seed)
    t = fresh_topics(broker.bootstrap, partitions=3)
    rule_file = tmp_path / "rules.yaml"
    rule_file.write_text(RULES)
    counters = dict(COUNTERS)
    rule_sets: dict[str, Sequence[Rule]] = {}  # by version: what each batch may name

    def record() -> None:
        loaded = load_rules([rule_file]).rules
        rule_sets[ruleset_version(snapshot(loaded), load_config(config))] = loaded

    def change() -> str:
        rule_id, text = CHANGES[len(rule_sets) - 1]
        if text is None:
            counters.pop(rule_id)
        else:
            counters[rule_id] = text
        staged = rule_file.with_suffix(".tmp")  # whole, as a ConfigMap update is
        staged.write_text(rule_text(counters))
        os.replace(staged, rule_file)
        record()
        return f"{'removed' if text is None else 'changed'} {rule_id}"

    change_at = sorted(rng.sample(range(1, KILLS), len(CHANGES)))
    # Dated from 10 minutes ago (200 s of logs, so that gauge windows can be published):
    # recent enough for Prometheus to take.
    start_ms = int(time.time() * 1000) - 600_000
    lines = list(LogGenerator(GeneratorConfig(seed=seed % 1000, rate_per_s=12,
                                              malformed_ratio=0.01, start_ms=start_ms)
                              ).lines(2400))
    # A 5 s recheck: the final --once run waits for the last run's window timers, which a
    # minute's recheck would put up to a minute ahead.
    config = job_yaml(t, tmp_path, f"rules: [{rule_file}]", "trigger: 1 second",
                      "rules_poll: 300 ms", "recheck: 5 seconds",
                      "source: {max_records_per_trigger: 240, max_records_per_task: 120}",
                      f'remote_write: {{poll: 200 ms, endpoints: [{{url: "{prometheus}/api/v1/'
                      'write", name: prom, tenant_header: null}]}')
    record()
    log = tmp_path / "runs.log"
    cuts = sorted(rng.sample(range(1, len(lines)), KILLS - 1))
    chunks = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
    moments: list[str] = []
    in_flight = 0
    checkpoint = tmp_path / "checkpoint" / "metrics"
    timing = Timing()
    for index, chunk in enumerate(chunks):
        live = index in change_at and rng.random() < 0.5
        kind = rng.choices(KINDS, weights=(3, 6, 2))[0] if index else "commit"
        fraction, live_fraction = rng.random(), rng.random()
        changed = change() + " while down; " if index in change_at and not live else ""
        # Small producer batches: tansu shows a reader only up to the last batch's first
        # record, so each chunk is visible to the running job but for a few records.
        producer = Producer({"bootstrap.servers": t.bootstrap, "log_level": "3",
                             "batch.num.messages": 20, "linger.ms": 0})
        for i, line in enumerate(chunk):
            producer.produce(t.topics.logs, value=line, partition=i % t.partitions)
        producer.flush(30)
        watch = Watch(checkpoint, start(config, log))
        replay = watch.before[0] > watch.before[1]  # the last kill cut a batch: replayed first
        planning = max(timing.start_up or 0.0, 1.5)  # the first run sets it (index > 0 here)
        start_up = 1.0 + fraction * (planning - 1.0)
        if live:  # a change the running job picks up, or one it starts with, by its timing
            at = live_fraction * (start_up if kind == "start-up" else planning)
            watch.sleep(at)
            changed = change() + f" live at {at:.1f}s; "
        if kind == "start-up":
            watch.sleep(start_up - watch.elapsed())
        elif kind == "batch" and replay:  # the replay starts about when a batch is planned
            watch.sleep(planning + fraction * timing.batch - watch.elapsed())
        elif kind == "batch":
            watch.wait(LIMIT_S, until="planned_at")
            watch.sleep(fraction * timing.batch)
        else:
            watch.wait(LIMIT_S, until="committed_at")
            watch.sleep(fraction)
        delay = watch.elapsed()
        planned, committed = watch.state()
        if (planned, committed) == watch.before and planned > committed:
            phase = f"start-up or replay of batch {planned}"
        elif (planned, committed) == watch.before:
            phase = "start-up"
        elif planned > committed:
            phase = f"batch {planned} running"
        else:
            phase = f"after batch {committed} committed"
        moment = f"{changed}{kind} {delay:.1f}s ({phase})"
        job = watch.job
        exited = job.poll()
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        assert exited is None, f"l2m run exited by itself ({exited}) before the kill:\n" \
                               + log.read_text()[-3000:]
        timing.saw(watch, replay)
        in_flight += planned > committed
        moments.append(moment)
    print(f"killed {len(moments)} times ({in_flight} with a batch planned but not committed):"
          f" {', '.join(moments)}")
    assert len(moments) >= KILLS

    produce(t.bootstrap, t.topics.logs, [], t.partitions)  # closers: every record visible
    # The catch-up run takes what is left in one batch (after a replay the last kill left):
    # the per-trigger cap only spread the killed runs' work over batches.
    catch_up = tmp_path / "catch-up.yaml"
    catch_up.write_text(config.read_text().replace("max_records_per_trigger: 240",
                                                   "max_records_per_trigger: 0"))
    assert catch_up.read_text() != config.read_text()
    final = start(catch_up, log, once=True)
    assert final.wait(300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]

    assert len(rule_sets) == len(CHANGES) + 1
    # Delivery reads only the metrics topic, now complete: it runs beside the backfills.
    delivering = ThreadPoolExecutor(1).submit(deliver, load_config(config), once=True,
                                              once_idle_s=1.0)
    segments = planned_segments(checkpoint / "offsets", t)
    print("segments (batches, version, logs): " + ", ".join(
        f"{first}-{last} {version} {len(logs)}" for first, last, version, logs in segments))
    assert sum(len(logs) for *_, logs in segments) == len(lines)
    expected, totals = segment_by_segment(spark, segments, rule_sets, tmp_path)
    got = rule_samples(latest_samples(consume_all(t.bootstrap, t.topics.metrics)))
    kinds = {s["kind"] for s in expected}
    print(f"compared {len(expected)} samples ({', '.join(sorted(kinds))}) with backfill, "
          f"{len({v for _, _, v, _ in segments})} rule sets")
    assert kinds == {"counter", "gauge"}
    assert canonical(got) == canonical(expected)

    tally = delivering.result(timeout=300)["prom"]
    assert tally.refused == {}
    counters = [s for s in expected if s["kind"] == "counter"]
    for sample in counters:
        # At the series' own last point: increase() extrapolates past a range's last sample.
        at = _stored(prometheus, sample)[-1][0] / 1000
        # A series a group-by change restarted: PromQL reads the reset, and counts both.
        assert _increase(prometheus, sample, at) == [totals[key(sample)]], sample
    windows = {(s["name"], tuple(sorted(s["labels"].items())), s["timestamp"]): s["value"]
               for s in expected if s["kind"] == "gauge"}
    published = {(r["metric"]["__name__"], tuple(sorted((k, v) for k, v in r["metric"].items()
                                                        if k != "__name__")), round(
                  float(t_) * 1000)): float(v)
                 for name in {k[0] for k in windows}
                 for r in promql(prometheus, f"{name}[1h]") for t_, v in r["values"]}
    # A window is published once the newest event time is 2 minutes past its end, by a
    # batch that brings it logs or by its key's timer (every recheck of processing time):
    # with runs killed early, some seeds end before any window's timer comes round with the
    # watermark far enough (test_deliver publishes windows deterministically). Whatever was
    # published holds backfill's value.
    assert {k: windows[k] for k in published} == published
    assert _rejected(prometheus) == 0
    print(f"delivered: {summary(tally)}; {len(published)} of {len(windows)} gauge windows "
          "published")
