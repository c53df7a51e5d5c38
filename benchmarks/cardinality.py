"""The cardinality scenario (issue 20): a rule grouping by a unique id, with the default
series caps (``--uncapped``: without any, the baseline measured before caps existed).

    python -m benchmarks.cardinality [--logs 1000000] [--burst 250000] [--out DIR] [--quick]
                                     [--uncapped]

Rules: the example rules (``rules/``) plus a counter grouping by ``request_id`` (unique per
log: one new series per log, kept for ``counter_ttl``) and a gauge grouping by ``user_id``
(:data:`USERS` users, per one-minute window). Logs: :class:`LogGenerator`'s, with the two ids
added.

* **Streaming**: the job on the embedded broker (tansu, a real Kafka sink), one running query
  in ``local[2]``; the logs arrive in bursts of ``--burst``. Each burst is produced just after
  a trigger boundary, so one micro-batch takes all of it. After each burst: that micro-batch's
  duration, the state (progress ``stateOperators``: ``numRowsTotal`` — state keys, not series —
  and memory), the live series the state tasks report, the checkpoint's size on disk; then a
  batch of :data:`PROBE` ordinary logs (no ids) and its duration — what every other tenant
  waits for. A probe before the first burst gives the baseline.
* **Backfill**: ``l2m backfill`` of the same ``--logs`` logs with the same rules, and with the
  example rules alone for reference, in the same (warm) session.

Prints a table; writes ``cardinality.json`` and ``cardinality.png`` into ``--out``
(default ``./bench-results`` in the working directory, never the checkout); names the machine.
Not part of ``python -m benchmarks`` (about ten minutes on 2 cores)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from benchmarks.__main__ import machine
from benchmarks.load import fresh_topics
from l2m.config.job import JobConfig, LimitsConfig, SourceConfig
from l2m.dev.broker import EmbeddedBroker
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.status import DEAD_LETTERED
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Rule
from l2m.runtime.runner import session_for
from l2m.state.tally import InputCount, SeriesCount
from l2m.streaming.job import Job, start_job

ROOT = Path(__file__).resolve().parent.parent
RULES = """\
rules:
  - {id: per-request, name: requests_by_id_total, kind: counter, query: "_exists_:request_id",
     aggregation: count, group_by: [request_id]}
  - {id: per-user-latency, name: user_request_duration_ms_max, kind: gauge,
     query: "_exists_:user_id AND _exists_:http.duration_ms", aggregation: max,
     field: http.duration_ms, group_by: [user_id]}
"""
USERS = 200_000  # distinct user_id values
PROBE = 2_000  # ordinary logs per probe batch
PARTITIONS = 4
DEAD_LETTER_LABELS = frozenset(status.label for status in DEAD_LETTERED)  # malformed, future
EVENT_RATE = 500  # logs per second of event time


def cardinality_rules() -> list[Rule]:
    return list(load_rules([ROOT / "rules"]).rules) + list(load_text(RULES)[0])


class Logs:
    """One event-time stream: bursts with a unique ``request_id`` and a ``user_id`` per log,
    probes of ordinary logs (no ids) in between, so no probe log is late."""

    def __init__(self, logs: int, seed: int = 20) -> None:
        # Every log ends up dated at least an hour ago: at EVENT_RATE, 10,000,000 logs span
        # 5.6 hours, and a log dated ahead of its Kafka time is dead-lettered as `future`.
        start = int(time.time() * 1000) - 3_600_000 - (logs + 100_000) * 1000 // EVENT_RATE
        self.gen = LogGenerator(GeneratorConfig(seed=seed, start_ms=start,
                                                rate_per_s=EVENT_RATE))
        self.rng = random.Random(seed)
        self.ids = 0

    def burst(self, n: int) -> list[bytes]:
        out = []
        for _ in range(n):
            doc = self.gen.next_doc()
            self.ids += 1
            doc["request_id"] = f"{self.rng.getrandbits(128):032x}"  # as a UUID's 32 hex digits
            doc["user_id"] = f"user-{self.rng.randrange(USERS)}"
            out.append(orjson.dumps(doc))
        return out

    def ordinary(self, n: int) -> list[bytes]:
        return [orjson.dumps(self.gen.next_doc()) for _ in range(n)]


class Feed:
    """Produces lines round-robin over the logs topic's partitions, each burst closed by an
    empty record per partition (tansu's end offset covers complete batches only)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                  "batch.num.messages": 10_000,
                                  "queue.buffering.max.messages": 1_000_000, "log_level": "3"})
        self.records = 0  # records produced so far, closing ones included

    def send(self, lines: list[bytes]) -> float:
        started = time.monotonic()
        for i, value in enumerate(lines):
            while True:
                try:
                    self.producer.produce(self.topic, value=value, partition=i % self.partitions)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        self.producer.flush(300)
        for p in range(self.partitions):
            self.producer.produce(self.topic, value=b"", partition=p)
        self.producer.flush(30)
        self.records += len(lines) + self.partitions
        return time.monotonic() - started


def offsets_total(offset: Any) -> int:
    """The sum of the per-partition offsets in a progress's source offset (JSON or dict)."""
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return 0
    if isinstance(offset, dict):
        return sum(offsets_total(v) for v in offset.values())
    if isinstance(offset, int) and not isinstance(offset, bool):
        return offset
    return 0


def after_boundary(trigger_ms: int, lead_ms: int = 700) -> None:
    """Sleep until ``lead_ms`` past the next trigger boundary (Spark's processing-time
    triggers fire at multiples of the interval), so a burst produced now is complete before
    the trigger after it looks for data."""
    now = time.time() * 1000
    wait = (lead_ms - now % trigger_ms) % trigger_ms
    time.sleep(wait / 1000)


def wait_for(query: StreamingQuery, records: int, seen: int,
             timeout_s: float = 3600) -> list[dict[str, Any]]:
    """The progress of every micro-batch after batch ``seen`` up to the one whose end offsets
    reach ``records``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        new = [p for p in query.recentProgress if p["batchId"] > seen and p["numInputRows"]]
        if new and max(offsets_total(s["endOffset"]) for p in new for s in p["sources"]) \
                >= records:
            return new
        time.sleep(0.2)
    raise TimeoutError(f"the job did not reach offset {records} in {timeout_s} s")


def folder_bytes(path: Path) -> int:
    """What ``du`` counts: the disk blocks of every file below ``path``."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # a file the job removed meanwhile
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def live_series(job: Job, rule: str | None = None) -> int:
    """Live series over all rules (or of one), as the state tasks last reported them; a
    gauge's series are counted once per open window."""
    if job.counts is None or job.counts.tally is None:
        return 0
    return int(sum(v for k, v in job.counts.tally.value.items()
                   if isinstance(k, SeriesCount) and rule in (None, k.rule)))


def input_statuses(job: Job) -> dict[str, int]:
    """Logs read so far per input status (``ok``, ``future``, …), as the state tasks last
    reported them."""
    if job.counts is None or job.counts.tally is None:
        return {}
    return {k.status: int(v) for k, v in job.counts.tally.value.items()
            if isinstance(k, InputCount)}


def state_files(checkpoint: Path) -> dict[str, int]:
    """Every file of the query's state store and its size."""
    out = {}
    for folder, _dirs, names in os.walk(checkpoint / "metrics" / "state"):
        for name in names:
            with contextlib.suppress(OSError):
                out[os.path.join(folder, name)] = os.stat(os.path.join(folder, name)).st_size
    return out


def written(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes of the state files a batch wrote: new files (changelogs, snapshots) and grown ones."""
    return sum(size - before.get(path, 0) for path, size in after.items()
               if size > before.get(path, 0))


def step(job: Job, kind: str, logs: int, ids: int, batches: list[dict[str, Any]],
         checkpoint: Path, produce_s: float) -> dict[str, Any]:
    last = batches[-1]
    state = last.get("stateOperators") or []
    return {
        "kind": kind, "logs": logs, "id_logs_so_far": ids, "batches": len(batches),
        "batch_ms": sum(p["durationMs"]["triggerExecution"] for p in batches),
        "batch_ids": [p["batchId"] for p in batches],
        "durations": [p["durationMs"] for p in batches],
        "state_rows": sum(int(s.get("numRowsTotal", 0)) for s in state),
        "state_memory_bytes": sum(int(s.get("memoryUsedBytes", 0)) for s in state),
        "state_custom": {k: sum(int(s.get("customMetrics", {}).get(k, 0)) for s in state)
                         for k in ("rocksdbSstFileSize", "rocksdbTotalBytesWrittenByFlush",
                                   "rocksdbCommitFileSyncLatencyMs",
                                   "rocksdbCommitCheckpointLatency")},
        "live_series": live_series(job),
        "input": input_statuses(job),
        "live_series_per_request": live_series(job, "per-request"),
        "live_series_per_user_latency": live_series(job, "per-user-latency"),
        "checkpoint_bytes": folder_bytes(checkpoint),
        "produce_s": round(produce_s, 2),
    }


def run_streaming(spark: SparkSession, bootstrap: str, rules: list[Rule], workdir: Path,
                  logs: int, burst: int, trigger_ms: int, backfill_file: Path | None,
                  limits: LimitsConfig, restart: bool = False, probes: int = 1,
                  counter_ttl_ms: int | None = None) -> list[dict[str, Any]]:
    topics = fresh_topics(bootstrap, "card", PARTITIONS)
    checkpoint = workdir / "ck"
    ttl = {} if counter_ttl_ms is None else {"counter_ttl_ms": counter_ttl_ms}
    # A burst of 1,000,000 new series is ≈ 1,750,000 samples in one batch: more than the
    # embedded broker acknowledges within the default minute of message timeout.
    cfg = JobConfig(kafka={"bootstrap.servers": bootstrap}, topics=topics,
                    checkpoint=str(checkpoint), trigger_ms=trigger_ms,
                    sink_kafka={"message.timeout.ms": "900000"},
                    source=SourceConfig(max_records_per_trigger=None,
                                        max_records_per_task=40_000), limits=limits, **ttl)
    feed = Feed(bootstrap, topics.logs, PARTITIONS)
    # Every log the run sends: bursts, probes after each level, warm-up and restart batches.
    source = Logs(logs + ((logs // burst + 3) * probes + 2) * PROBE)
    job = start_job(spark, cfg, rules)
    steps: list[dict[str, Any]] = []
    seen = -1

    def run(kind: str, lines: list[bytes], boundary: bool = True) -> dict[str, Any]:
        nonlocal seen
        if boundary:
            after_boundary(trigger_ms)
        files = state_files(checkpoint)
        produce_s = feed.send(lines)
        batches = wait_for(job.query, feed.records, seen)
        seen = batches[-1]["batchId"]
        out = step(job, kind, len(lines), source.ids, batches, checkpoint, produce_s)
        out["state_written_bytes"] = written(files, state_files(checkpoint))
        # A scenario about state must not measure logs the job never routed (the empty records
        # closing each burst are `blank`, and fine).
        refused = {k: v for k, v in out["input"].items() if k in DEAD_LETTER_LABELS and v}
        if refused:
            raise RuntimeError(f"logs dead-lettered in {kind}: {refused}")
        print(f"{kind:<7} {len(lines):>8,} logs ({source.ids:>9,} with ids so far): "
              f"{out['batch_ms']:>7,} ms in {out['batches']} batch(es), "
              f"state rows {out['state_rows']:,}, series {out['live_series']:,}, "
              f"checkpoint {out['checkpoint_bytes'] / 2**20:,.1f} MiB, "
              f"state written {out['state_written_bytes'] / 2**10:,.0f} KiB", file=sys.stderr)
        return out

    def probe(kind: str = "probe") -> None:
        for _ in range(probes):
            steps.append(run(kind, source.ordinary(PROBE)))

    try:
        # Warm-up (unmeasured): the session's first micro-batch costs seconds no later one pays.
        run("warmup", source.ordinary(PROBE))
        probe()
        with contextlib.ExitStack() as stack:
            f = stack.enter_context(backfill_file.open("wb")) if backfill_file else None
            for start in range(0, logs, burst):
                lines = source.burst(min(burst, logs - start))
                if f is not None:
                    f.write(b"\n".join(lines) + b"\n")
                steps.append(run("burst", lines))
                probe()
        if restart:
            # A restart on the state as it is: the query stopped and started again on its
            # checkpoint (the session stays warm; a new process adds its JVM start,
            # benchmarks/RESULTS.md "roll-out"), a probe waiting. Its time: start → the
            # probe's batch done, samples written.
            job.query.stop()
            lines = source.ordinary(PROBE)
            feed.send(lines)
            started = time.monotonic()
            job = start_job(spark, cfg, rules)
            seen = -1
            batches = wait_for(job.query, feed.records, seen)
            seen = batches[-1]["batchId"]
            out = step(job, "restart", len(lines), source.ids, batches, checkpoint, 0.0)
            out["first_sample_s"] = round(time.monotonic() - started, 2)
            print(f"restart: first sample {out['first_sample_s']} s after the query started "
                  f"({out['batch_ms']:,} ms of batches)", file=sys.stderr)
            steps.append(out)
            probe("after")
        if counter_ttl_ms is not None:
            # Idle series expire: wait past the TTL, then ordinary probes (the series of
            # every burst are idle by then).
            time.sleep(counter_ttl_ms / 1000 + 2)
            probe("expired")
    finally:
        job.query.stop()
    return steps


def run_backfills(spark: SparkSession, rules: list[Rule], workdir: Path,
                  path: Path, logs: int, limits: LimitsConfig, repeats: int = 1
                  ) -> dict[str, Any]:
    """Backfill ``path`` with the example rules and with ``rules``, alternating ``repeats``
    times; each one's fastest run (every run's time under ``runs_s``: this machine's speed
    drifts by tens of percent within minutes)."""
    from l2m.batch.backfill import run_backfill

    out: dict[str, Any] = {"logs": logs, "bytes": path.stat().st_size}
    examples = list(load_rules([ROOT / "rules"]).rules)
    for _ in range(repeats):
        for name, chosen in (("example_rules", examples), ("cardinality_rules", rules)):
            summary = run_backfill(spark, chosen, [str(path)], workdir / f"out-{name}.jsonl",
                                   progress=False, limits=limits.series)
            seconds = round(summary.seconds, 2)
            print(f"backfill {logs:,} logs, {name.replace('_', ' ')}: {seconds:.1f} s, "
                  f"{summary.samples:,} samples", file=sys.stderr)
            runs = [*out.get(name, {}).get("runs_s", []), seconds]
            if name in out and out[name]["seconds"] <= seconds:
                out[name]["runs_s"] = runs
                continue
            out[name] = {"rules": len(chosen), "seconds": seconds,
                         "logs_per_s": round(logs / summary.seconds),
                         "samples": summary.samples,
                         "series": sum(summary.samples_per_rule.values()),
                         "refused_logs": sum(summary.refused.values()), "runs_s": runs}
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result["streaming"]
    bursts = [s for s in steps if s["kind"] == "burst"]
    probes = [s for s in steps if s["kind"] == "probe"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([s["id_logs_so_far"] for s in bursts], [s["batch_ms"] / 1000 for s in bursts],
              marker="o", label=f"burst of {result['burst']:,} logs with ids")
    left.plot([s["id_logs_so_far"] for s in probes], [s["batch_ms"] / 1000 for s in probes],
              marker="s", label=f"next batch: {PROBE:,} ordinary logs")
    left.set_xlabel("logs with a unique request_id so far")
    left.set_ylabel("micro-batch duration, s")
    left.set_ylim(bottom=0)
    left.legend()
    left.set_title("Batch time")
    right.plot([s["id_logs_so_far"] for s in probes],
               [s["checkpoint_bytes"] / 2**20 for s in probes], marker="o", color="#d95f02",
               label="checkpoint on disk, MiB")
    right.set_xlabel("logs with a unique request_id so far")
    right.set_ylabel("checkpoint, MiB")
    right.set_ylim(bottom=0)
    twin = right.twinx()
    twin.plot([s["id_logs_so_far"] for s in probes], [s["live_series"] for s in probes],
              marker="^", color="#7570b3", label="live series")
    twin.set_ylabel("live series")
    twin.set_ylim(bottom=0)
    lines = right.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    right.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left")
    right.set_title("State size")
    caps = result.get("caps", {}).get("per_rule")
    capped = f"series cap {caps:,} per rule" if caps else "no series caps"
    fig.suptitle(f"Cardinality, {capped}: {result['machine']['cpus']} cores, "
                 f"{result['logs']:,} logs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    rows = [f"{'step':<7} {'logs':>8} {'ids so far':>10} {'batch ms':>9} {'batches':>7} "
            f"{'state rows':>10} {'series':>10} {'checkpoint MiB':>14} {'written KiB':>11}"]
    for s in result["streaming"]:
        rows.append(f"{s['kind']:<7} {s['logs']:>8,} {s['id_logs_so_far']:>10,} "
                    f"{s['batch_ms']:>9,} {s['batches']:>7} {s['state_rows']:>10,} "
                    f"{s['live_series']:>10,} {s['checkpoint_bytes'] / 2**20:>14,.1f} "
                    f"{s.get('state_written_bytes', 0) / 2**10:>11,.0f}")
    back = result.get("backfill")
    if back is None:
        return "\n".join(rows)
    rows.append(f"backfill of {back['logs']:,} logs: {back['cardinality_rules']['seconds']} s "
                f"with the cardinality rules ({back['cardinality_rules']['samples']:,} samples), "
                f"{back['example_rules']['seconds']} s with the example rules alone")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cardinality")
    ap.add_argument("--logs", type=int, default=1_000_000, help="logs with ids, in all")
    ap.add_argument("--burst", type=int, default=250_000, help="logs per burst")
    ap.add_argument("--quick", action="store_true", help="40,000 logs in bursts of 10,000")
    ap.add_argument("--trigger-ms", type=int, default=10_000,
                    help="the job's trigger; a burst must be produced within it")
    ap.add_argument("--out", default=None, help="results folder (default ./bench-results)")
    ap.add_argument("--uncapped", action="store_true",
                    help="no series caps (limits.max_series_* = 0): the baseline")
    ap.add_argument("--probes", type=int, default=1, help="probe batches after each burst")
    ap.add_argument("--restart", action="store_true",
                    help="after the last burst, restart the query and time its first sample")
    ap.add_argument("--counter-ttl-ms", type=int, default=None,
                    help="the job's counter_ttl; with it, probes after the TTL has passed")
    ap.add_argument("--no-backfill", action="store_true", help="streaming only")
    ap.add_argument("--name", default=None, help="result file name (default: by caps)")
    ap.add_argument("--backfill-json", default=None, metavar="PATH",
                    help="only the backfill comparison (issue 21, deliverable 4) in a session "
                         "as `l2m backfill` starts it, its result written to PATH")
    ap.add_argument("--repeats", type=int, default=2,
                    help="with --backfill-json: runs of each rule set, alternating (1: once "
                         "each, no warm-up)")
    args = ap.parse_args(argv)
    if args.backfill_json:
        return backfill_only(args.logs, Path(args.backfill_json), args.repeats)
    limits = (LimitsConfig(max_series_per_rule=0, max_series_per_metric=0,
                           max_series_per_account=0) if args.uncapped else LimitsConfig())
    if args.quick:
        args.logs, args.burst = 40_000, 10_000
    out = Path(args.out) if args.out else Path.cwd() / "bench-results"
    out.mkdir(parents=True, exist_ok=True)
    rules = cardinality_rules()
    started = time.monotonic()
    result: dict[str, Any] = {"machine": machine(), "logs": args.logs, "burst": args.burst,
                              "probe_logs": PROBE, "users": USERS, "partitions": PARTITIONS,
                              "trigger_ms": args.trigger_ms, "rules": len(rules),
                              "master": "local[2]", "source": "embedded broker (tansu)",
                              "caps": {"per_rule": limits.max_series_per_rule,
                                       "per_metric": limits.max_series_per_metric,
                                       "per_account": limits.max_series_per_account}}
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        spark = session_for(JobConfig(master="local[2]", checkpoint=f"{tmp}/ck",
                                      spark={"spark.sql.shuffle.partitions": "2"}))
        logs_file = None if args.no_backfill else Path(tmp) / "logs.jsonl"
        result["streaming"] = run_streaming(spark, broker.bootstrap, rules, Path(tmp),
                                            args.logs, args.burst, args.trigger_ms, logs_file,
                                            limits, args.restart, args.probes,
                                            args.counter_ttl_ms)
        if logs_file is not None:
            result["backfill"] = run_backfills(spark, rules, Path(tmp), logs_file, args.logs,
                                               limits)
        spark.stop()
    result["seconds"] = round(time.monotonic() - started, 1)
    name = args.name or ("cardinality-uncapped" if args.uncapped else "cardinality")
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    plot(result, out / f"{name}.png")
    print(table(result))
    print(f"({result['machine']['cpus']} cores, {result['seconds']} s; results in {out})")
    return 0



def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def run_state_scale(spark: SparkSession, bootstrap: str, workdir: Path, logs: int,
                    burst: int, probes: int, trigger_ms: int = 10_000) -> dict[str, Any]:
    """Issue 21's state scenario in the harness (``python -m benchmarks``): no series caps,
    ``logs`` logs with ids in bursts, ``probes`` ordinary batches after each, then a restart
    on the full state. Batch time and state bytes written per probe against live series."""
    uncapped = LimitsConfig(max_series_per_rule=0, max_series_per_metric=0,
                            max_series_per_account=0)
    steps = run_streaming(spark, bootstrap, cardinality_rules(), workdir / "state-scale",
                          logs, burst, trigger_ms, None, uncapped, restart=True,
                          probes=probes)
    return summarise_state(steps, logs, burst, probes)


def summarise_state(steps: list[dict[str, Any]], logs: int, burst: int,
                    probes: int) -> dict[str, Any]:
    """Per level of live series: the median probe batch and state bytes written."""
    levels: list[dict[str, Any]] = []
    for s in steps:
        if s["kind"] != "probe":
            continue
        if not levels or levels[-1]["id_logs"] != s["id_logs_so_far"]:
            levels.append({"id_logs": s["id_logs_so_far"], "batch_ms": [], "written": [],
                           "live_series": 0, "state_rows": 0, "checkpoint_bytes": 0})
        level = levels[-1]
        level["batch_ms"].append(s["batch_ms"])
        level["written"].append(s["state_written_bytes"])
        level["live_series"] = max(level["live_series"], s["live_series"])
        level["checkpoint_bytes"] = s["checkpoint_bytes"]
    table = [{"id_logs": lv["id_logs"], "live_series": lv["live_series"],
              "probe_batch_ms": _median(lv["batch_ms"]),
              "probe_batch_ms_max": max(lv["batch_ms"]),
              "state_written_bytes": _median(lv["written"]),
              "checkpoint_bytes": lv["checkpoint_bytes"]} for lv in levels]
    bursts = [s for s in steps if s["kind"] == "burst"]
    restart = next((s for s in steps if s["kind"] == "restart"), None)
    empty, full = table[0], table[-1]
    return {
        "logs": logs, "burst": burst, "probes_per_level": probes, "probe_logs": PROBE,
        "levels": table,
        "burst_batch_ms": [b["batch_ms"] for b in bursts],
        "burst_logs_per_s": round(sum(b["logs"] for b in bursts)
                                  / max(sum(b["batch_ms"] for b in bursts) / 1000, 1e-9)),
        "batch_ratio": round(full["probe_batch_ms"] / empty["probe_batch_ms"], 2),
        "written_ratio": round(full["state_written_bytes"]
                               / max(empty["state_written_bytes"], 1), 2),
        "live_series": full["live_series"],
        "restart_first_sample_s": restart["first_sample_s"] if restart else None,
        "steps": steps,
    }


def backfill_only(logs: int, out: Path, repeats: int = 2) -> int:
    """:func:`run_cardinality_backfill` in its own session, started as ``l2m backfill``
    starts one (the batch job's JIT, l2m.runtime.session.BATCH_JIT), not the streaming
    session the other scenarios share."""
    from l2m.runtime.session import BATCH_JIT, build_session

    spark = build_session("local[2]", "l2m-backfill", {"spark.sql.shuffle.partitions": "2"},
                          jit=BATCH_JIT)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_cardinality_backfill(spark, Path(tmp), logs, repeats)
    spark.stop()
    out.write_text(json.dumps(result, indent=2))
    return 0


def run_expiry(spark: SparkSession, bootstrap: str, workdir: Path, logs: int, burst: int,
               ttl_ms: int, trigger_ms: int = 5_000) -> dict[str, Any]:
    """Idle series expire by ``counter_ttl``: ``logs`` ids in bursts, then the TTL passes and
    ordinary batches follow. What the first batch after it costs and writes, against the
    state it leaves."""
    uncapped = LimitsConfig(max_series_per_rule=0, max_series_per_metric=0,
                            max_series_per_account=0)
    steps = run_streaming(spark, bootstrap, cardinality_rules(), workdir / "expiry", logs,
                          burst, trigger_ms, None, uncapped, probes=1, counter_ttl_ms=ttl_ms)
    before = [s for s in steps if s["kind"] == "probe"][-1]
    expired = [s for s in steps if s["kind"] == "expired"]
    first = expired[0]
    return {"logs": logs, "burst": burst, "ttl_ms": ttl_ms,
            "state_rows_before": before["state_rows"], "state_rows_after": first["state_rows"],
            "checkpoint_bytes_before": before["checkpoint_bytes"],
            "expiry_batch_ms": first["batch_ms"],
            "expiry_state_written_bytes": first["state_written_bytes"],
            "probe_batch_ms_before": before["batch_ms"],
            "state_written_bytes_before": before["state_written_bytes"],
            "steps": steps}


def run_cardinality_backfill(spark: SparkSession, workdir: Path, logs: int,
                             repeats: int = 2) -> dict[str, Any]:
    """Backfill of ``logs`` logs with a unique id each, with the cardinality rules (default
    caps) and the example rules alone, in a warm session, ``repeats`` times alternating,
    each the fastest of its runs (issue 21, deliverable 4). One repeat (the harness's smoke
    profile) runs each once in a cold session: a single run compares nothing."""
    path = workdir / "cardinality-backfill.jsonl"
    source = Logs(logs)
    with path.open("wb") as f:
        for start in range(0, logs, 100_000):
            f.write(b"\n".join(source.burst(min(100_000, logs - start))) + b"\n")
    from benchmarks.rules_scale import PeakMemory
    from l2m.batch.backfill import run_backfill

    if repeats > 1:
        # Unmeasured: a session's first backfill pays seconds no later one does.
        run_backfill(spark, list(load_rules([ROOT / "rules"]).rules), [str(path)],
                     workdir / "warm.jsonl", progress=False)
    with PeakMemory() as peak:
        out = run_backfills(spark, cardinality_rules(), workdir, path, logs, LimitsConfig(),
                            repeats=repeats)
    out["peak_jvm_rss_mib"] = round(peak.jvm)
    out["peak_python_worker_rss_mib"] = round(peak.python_worker)
    out["ratio"] = round(out["cardinality_rules"]["seconds"] / out["example_rules"]["seconds"], 2)
    path.unlink()
    return out


if __name__ == "__main__":
    sys.exit(main())
