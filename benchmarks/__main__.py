"""The benchmark harness: ``python -m benchmarks [--quick | --smoke] [--out DIR]`` (or
``l2m bench``).

Runs the scenarios side by side in one invocation on one embedded broker, prints a table,
writes ``DIR/latest.json`` (``quick.json`` for ``--quick``, ``smoke.json`` for ``--smoke``)
with the targets and each scenario's seconds (``phases_s``), PNG plots and ``DIR/RESULTS.md``
(``QUICK.md``, ``SMOKE.md``) naming the machine, versions and date. ``DIR``: ``--out``, else
``benchmarks/results`` (the committed results) for the full profile and ``./bench-results``
in the working directory for ``--quick`` and ``--smoke`` (``l2m bench``: always
``./bench-results`` unless ``--out`` is given).

The quick profile is a smoke test of the harness on tiny data; the smoke profile runs each of
its scenarios once on less, with one-second triggers, and is what the test suite runs
(tests/integration/test_bench.py). Their figures are recorded but not graded against the
targets, which are the full profile's (``n/a (quick)``, ``n/a (smoke)``).

Measured so far: the machine's read + parse ceiling, and drain throughput of a backlog under
partition skew (uniform, one hot partition, Zipf) with skew-aware and per-partition planning
in ``local[2]``, with records per task per micro-batch. Targets not measured yet are listed
with ``measured: null``."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.drain import DrainCase, run_drain
from benchmarks.executor_loss import run_executor_loss
from benchmarks.latency import run_latency
from benchmarks.limits import consume_parse_rate, consume_rate, parse_rate
from benchmarks.live_rules import run_live_rules
from benchmarks.load import LoadSpec, Skew, preload
from benchmarks.once import batches_rate, run_once
from benchmarks.peer_quix import run_peer
from benchmarks.recovery import run_recovery
from benchmarks.remote_write import run_drain_alongside, run_throughput
from benchmarks.rollout import plot as plot_rollout
from benchmarks.rollout import run_rollout
from benchmarks.rules_scale import run_rule_scale
from benchmarks.scale import model
from l2m.config.job import JobConfig
from l2m.dev.broker import EmbeddedBroker, create_topics
from l2m.rules.loader import load_rules
from l2m.runtime.runner import session_for

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

PROFILES = {
    # The harness's own test (tests/integration/test_bench.py): every scenario of the quick
    # profile once (no best of two, no unmeasured warm-up drain), on hundreds to a few
    # thousand logs, with one-second triggers and the shortest waits that still let each
    # scenario's clock run (a roll-out restarts, a rule is reloaded; the TTL is the quick
    # profile's: a shorter one expired the burst's series before the probe that counts them
    # under load). "overlap": the scenarios of their own processes run beside the session's,
    # not after it — most of either is waiting on a clock, and no figure here is compared.
    "smoke": {"records": 2_000, "partitions": 4, "per_batch": 2_000, "per_task": 1_000,
              "limit_records": 2_000, "best_of": 1, "warm_up": False, "overlap": True,
              "skews": [Skew("uniform"), Skew("hot", 0.7)],
              "latency": {"rate": 100, "seconds": 3, "warmup_s": 2, "trigger_ms": 1000},
              "recovery": {"series": 500, "new_logs": 50},
              "peer": {"records": 400, "idle_s": 3.0}, "rollouts": 1,
              "rollout": {"rate": 100, "trigger": "1 second", "settle_s": 0.0},
              "rules": {"rule_counts": [20, 50], "accounts": 5, "records": 1_000,
                        "backfill_logs": 1_000, "backfill_runs": 1, "cost_logs": 1_000},
              "rules_100k": {"rule_counts": [20, 60], "accounts": 6, "records": 1_000,
                             "backfill_logs": 1_000, "backfill_runs": 1, "tenant_dirs": True,
                             "cost_logs": 1_000},
              "state": {"logs": 2_000, "burst": 1_000, "probes": 1, "trigger_ms": 1_000},
              "expiry": {"logs": 1_000, "burst": 1_000, "ttl_ms": 6_000,
                         "trigger_ms": 1_000},
              "cardinality_backfill": {"logs": 1_000, "repeats": 1},
              "churn": "smoke",  # the churn scenario's sizes: benchmarks.churn.PROFILES
              # two micro-batches of the profile's size: the steady rate has one to count;
              # the second corpus in two micro-batches of 500 logs, one plan (one JVM start)
              "once": {"records": 4_000, "partitions": 4,
                       "varied": {"records": 1_000, "per_batch": 500, "per_task": 250,
                                  "shipped": False}},
              "remote_write": {"series": 100, "batches": 2, "drain_runs": 1},
              "live_rules": {"rate": 100, "trigger_ms": 1_000, "poll_ms": 200, "big": 50,
                             "adds": 1, "settle_s": 2, "round_trips": 1,
                             "watch_triggers": 2}},
    # records, partitions, per micro-batch, per task (balanced plan), limit records
    "quick": {"records": 6_000, "partitions": 4, "per_batch": 6_000, "per_task": 3_000,
              "limit_records": 20_000, "skews": [Skew("uniform"), Skew("hot", 0.7)],
              "latency": {"rate": 200, "seconds": 10, "warmup_s": 8, "trigger_ms": 3000},
              "recovery": {"series": 5_000, "new_logs": 500},
              "peer": {"records": 2_000, "idle_s": 3.0}, "rollouts": 1,
              "rules": {"rule_counts": [20, 200], "accounts": 20, "records": 4_000,
                        "backfill_logs": 10_000},
              "rules_100k": {"rule_counts": [20, 400], "accounts": 40, "records": 4_000,
                             "backfill_logs": 10_000, "tenant_dirs": True},
              "state": {"logs": 20_000, "burst": 10_000, "probes": 1, "trigger_ms": 2_000},
              "expiry": {"logs": 10_000, "burst": 10_000, "ttl_ms": 6_000,
                         "trigger_ms": 2_000},
              "cardinality_backfill": {"logs": 20_000},
              "churn": "quick",
              "once": {"records": 20_000, "partitions": 4, "varied": {"records": 20_000}},
              "remote_write": {"series": 500, "batches": 2, "drain_runs": 1},
              "live_rules": {"rate": 200, "trigger_ms": 2_000, "poll_ms": 500, "big": 200,
                             "adds": 1, "settle_s": 6, "round_trips": 1,
                             "watch_triggers": 3}},
    "full": {"records": 480_000, "partitions": 16, "per_batch": 160_000, "per_task": 40_000,
             "limit_records": 400_000,
             "skews": [Skew("uniform"), Skew("hot", 0.7), Skew("zipf", zipf_s=1.2)],
             "latency": {"rate": None, "seconds": 120, "warmup_s": 30, "trigger_ms": 5000},
             "recovery": {"series": 1_000_000, "new_logs": 50_000},
             "peer": {"records": 60_000, "idle_s": 8.0}, "rollouts": 3,
             "rules": {"rule_counts": [20, 1_000, 10_000], "accounts": 1_000,
                       "records": 480_000, "backfill_logs": 1_000_000},
             # issue 21: 100,000 rules over 10,000 accounts, as tenant mode takes them
             "rules_100k": {"rule_counts": [20, 100_000], "accounts": 10_000,
                            "records": 480_000, "backfill_logs": 1_000_000,
                            "tenant_dirs": True},
             # issue 21: 10,000,000 live series (no caps), probes of 2,000 ordinary logs
             "state": {"logs": 10_000_000, "burst": 1_000_000, "probes": 3},
             "expiry": {"logs": 1_000_000, "burst": 250_000, "ttl_ms": 120_000},
             "cardinality_backfill": {"logs": 1_000_000},
             # issue 58: bursts of 250,000 logs with fresh ids, twice, caps off and on
             "churn": "full",
             # issue 58: both corpora, in micro-batches of 200,000 (tasks of the source's
             # default 100,000: one wave of two on two cores) and as shipped
             "once": {"records": 1_000_000, "partitions": 16, "rounds": 2,
                      "per_batch": 200_000, "per_task": 100_000,
                      "varied": {"records": 1_000_000}},
             # issue 22: 20,000 counter series over 10 micro-batches; the uniform drain
             "remote_write": {"series": 20_000, "batches": 10, "drain_runs": 3},
             # issue 23: 2,000 logs/s, the default trigger and rules_poll, 10,000 more rules
             "live_rules": {"rate": 2_000, "trigger_ms": 5_000, "poll_ms": 2_000,
                            "big": 10_000, "adds": 3, "settle_s": 20},
             "cluster": {"master": "local-cluster[2,1,1024]",
                         "skews": [Skew("uniform"), Skew("hot", 0.7)],
                         "loss": {"rate": 3000, "before_s": 45, "after_s": 60}}},
}


def _best(run: Callable[[], dict[str, Any]], key: str = "per_s", runs: int = 2
          ) -> dict[str, Any]:
    """The fastest of ``runs`` runs of ``run`` (two but in the smoke profile), with every
    run's ``key`` under ``runs``."""
    results = [run() for _ in range(runs)]
    best = max(results, key=lambda r: r[key])
    return {**best, "runs": [r[key] for r in results]}


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; the platform's processor elsewhere):
    the ratio targets move with it, since l2m's per-log work is mostly interpreted Python
    and the ceilings it is compared with are C (interpreted Python ran 1.5–2.5× slower on
    one 2-core Xeon than on one 2-core EPYC, the C ceilings about the same)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    import pyarrow
    import pyspark

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    java = shutil.which("java") or "java"
    return {"cpus": os.cpu_count(), "cpu": cpu_model(), "memory_gib": round(mem, 1),
            "platform": platform.platform(), "python": platform.python_version(),
            "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__, "java": java,
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def targets(drains: list[dict[str, Any]], limit: dict[str, Any],
            latency: dict[str, Any] | None = None,
            recovery: dict[str, Any] | None = None,
            peer: dict[str, Any] | None = None,
            cluster: dict[str, Any] | None = None,
            rollout: dict[str, Any] | None = None,
            rule_scale: dict[str, Any] | None = None,
            issue21: dict[str, Any] | None = None,
            remote_write: dict[str, Any] | None = None,
            live_rules: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    def find(skew: str, planner: str) -> dict[str, Any] | None:
        return next((d for d in drains if d["skew"] == skew and d["planner"] == planner), None)

    uniform = find("uniform", "balanced")
    hot = find("hot 70%", "balanced")
    hot_classic = find("hot 70%", "partition")
    out = []
    ratio = round(hot["logs_per_s"] / uniform["logs_per_s"], 2) if hot and uniform else None
    out.append({"name": "hot-partition drain throughput, skew-aware / uniform",
                "goal": ">= 0.9", "measured": ratio,
                "met": None if ratio is None else ratio >= 0.9})
    spread = hot["records_per_task_max_over_mean"] if hot else None
    out.append({"name": "records per task max/mean, hot partition, skew-aware",
                "goal": "<= 1.25", "measured": spread,
                "met": None if spread is None else spread <= 1.25})
    classic = hot_classic["records_per_task_max_over_mean"] if hot_classic else None
    out.append({"name": "records per task max/mean, hot partition, per-partition plan",
                "goal": "≈ 11 (reference)", "measured": classic, "met": None})
    share = None
    if uniform and limit.get("read_parse_per_s"):
        share = round(uniform["logs_per_s"] / limit["read_parse_per_s"], 3)
    out.append({"name": "end-to-end drain / machine limit (read + parse)", "goal": ">= 0.40",
                "measured": share, "met": None if share is None else share >= 0.4})
    p99 = latency.get("p99_in_triggers") if latency else None
    out.append({"name": "p99 end-to-end latency at half max throughput, trigger intervals",
                "goal": "<= 2", "measured": p99, "met": None if p99 is None else p99 <= 2,
                **({"note": f"{latency['rate']:.0f} logs/s, trigger {latency['trigger_ms']} ms"}
                   if latency else {})})
    first = recovery.get("first_sample_s") if recovery else None
    out.append({"name": "first sample after restart with 1M counter series, s",
                "goal": "<= 30", "measured": first, "met": None if first is None else first <= 30,
                **({"note": f"{recovery['series']:,} series in the checkpoint"}
                   if recovery else {})})
    vs_peer = None
    if uniform and peer and peer.get("logs_per_s"):
        vs_peer = round(uniform["logs_per_s"] / peer["logs_per_s"], 1)
    out.append({"name": "end-to-end drain / Quix Streams peer", "goal": ">= 10",
                "measured": vs_peer, "met": None if vs_peer is None else vs_peer >= 10,
                **({"note": f"peer: {peer['processes']} processes, {peer['logs_per_s']:,} logs/s"}
                   if peer else {})})
    loss = cluster["executor_loss"]["delay_in_batches"] if cluster else None
    out.append({"name": "delay from losing one executor, micro-batches", "goal": "<= 1",
                "measured": loss, "met": None if loss is None else loss <= 1})
    gap = rollout.get("median_gap_s") if rollout else None
    out.append({"name": "rule roll-out gap, SIGTERM → first sample of the new rule, s (median)",
                "goal": "<= 15", "measured": gap, "met": None if gap is None else gap <= 15,
                **({"note": f"worst of {len(rollout['rollouts'])}: {rollout['max_gap_s']} s; "
                            "the replaced system: 45 s"} if rollout else {})})
    out += rule_targets(rule_scale)
    out += state_targets(issue21 or {}, limit)
    out += corpus_targets(issue21 or {})
    out += live_rule_targets(live_rules, rollout)
    alongside = (remote_write or {}).get("drain")
    ratio = alongside["ratio"] if alongside else None
    out.append({"name": "drain with l2m deliver running beside it / without (medians)", "goal":
                ">= 0.95 (noise)", "measured": ratio, "met": None if ratio is None
                else ratio >= 0.95,
                **({"note": f"medians of {len(alongside['on'])} runs each: "
                            f"{alongside['on_median']:,} vs {alongside['off_median']:,} logs/s;"
                            f" bests' ratio {alongside['best_ratio']}"} if alongside else {})})
    if cluster:
        hot = next((d for d in cluster["drain"] if d["skew"] == "hot 70%"
                    and d["planner"] == "balanced"), None)
        spread = hot.get("records_per_executor_max_over_mean") if hot else None
        out.append({"name": "records per executor max/mean, hot partition, skew-aware, "
                            "2 executors", "goal": "≈ 1 (reference)", "measured": spread,
                    "met": None})
    return out


def live_rule_targets(live: dict[str, Any] | None,
                      rollout: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The targets of live rule changes (benchmarks/live_rules.py)."""
    if not live:
        return []
    first = live.get("max_first_sample_triggers")
    big = live.get("big_first_sample_triggers")
    gaps = [r["longest_gap_triggers"] for r in live["reloads"]
            if r["longest_gap_triggers"] is not None]
    gap = max(gaps) if gaps else None
    restart = rollout.get("median_gap_s") if rollout else None
    return [
        {"name": "rule added → its first sample, trigger intervals (worst of "
                 f"{len([a for a in live['adds'] if a['rules_loaded'] < live['big']])})",
         "goal": "<= 2", "measured": first, "met": None if first is None else first <= 2,
         "note": f"median {live['median_first_sample_s']} s at {live['rate']:,} logs/s, "
                 f"trigger {live['trigger_ms'] / 1000:g} s"
                 + (f"; a restart roll-out: {restart} s" if restart else "")},
        {"name": f"rule added with {live['big']:,} more rules loaded → its first sample, "
                 "trigger intervals", "goal": "<= 2", "measured": big,
         "met": None if big is None else big <= 2},
        {"name": f"reload 20 → {live['big']:,} rules and back: longest gap between batches, "
                 "trigger intervals", "goal": "<= 2 (one interval's stall)", "measured": gap,
         "met": None if gap is None else gap <= 2,
         "note": f"peak JVM {live['peak_jvm_rss_mib']} MiB, Python worker "
                 f"{live['peak_python_worker_rss_mib']} MiB; after 1 and 2 round trips: "
                 + "; ".join(f"{t['jvm']} / {t['python_worker']} MiB"
                             for t in live.get("rss_after_round_trips_mib", []))},
    ]


def rule_targets(scale: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The targets of the many-rules scenario (benchmarks/rules_scale.py)."""
    if not scale:
        return []
    drains = {d["rules"]: d for d in scale["drain"]}
    most = max(drains)
    ratio = round(drains[most]["logs_per_s"] / drains[20]["logs_per_s"], 2) \
        if 20 in drains and most != 20 else None
    back = scale.get("backfill") or {}
    out = [
        {"name": f"validate {most:,} rules, s", "goal": "< 10", "measured": scale["validate_s"],
         "met": None if scale["validate_s"] is None else scale["validate_s"] < 10},
        {"name": f"drain with {most:,} rules over {scale['accounts']:,} accounts / with 20 rules",
         "goal": ">= 0.5", "measured": ratio, "met": None if ratio is None else ratio >= 0.5,
         "note": f"{drains[most]['logs_per_s']:,} vs {drains.get(20, {}).get('logs_per_s')} "
                 f"logs/s; peak JVM {drains[most]['peak_jvm_rss_mib']} MiB, Python worker "
                 f"{drains[most]['peak_python_worker_rss_mib']} MiB (default memory settings)"},
        {"name": f"backfill of {back.get('logs', 0):,} logs, example rules, warm session, "
                 "logs/s", "goal": ">= 150000", "measured": back.get("example_logs_per_s"),
         "met": None if not back else back["example_logs_per_s"] >= 150_000},
        {"name": f"backfill of {back.get('logs', 0):,} logs with {most:,} rules completes, s",
         "goal": "completes", "measured": back.get("many_s"), "met": bool(back) or None},
    ]
    return out


# Issue 21's memory goal: the shipped defaults of an executor pod (k8s/base/deployment.yaml:
# spark.executor.memory 2g + memoryOverhead 1g) for the JVM, the overhead for a Python worker.
JVM_MIB = 3 * 1024
PYTHON_WORKER_MIB = 1024


def state_targets(r: dict[str, Any], limit: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 21's targets: state at 10,000,000 live series, expiry, 100,000 rules, backfill
    at high cardinality, and the share of the consume + orjson ceiling."""
    out: list[dict[str, Any]] = []

    def add(name: str, goal: str, measured: Any, met: bool | None, note: str = "") -> None:
        out.append({"name": name, "goal": goal, "measured": measured,
                    "met": None if measured is None else met, **({"note": note} if note else {})})

    state = r.get("state")
    if state:
        live = f"{state['live_series']:,}"
        add(f"batch of {state['probe_logs']:,} logs at {live} live state entries / on empty "
            "state", "<= 1.5", state["batch_ratio"], state["batch_ratio"] <= 1.5,
            f"{state['levels'][-1]['probe_batch_ms']} vs {state['levels'][0]['probe_batch_ms']}"
            " ms (medians)")
        add(f"state bytes written per batch at {live} live entries / on empty state", "<= 2",
            state["written_ratio"], state["written_ratio"] <= 2)
        first = state["restart_first_sample_s"]
        add(f"first sample after restart with {live} live state entries, s", "< 30", first,
            first is not None and first < 30)
    expiry = r.get("expiry")
    if expiry:
        gone = expiry["state_rows_before"] - expiry["state_rows_after"]
        share = round(expiry["expiry_state_written_bytes"]
                      / max(expiry["checkpoint_bytes_before"], 1), 3)
        add("idle series expired by counter_ttl: state written by the batch after / the "
            "checkpoint", "< 0.5 (no rewrite of everything)", share, share < 0.5 and gone > 0,
            f"{gone:,} entries expired; that batch took {expiry['expiry_batch_ms']:,} ms")
    many = r.get("rules_100k")
    if many:
        drains = {d["rules"]: d for d in many["drain"]}
        most = max(drains)
        ratio = round(drains[most]["logs_per_s"] / drains[20]["logs_per_s"], 2) \
            if 20 in drains and most != 20 else None
        add(f"validate {most:,} rules (tenant folders), s", "< 30", many["validate_s"],
            many["validate_s"] is not None and many["validate_s"] < 30)
        add(f"drain with {most:,} rules over {many['accounts']:,} accounts / with 20 rules",
            ">= 0.5", ratio, ratio is not None and ratio >= 0.5,
            f"{drains[most]['logs_per_s']:,} vs {drains[20]['logs_per_s']:,} logs/s")
        jvm, worker = drains[most]["peak_jvm_rss_mib"], drains[most]["peak_python_worker_rss_mib"]
        add(f"peak JVM / Python worker MiB with {most:,} rules", f"<= {JVM_MIB} / "
            f"<= {PYTHON_WORKER_MIB} (executor pod defaults)", f"{jvm} / {worker}",
            jvm <= JVM_MIB and worker <= PYTHON_WORKER_MIB)
        back = many.get("backfill") or {}
        add(f"backfill of {back.get('logs', 0):,} logs with {most:,} rules completes, s",
            "completes", back.get("many_s"), bool(back))
    card = r.get("cardinality_backfill")
    if card:
        add(f"backfill of {card['logs']:,} logs with the unique-id rules / example rules "
            "alone", "<= 2", card["ratio"], card["ratio"] <= 2,
            f"{card['cardinality_rules']['seconds']} vs {card['example_rules']['seconds']} s; "
            f"peak JVM {card['peak_jvm_rss_mib']} MiB, Python worker "
            f"{card['peak_python_worker_rss_mib']} MiB")
    once = r.get("once")
    # The ceiling measured around the run (the higher of before and after), else the limit's.
    ceiling = (once or {}).get("ceiling", {}).get("per_s") or \
        (limit.get("consume_parse") or {}).get("per_s")
    if once and ceiling:
        # Graded on the plan issue 21's own figures were measured with: `l2m run --once` as
        # shipped (no cap per micro-batch). def2d50 re-run beside this code reproduces them
        # so (whole 0.158–0.181 against the issue's 0.165), not in the profile's 160,000-log
        # micro-batches (0.134–0.154: six more batches' fixed costs). Those micro-batches
        # stay in the table as a reference.
        shipped = once.get("shipped")
        if shipped:
            rate = batches_rate(shipped["batches"])
            ratio = round(rate / ceiling, 3)
            add(f"micro-batches of `l2m run --once` of {once['records']:,} logs, the source as "
                f"shipped ({_batches(len(shipped['batches']))}, the first's cold start "
                "included) / consume + orjson ceiling", ">= 0.5", ratio, ratio >= 0.5,
                f"{rate:,} vs {ceiling:,} logs/s")
            ratio = round(shipped["whole_logs_per_s"] / ceiling, 3)
            add(f"whole `l2m run --once` of {once['records']:,} logs, the source as shipped "
                f"({_batches(len(shipped['batches']))}), start-up included / consume + orjson "
                "ceiling", ">= 0.3", ratio, ratio >= 0.3,
                f"{shipped['whole_logs_per_s']:,} logs/s, {shipped['whole_s']} s")
        steady = round(once["steady_logs_per_s"] / ceiling, 3) \
            if once["steady_logs_per_s"] else None
        whole = round(once["whole_logs_per_s"] / ceiling, 3)
        add(f"reference: steady micro-batches of {once['per_batch']:,} logs (after the first) of "
            "`l2m run --once` / consume + orjson ceiling", REFERENCE_GOAL, steady, None,
            f"{once['steady_logs_per_s']:,} vs {ceiling:,} logs/s")
        add(f"reference: whole `l2m run --once` of {once['records']:,} logs in micro-batches of "
            f"{once['per_batch']:,}, start-up included / consume + orjson ceiling",
            REFERENCE_GOAL, whole, None,
            f"{once['whole_logs_per_s']:,} logs/s, {once['whole_s']} s; ceiling "
            f"{ceiling:,} logs/s")
    churn = r.get("churn")
    if churn:
        from benchmarks.churn import churn_targets

        out += churn_targets(churn)
    return out


# Issue 58: the share of the ceiling `l2m run --once` keeps on either corpus.
STEADY_GOAL, WHOLE_GOAL = 0.6, 0.35


def corpus_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 58's targets, for each corpus the ``once`` scenario read (the load generator's
    and :mod:`benchmarks.corpus_varied`'s): steady micro-batches and the whole run, in
    micro-batches and as shipped, each against the consume + orjson ceiling of the same
    backlog measured around its runs (the higher of before and after)."""
    once = r.get("once")
    out: list[dict[str, Any]] = []
    for run in (once, (once or {}).get("varied")):
        if not run or "corpus" not in run:
            continue
        ceiling = run["ceiling"]["per_s"]
        what = f"{run['corpus']} corpus ({run['rules']}), {run['records']:,} logs"
        around = f"ceiling {run['ceiling']['before']:,} before, {run['ceiling']['after']:,} after"
        steady = round(run["steady_logs_per_s"] / ceiling, 3) if run["steady_logs_per_s"] \
            else None
        out.append({"name": f"{what}: steady micro-batches of {run['per_batch']:,} (after the "
                            "first) / consume + orjson ceiling", "goal": f">= {STEADY_GOAL}",
                    "measured": steady, "met": None if steady is None else steady >= STEADY_GOAL,
                    "note": f"{run['steady_logs_per_s'] or 0:,} logs/s; {around}"})
        whole = round(run["whole_logs_per_s"] / ceiling, 3)
        out.append({"name": f"{what}: whole `l2m run --once` in micro-batches of "
                            f"{run['per_batch']:,}, start-up included / ceiling",
                    "goal": f">= {WHOLE_GOAL}", "measured": whole, "met": whole >= WHOLE_GOAL,
                    "note": f"{run['whole_logs_per_s']:,} logs/s, {run['whole_s']} s"})
        shipped = run.get("shipped")
        if shipped:
            whole = round(shipped["whole_logs_per_s"] / ceiling, 3)
            out.append({"name": f"{what}: whole `l2m run --once` as shipped "
                                f"({_batches(len(shipped['batches']))}), start-up included / "
                                "ceiling", "goal": f">= {WHOLE_GOAL}", "measured": whole,
                        "met": whole >= WHOLE_GOAL,
                        "note": f"{shipped['whole_logs_per_s']:,} logs/s, "
                                f"{shipped['whole_s']} s"})
    return out


# A figure shown beside the graded ones, not graded: a running stream's micro-batch size.
REFERENCE_GOAL = "— (reference)"


def _runs(run: dict[str, Any]) -> str:
    """The words "; the faster of 2 runs: 15.1 and 16.0 s" when a figure is the faster of
    several runs, else nothing."""
    runs = run.get("runs_s") or []
    if len(runs) < 2:
        return ""
    listed = ", ".join(str(s) for s in runs[:-1]) + f" and {runs[-1]}"
    return f"; the faster of {len(runs)} runs: {listed} s"


def _batches(n: int) -> str:
    return "1 batch" if n == 1 else f"{n} batches"


QUICK_GOAL = "n/a (quick)"
SMOKE_GOAL = "n/a (smoke)"
QUICK_NOTE = ("Quick profile: a smoke test of the harness on tiny data (thousands of logs, "
              "not hundreds of thousands), so start-up costs dominate every figure. Its figures "
              "are not comparable with the full profile's and are not graded against its "
              "targets; `python -m benchmarks` (the full profile, about 90 minutes on 2 cores) "
              "measures them.")
SMOKE_NOTE = ("Smoke profile: a smoke test of the harness, every scenario of the quick "
              "profile once on hundreds of logs with one-second triggers, so its "
              "figures measure nothing. They are not comparable with the full profile's and are "
              "not graded against its targets; `python -m benchmarks` (the full profile, about "
              "90 minutes on 2 cores) measures them.")
# The small profiles: what their targets say instead of a goal, and their report's note.
GOALS = {"quick": QUICK_GOAL, "smoke": SMOKE_GOAL}
NOTES = {"quick": QUICK_NOTE, "smoke": SMOKE_NOTE}


def ungraded(targets: list[dict[str, Any]], profile: str = "quick") -> list[dict[str, Any]]:
    """A small profile's targets: measured, not graded (its tiny data says nothing about
    the full profile's goals, which stay beside them as ``full_goal``)."""
    return [{**t, "goal": GOALS[profile], "full_goal": t["goal"], "met": None} for t in targets]


def outputs(profile: str) -> tuple[str, str, str]:
    """The result's JSON file, its report and its plots' prefix: the full profile's are the
    committed ``latest.json`` and ``RESULTS.md``; a small profile's carry its name
    (``quick.json``, ``QUICK.md``, ``quick-throughput.png``), so a run beside the committed
    results overwrites none of them."""
    if profile == "full":
        return "latest.json", "RESULTS.md", ""
    return f"{profile}.json", f"{profile.upper()}.md", f"{profile}-"


def _save(fig: Any, path: Path) -> str:
    """Write a finished figure as PNG and release it; returns the file name."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def plot(result: dict[str, Any], out: Path, prefix: str = "") -> list[str]:
    """The PNG plots into ``out``, each file name starting with ``prefix``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drains = result["drain"]
    files = []
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [d["case"] for d in drains]
    ax.barh(labels, [d["logs_per_s"] for d in drains],
            color=["#2b8cbe" if d["planner"] == "balanced" else "#fdae6b" for d in drains])
    limit = result["limit"].get("read_parse_per_s")
    if limit:
        ax.axvline(limit, color="grey", linestyle="--", label="machine read+parse limit")
        ax.legend(loc="lower right")
    ax.set_xlabel("logs/s (logs topic → metrics topic)")
    ax.set_title(f"Drain throughput, {result['profile']} profile, "
                 f"{result['machine']['cpus']} cores")
    files.append(_save(fig, out / f"{prefix}throughput.png"))

    fig, ax = plt.subplots(figsize=(8, 4))
    for d in drains:
        series = [b["max_over_mean"] for b in d["plans"]]
        ax.plot(range(len(series)), series, marker="o", label=d["case"])
    ax.axhline(1.25, color="grey", linestyle="--", label="target 1.25")
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("records per task, max / mean")
    ax.set_ylim(bottom=0.9)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Task balance per micro-batch")
    ax.legend(fontsize=7)
    files.append(_save(fig, out / f"{prefix}records_per_task.png"))

    scale = result.get("scale_model")
    if scale:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        rows = scale["logs_per_s"]
        for key in [k for k in rows[0] if "|" in k]:
            skew, planner = key.split("|")
            style = "-" if planner == "balanced" else "--"
            ax.plot([r["cores"] for r in rows], [r[key] for r in rows], style, marker="o",
                    label=f"{skew}, {'skew-aware' if planner == 'balanced' else 'per-partition'}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cores (partitions = max(16, cores))")
        ax.set_ylabel("modelled drain throughput, logs/s")
        ax.set_title("Scale model: split plans vs one task per partition")
        ax.legend(fontsize=7)
        files.append(_save(fig, out / f"{prefix}scale_model.png"))

    scale_rules = result.get("rule_scale")
    if scale_rules:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        drains = scale_rules["drain"]
        left.plot([d["rules"] for d in drains], [d["logs_per_s"] for d in drains], marker="o")
        left.set_xscale("log")
        left.set_xlabel("rules (20: the benchmark rules; more: tenants', account-scoped)")
        left.set_ylabel("drain throughput, logs/s")
        left.set_ylim(bottom=0)
        left.set_title("Throughput vs number of rules")
        costs = scale_rules["cost_per_log"]
        right.plot([c["rules"] for c in costs], [c["parse_us"] for c in costs], marker="o",
                   label="parse")
        right.plot([c["rules"] for c in costs], [c["route_preagg_us"] for c in costs],
                   marker="o", label="route + pre-aggregate")
        right.set_xscale("log")
        right.set_xlabel("rules")
        right.set_ylabel("µs per log, one core")
        right.set_ylim(bottom=0)
        right.set_title("Scale model: cost per log vs rules")
        right.legend(fontsize=7)
        files.append(_save(fig, out / f"{prefix}rules.png"))

    latency = result.get("latency")
    if latency and latency["cdf"]:
        fig, ax = plt.subplots(figsize=(8, 4))
        cdf = latency["cdf"]
        ax.plot([v / 1000 for v in cdf], [(i + 1) / len(cdf) for i in range(len(cdf))])
        ax.axvline(2 * latency["trigger_ms"] / 1000, color="grey", linestyle="--",
                   label="2 trigger intervals")
        ax.set_xlabel("end-to-end latency, s (log produced → counter sample produced)")
        ax.set_ylabel("fraction of samples")
        ax.set_title(f"Latency CDF at {latency['rate']:.0f} logs/s")
        ax.legend()
        files.append(_save(fig, out / f"{prefix}latency_cdf.png"))
    if result.get("rollout"):
        files.append(plot_rollout(result["rollout"], out / f"{prefix}rollout.png"))
    state = (result.get("issue21") or {}).get("state")
    if state:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        levels = state["levels"]
        live = [lv["live_series"] for lv in levels]
        left.plot(live, [lv["probe_batch_ms"] / 1000 for lv in levels], marker="o")
        left.set_xlabel("live state entries (series)")
        left.set_ylabel(f"batch of {state['probe_logs']:,} logs, s (median)")
        left.set_ylim(bottom=0)
        left.set_title("Batch time vs live series")
        right.plot(live, [lv["state_written_bytes"] / 1024 for lv in levels], marker="o",
                   color="#d95f02")
        right.set_xlabel("live state entries (series)")
        right.set_ylabel("state written by that batch, KiB")
        right.set_ylim(bottom=0)
        right.set_title("Checkpoint bytes per batch")
        files.append(_save(fig, out / f"{prefix}state.png"))
    churn = (result.get("issue21") or {}).get("churn")
    if churn:
        from benchmarks.churn import plot as plot_churn

        plot_churn(churn, out / f"{prefix}churn.png")
        files.append(f"{prefix}churn.png")
    return files


def render_markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    profile = result["profile"]
    small = profile != "full"
    lines = [
        "# Benchmark results" + (f" ({profile} profile: a smoke test)" if small else ""),
        "",
        f"Generated by `python -m benchmarks{f' --{profile}' if small else ''}`"
        f" on {m['date']}. Machine: {m['cpus']} cores"
        + (f" ({m['cpu']})" if m.get("cpu") else "")
        + f", {m['memory_gib']} GiB, {m['platform']};"
        f" Python {m['python']}, PySpark {m['pyspark']}, pyarrow {m['pyarrow']}. Broker: tansu"
        " (embedded, in memory) on the same machine. Spark `local[2]`.",
        *([""] + [f"Re-run since with `--only {','.join(r['scenarios'])}` on {r['at']} "
                  f"({r['seconds']} s"
                  + (f"; {r['cpu']}" if r.get("cpu") else "")
                  + "): their figures replace that run's, the others are from it."
                  for r in result.get("only_runs", [])]),
        "",
        "## Targets",
        "",
    ]
    if small:
        lines += [f"**{NOTES[profile]}**", "",
                  f"| target | goal | measured ({profile}) | met | full profile's goal |",
                  "|---|---|---|---|---|"]
    else:
        lines += ["| target | goal | measured | met |", "|---|---|---|---|"]
    for t in result["targets"]:
        met = GOALS[profile] if small else \
            "—" if t["met"] is None else ("yes" if t["met"] else "**no**")
        measured = "not measured yet" if t["measured"] is None else t["measured"]
        lines.append(f"| {t['name']} | {t['goal']} | {measured} | {met} |"
                     + (f" {t.get('full_goal', '')} |" if small else ""))
    if any(t["met"] is False for t in result["targets"]):
        lines += ["", "What limits the missed targets, and where the time goes: "
                  "[benchmarks/README.md](README.md#where-the-time-goes-profiles-2-cores)."]
    lim = result["limit"]
    lines += [
        "",
        "## Machine limit (read + parse)",
        "",
        "Each rate here and each local drain below is the better of two runs back to back "
        "(this machine's speed drifts); every run's figure is in `latest.json` (`runs`).",
        "",
        f"- raw confluent-kafka consume: {lim['consume']['per_s']:,} records/s "
        f"({lim['consume']['processes']} processes, {lim['consume']['records']:,} records)",
        f"- pyarrow JSON parse: {lim['parse']['per_s']:,} logs/s "
        f"({lim['parse']['mb_per_s']} MB/s, {lim['parse']['avg_log_bytes']} bytes per log)",
        f"- combined ceiling (consume then parse, same cores): {lim['read_parse_per_s']:,} logs/s",
        *([f"- consume + `orjson.loads` of every record, together, one process per core "
           f"(issue 21's ceiling): {lim['consume_parse']['per_s']:,} logs/s "
           f"({lim['consume_parse']['records']:,} records)"] if lim.get("consume_parse") else []),
        "",
        "## Drain of a backlog",
        "",
        "| scenario | records | partitions | drain s | logs/s | batches | median batch ms |"
        " records/task max/mean (worst batch) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in result["drain"]:
        lines.append(f"| {d['case']} | {d['records']:,} | {d['partitions']} | {d['drain_s']} |"
                     f" {d['logs_per_s']:,} | {d['batches']} | {d['median_batch_ms']} |"
                     f" {d['records_per_task_max_over_mean']} |")
    scale = result.get("scale_model")
    if scale:
        costs = scale["costs"]
        keys = [k for k in scale["logs_per_s"][0] if "|" in k]
        lines += [
            "",
            "## Scale model",
            "",
            f"Costs measured here: {costs['per_record_s'] * 1e6:.1f} µs of core time per log "
            f"(read to sample), {costs['per_task_s'] * 1000:.0f} ms per read task. Check against "
            "the 2-core runs (median batch, seconds): "
            + "; ".join(f"{c['case']} {c['measured_batch_s']:.2f} measured, "
                        f"{c['predicted_batch_s']:.2f} modelled" for c in scale["check"]) + ".",
            "",
            "| cores | " + " | ".join(k.replace("|balanced", ", skew-aware")
                                      .replace("|partition", ", per-partition") for k in keys)
            + " |",
            "|---|" + "---|" * len(keys),
        ]
        for row in scale["logs_per_s"]:
            lines.append(f"| {row['cores']} | " + " | ".join(f"{row[k]:,}" for k in keys) + " |")
    lat = result.get("latency")
    if lat:
        lines += [
            "",
            "## Steady state at a fixed rate",
            "",
            f"{lat['rate']:.0f} logs/s for {lat['seconds']} s after a warm-up, trigger "
            f"{lat['trigger_ms']} ms, {lat['samples']} counter samples: latency p50 "
            f"{lat['latency_ms']['p50']} ms, p99 {lat['latency_ms']['p99']} ms, max "
            f"{lat['latency_ms']['max']} ms; median batch {lat['median_batch_ms']} ms. "
            "Largest per-partition lag seen after the warm-up: "
            f"{max((max(x['lag'].values(), default=0) for x in lat['lag']), default=0)} records.",
        ]
    cluster = result.get("cluster")
    if cluster:
        loss = cluster["executor_loss"]
        lines += [
            "",
            f"## Two executors (`{cluster['master']}`)",
            "",
            "| scenario | logs/s | records/task max/mean | records/executor max/mean "
            "(worst batch) | tasks per executor (first batch) |",
            "|---|---|---|---|---|",
        ]
        for d in cluster["drain"]:
            first = d["executors"][0]["tasks"] if d["executors"] else []
            lines.append(f"| {d['case']} | {d['logs_per_s']:,} | "
                         f"{d['records_per_task_max_over_mean']} | "
                         f"{d.get('records_per_executor_max_over_mean')} | {first} |")
        lines += [
            "",
            f"Executor loss at {loss['rate']} logs/s (trigger {loss['trigger_ms']} ms): one of "
            f"{loss['executors_before']} executor JVMs killed; the longest wait for a completed "
            f"batch afterwards was {loss['worst_gap_after_kill_s']} s against "
            f"{loss['normal_gap_s']} s normally: {loss['delay_in_batches']} micro-batches of "
            "delay.",
        ]
    peer = result.get("peer")
    if peer:
        lines += [
            "",
            "## Peer: Quix Streams",
            "",
            f"The same job with Quix Streams ({peer['processes']} processes in one consumer "
            f"group, RocksDB state, a repartition topic by series) drained {peer['records']:,} "
            f"logs in {peer['drain_s']} s: {peer['logs_per_s']:,} logs/s; records per process "
            f"{peer['processed']}."
            + (" Quix Streams {quixstreams} with its own confluent-kafka {confluent-kafka} "
               "(it pins an older one than l2m's; benchmarks/peer_env.py).".format_map(
                   peer["versions"]) if peer.get("versions") else ""),
        ]
    roll = result.get("rollout")
    if roll:
        med = roll["median_phases_s"]
        lines += [
            "",
            "## Rule roll-out",
            "",
            f"`l2m run` at {roll['rate']:.0f} logs/s (trigger {roll['trigger']}); a rule is "
            "added, the process gets SIGTERM, stops gracefully and a new one starts on the same "
            "checkpoint, as a Kubernetes roll-out does (benchmarks/rollout.py). Gap from SIGTERM "
            f"to the new rule's first sample: median {roll['median_gap_s']} s, worst "
            f"{roll['max_gap_s']} s over {len(roll['rollouts'])} roll-outs (the replaced system: "
            "45 s). Median phases: " + ", ".join(f"{k} {v} s" for k, v in med.items())
            + f". JVM class-data archive: {'yes' if roll.get('jvm_archive') else 'no'}.",
        ]
    rec = result.get("recovery")
    if rec:
        lines += [
            "",
            "## Recovery",
            "",
            f"The job restarted on a checkpoint holding {rec['series']:,} live counter "
            f"series (built in {rec['initial_load_s']} s), with {rec['new_logs']:,} logs "
            f"waiting: first sample {rec['first_sample_s']} s after the restart, caught up "
            f"after {rec['caught_up_s']} s.",
        ]
    scale = result.get("rule_scale")
    if scale:
        lines += ["", "## Rules by the thousand", "",
                  f"Tenant rules (10 per account, `benchmarks/tenants.py`) over logs spread "
                  f"over {scale['accounts']:,} accounts; `l2m validate` of the largest set: "
                  f"{scale['validate_s']} s.", "",
                  *_rules_table(scale["drain"], scale["cost_per_log"])]
        back = scale.get("backfill")
        if back:
            lines += ["", f"Backfill of {back['logs']:,} logs ({back['bytes'] / 1e6:.0f} MB): "
                      f"{back['example_logs_per_s']:,} logs/s with the {back['example_rules']} "
                      f"example rules in a warm session (runs {back['example_runs_s']} s); "
                      f"{back['many_rules']:,} rules: {back['many_s']} s "
                      f"({back['many_logs_per_s']:,} logs/s, {back['many_samples']:,} samples)."]
    lines += issue21_markdown(result.get("issue21") or {})
    lines += remote_write_markdown(result.get("remote_write"))
    lines += live_rules_markdown(result.get("live_rules"), result.get("rollout"))
    histograms = RESULTS / "histograms.json"
    if not small and histograms.exists():
        # Measured apart (python -m benchmarks.histograms): its section survives a re-render.
        from benchmarks.histograms import markdown as histograms_markdown

        lines += ["", *histograms_markdown(json.loads(histograms.read_text()))]
    lines += ["", *[f"![{p}]({p})" for p in result.get("plots", [])], ""]
    return "\n".join(lines)


def _rules_table(drains: list[dict[str, Any]],
                 costs: list[dict[str, Any]] | None = None) -> list[str]:
    """A markdown table of drains by rule count (with the cost per log of each, if given)."""
    head = ["rules", "drain logs/s", "median batch ms", "peak JVM MiB", "peak Python worker MiB"]
    if costs is not None:
        head += ["parse µs/log", "route + pre-aggregate µs/log"]
    by_rules = {c["rules"]: c for c in costs or []}
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in drains:
        cells = [f"{d['rules']:,}", f"{d['logs_per_s']:,}", str(d["median_batch_ms"]),
                 str(d["peak_jvm_rss_mib"]), str(d["peak_python_worker_rss_mib"])]
        if costs is not None:
            c = by_rules.get(d["rules"], {})
            cells += [str(c.get("parse_us")), str(c.get("route_preagg_us"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def live_rules_markdown(r: dict[str, Any] | None,
                        rollout: dict[str, Any] | None) -> list[str]:
    """RESULTS.md's section for live rule changes (issue 23)."""
    if not r:
        return []
    lines = ["", "## Live rule changes", "",
             f"`l2m run` at {r['rate']:,} logs/s, trigger {r['trigger_ms'] / 1000:g} s, "
             f"`rules_poll` {r['poll_ms'] / 1000:g} s; a rule file added to its rule folder "
             "while it runs, never restarted. File written → the new rule's first sample on "
             "the metrics topic:", "",
             "| rules loaded | first sample, s | trigger intervals | reload (validate, compile, "
             "ship), s |", "|---|---|---|---|"]
    for a in r["adds"]:
        lines.append(f"| {a['rules_loaded']:,} | {a['seconds']} | {a['trigger_intervals']} | "
                     f"{a['reload_s']} |")
    lines += ["", "| reload | took, s | longest gap between batches, s | trigger intervals |",
              "|---|---|---|---|"]
    for x in r["reloads"]:
        lines.append(f"| {x['reload']} | {x['reload_s']} | {x['longest_gap_s']} | "
                     f"{x['longest_gap_triggers']} |")
    trips = r.get("rss_after_round_trips_mib") or []
    lines += ["", f"Peak resident memory over the run: JVM {r['peak_jvm_rss_mib']} MiB, "
                  f"Python worker {r['peak_python_worker_rss_mib']} MiB"
              + ("; after each round trip to "
                 f"{r['big']:,} rules and back: " + ", then ".join(
                     f"JVM {t['jvm']} MiB, worker {t['python_worker']} MiB" for t in trips)
                 if trips else "") + "."
              + (f" A rule change by restart (the roll-out above) pauses every tenant for "
                 f"{rollout['median_gap_s']} s (median)." if rollout else "")]
    return lines


def remote_write_markdown(r: dict[str, Any] | None) -> list[str]:
    """RESULTS.md's section for remote write (issue 22)."""
    if not r:
        return []
    rows = [("Kafka sink (the job's writer, Spark local[2])", r["kafka_sink"]),
            ("remote write to a receiver that only counts", r["remote_write_null"])]
    if r.get("remote_write_prometheus"):
        rows.append(("remote write to Prometheus 2.42", r["remote_write_prometheus"]))
    null = r["remote_write_null"]
    lines = ["", "## Remote write", "",
             f"{r['series']:,} counter series over {r['batches']} micro-batches "
             f"({r['kafka_sink']['samples']:,} records); delivery adds a 0 before each new "
             "series (docs/prometheus.md), so it sends more samples than the topic holds. "
             "One endpoint, the default `max_samples_per_send`, the consumer's start "
             "included.", "",
             "| output | samples | s | samples/s | requests/s |", "|---|---|---|---|---|"]
    for name, row in rows:
        lines.append(f"| {name} | {row['samples']:,} | {row['seconds']} | "
                     f"{row['samples_per_s']:,} | {row.get('requests_per_s', '—')} |")
    lines += ["", f"On the wire: {null['bytes_per_sample']} bytes per sample "
                  f"({null['bytes']:,} bytes in {null['requests']:,} requests, protobuf "
                  "`WriteRequest` in snappy block format)."]
    drain = r.get("drain")
    if drain:
        lines += ["", f"Drain of {drain['records']:,} logs ({drain['case']}) with `l2m deliver` "
                      "running beside it as its own process, delivering to the counting "
                      f"receiver, alternating with the drain alone: with {drain['on']} logs/s, "
                      f"without {drain['off']} logs/s; median on / median off = "
                      f"**{drain['ratio']}** (bests: {drain['best_ratio']}; "
                      f"{drain['requests']} requests sent during the drains)."]
    return lines


def issue21_markdown(r: dict[str, Any]) -> list[str]:
    """RESULTS.md's sections for issue 21's scenarios."""
    lines: list[str] = []
    state = r.get("state")
    if state:
        lines += ["", "## State at scale", "",
                  f"No series caps; the example rules plus a counter by a unique `request_id` "
                  f"and a gauge by `user_id` (`benchmarks/cardinality.py`); {state['logs']:,} "
                  f"logs with ids in bursts of {state['burst']:,}, after each "
                  f"{state['probes_per_level']} batches of {state['probe_logs']:,} ordinary logs "
                  "(medians below). State entries: the state store's rows — one per live "
                  "series (counters and open gauge windows), plus a few per rule and key. "
                  f"Bursts: {state['burst_logs_per_s']:,} logs/s of new series.", "",
                  "The slowest batch of each level is the first after a burst: the watermark "
                  "has passed the burst's gauge windows, and that batch closes them (their "
                  "entries deleted: work the burst brought, not the state's size).", "",
                  "| logs with ids so far | state entries | batch of 2,000 logs, ms | slowest "
                  "of them, ms | state bytes written by it | checkpoint MiB |",
                  "|---|---|---|---|---|---|"]
        for lv in state["levels"]:
            lines.append(f"| {lv['id_logs']:,} | {lv['live_series']:,} | "
                         f"{lv['probe_batch_ms']:,} | {lv.get('probe_batch_ms_max', 0):,} | "
                         f"{lv['state_written_bytes']:,.0f} | "
                         f"{lv['checkpoint_bytes'] / 2**20:,.1f} |")
        lines += ["", f"Restart of the query on all of it: first sample after "
                      f"{state['restart_first_sample_s']} s."]
    expiry = r.get("expiry")
    if expiry:
        lines += ["", f"Expiry: {expiry['logs']:,} logs with ids, then `counter_ttl` "
                      f"({expiry['ttl_ms'] / 1000:.0f} s) passes: the next batch of 2,000 logs "
                      f"took {expiry['expiry_batch_ms']:,} ms (before: "
                      f"{expiry['probe_batch_ms_before']:,} ms), state entries "
                      f"{expiry['state_rows_before']:,} → {expiry['state_rows_after']:,}, and "
                      f"wrote {expiry['expiry_state_written_bytes']:,} bytes of state against a "
                      f"checkpoint of {expiry['checkpoint_bytes_before']:,}."]
    many = r.get("rules_100k")
    if many:
        lines += ["", f"## {max(d['rules'] for d in many['drain']):,} rules in tenant folders", "",
                  f"Tenant rules (10 per account) in one folder per account, as tenant mode "
                  f"takes them, over logs spread over {many['accounts']:,} accounts; `l2m "
                  f"validate --tenants`: {many['validate_s']} s.", "",
                  *_rules_table(many["drain"])]
        back = many.get("backfill")
        if back:
            lines += ["", f"Backfill of {back['logs']:,} logs with {back['many_rules']:,} rules: "
                          f"{back['many_s']} s ({back['many_samples']:,} samples)."]
    card = r.get("cardinality_backfill")
    if card:
        lines += ["", f"Backfill of {card['logs']:,} logs with a unique id each: "
                      f"{card['cardinality_rules']['seconds']} s with the unique-id rules "
                      f"(default caps; {card['cardinality_rules']['refused_logs']:,} logs into "
                      f"overflow series), {card['example_rules']['seconds']} s with the "
                      f"example rules alone (each the faster of two runs, alternating: "
                      f"{card['cardinality_rules'].get('runs_s')} and "
                      f"{card['example_rules'].get('runs_s')} s); peak JVM "
                      f"{card['peak_jvm_rss_mib']} MiB, Python worker "
                      f"{card['peak_python_worker_rss_mib']} MiB."]
    once = r.get("once")
    if once:
        lines += ["", f"`l2m run --once` of {once['records']:,} logs over {once['partitions']} "
                      f"partitions (batches of {once['per_batch']:,}), as a user runs it: "
                      f"{once['whole_s']} s in all ({once['whole_logs_per_s']:,} logs/s, "
                      f"start-up included{_runs(once)}); steady batches "
                      f"{once['steady_logs_per_s']:,} logs/s."
                      + (" The consume + `orjson` ceiling just before and after it"
                         + (f", over {once['ceiling']['records']:,} logs"
                            if "records" in once["ceiling"] else "")
                         + f": {once['ceiling']['before']:,} and "
                         f"{once['ceiling']['after']:,} logs/s." if once.get("ceiling") else "")
                      + (f" JVM class-data archive: {'yes' if once['jvm_archive'] else 'no'}."
                         if "jvm_archive" in once else "")
                      + (f" The same backlog with the source as shipped (no cap per "
                         f"micro-batch: {_batches(len(once['shipped']['batches']))}): "
                         f"{once['shipped']['whole_s']} s in all "
                         f"({once['shipped']['whole_logs_per_s']:,} logs/s"
                         f"{_runs(once['shipped'])}), its micro-batches "
                         f"{batches_rate(once['shipped']['batches']):,} logs/s — the plan "
                         "issue 21's targets are graded on (benchmarks/README.md, "
                         "\"Which plan is graded\")."
                         if once.get("shipped") else "")]
    varied = (once or {}).get("varied")
    if varied:
        lines += ["", f"The second corpus (issue 58: `benchmarks/corpus_varied.py`, rules "
                      f"`{varied['rules']}`), {varied['records']:,} logs over "
                      f"{varied['partitions']} partitions: in micro-batches of "
                      f"{varied['per_batch']:,} (tasks of {varied['per_task']:,}) "
                      f"{varied['whole_s']} s in all ({varied['whole_logs_per_s']:,} logs/s"
                      f"{_runs(varied)}), steady batches {varied['steady_logs_per_s'] or 0:,} "
                      f"logs/s"
                      + (f"; as shipped ({_batches(len(varied['shipped']['batches']))}) "
                         f"{varied['shipped']['whole_s']} s "
                         f"({varied['shipped']['whole_logs_per_s']:,} logs/s"
                         f"{_runs(varied['shipped'])})" if varied.get("shipped") else "")
                      + f". The consume + `orjson` ceiling of the same backlog just before and "
                        f"after: {varied['ceiling']['before']:,} and "
                        f"{varied['ceiling']['after']:,} logs/s."]
    churn = r.get("churn")
    if churn:
        from benchmarks.churn import churn_markdown

        lines += churn_markdown(churn)
    return lines


def run_cluster(bootstrap: str, profile: dict[str, Any], rules: list[Any],
                workdir: Path) -> dict[str, Any]:
    """Two executor JVMs (local-cluster): drains with both plans, then the loss of one
    executor at a steady rate."""
    spec = profile["cluster"]
    spark = session_for(JobConfig(master=spec["master"], spark={
        "spark.sql.shuffle.partitions": "2", "spark.executor.memory": "1g"}))
    run_drain(spark, bootstrap, DrainCase(2_000, 2, Skew(), "balanced", 2_000, 1_000), rules,
              workdir)  # warm-up
    drains = []
    for skew in spec["skews"]:
        for planner in ("balanced", "partition"):
            case = DrainCase(profile["records"], profile["partitions"], skew, planner,
                             profile["per_batch"], profile["per_task"])
            res = run_drain(spark, bootstrap, case, rules, workdir)
            res["case"] = f"{res['case']}, 2 executors"
            worst = max((b["records_max_over_mean"] for b in res["executors"]), default=None)
            res["records_per_executor_max_over_mean"] = worst
            print(f"{res['case']:<44} {res['logs_per_s']:>8,} logs/s  tasks max/mean "
                  f"{res['records_per_task_max_over_mean']}  executors max/mean {worst}",
                  file=sys.stderr)
            drains.append(res)
    loss = run_executor_loss(spark, bootstrap, rules, workdir, **spec["loss"])
    print(f"executor loss: worst gap {loss['worst_gap_after_kill_s']} s against "
          f"{loss['normal_gap_s']} s normally ({loss['delay_in_batches']} batches of delay)",
          file=sys.stderr)
    spark.stop()
    return {"master": spec["master"], "drain": drains, "executor_loss": loss}


def run_peer_scenario(bootstrap: str, profile: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The Quix Streams peer drains a uniform backlog of the same logs with the same rules."""
    topic = f"peer-logs-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [topic], partitions=profile["partitions"])
    records = profile["peer"]["records"]
    preload(LoadSpec(bootstrap, topic, profile["partitions"], records))
    return run_peer(bootstrap, topic, profile["partitions"], records + profile["partitions"],
                    processes=os.cpu_count() or 2, workdir=workdir,
                    idle_s=profile["peer"]["idle_s"])


def write_outputs(result: dict[str, Any], out: Path) -> None:
    """The targets, the scale model, the plots, the JSON and the report of ``result`` (its
    ``profile`` names the files: :func:`outputs`) into ``out``."""
    profile = result["profile"]
    data, report, prefix = outputs(profile)
    result["scale_model"] = model(result["drain"], cores_measured=2)
    result["targets"] = targets(result["drain"], result["limit"], result.get("latency"),
                                result.get("recovery"), result.get("peer"),
                                result.get("cluster"), result.get("rollout"),
                                result.get("rule_scale"), result.get("issue21"),
                                result.get("remote_write"), result.get("live_rules"))
    if profile != "full":
        result["targets"] = ungraded(result["targets"], profile)
    result["plots"] = plot(result, out, prefix=prefix)
    (out / data).write_text(json.dumps(result, indent=2))
    markdown = render_markdown(result)
    (out / report).write_text(markdown)
    if profile == "full" and out.resolve() == RESULTS.resolve():
        # The copy beside README.md: its links to results/ files gain the folder.
        (ROOT / "benchmarks" / "RESULTS.md").write_text(
            markdown.replace("](", "](results/").replace("](results/../", "]("))


def results_folder(out: str | None, quick: bool) -> Path:
    """``--out``, else: the committed results for the full profile, ``./bench-results`` (in
    the working directory, not the source tree) for a small one (``quick``: the quick or
    the smoke profile)."""
    if out:
        return Path(out)
    return Path.cwd() / "bench-results" if quick else RESULTS


def render_only(out: Path, profile: str) -> int:
    """Recompute the targets, model, plots and report of ``profile``'s result in ``out``."""
    result = json.loads((out / outputs(profile)[0]).read_text())
    write_outputs(result, out)
    return 0


# Issue 21's scenarios, each also runnable alone (``--only``) into an existing result.
ISSUE21 = ("state", "expiry", "rules_100k", "churn", "cardinality_backfill", "once")
# Scenarios run as their own processes, with the profile's session stopped.
ALONE = ("cardinality_backfill", "once")
# What --only can re-run: the drains (with the machine's limit they are compared with), the
# rules by the thousand, and issue 21's scenarios.
ONLY = ("drain", "rules", "remote_write", "live_rules", *ISSUE21)


def ceiling(bootstrap: str, profile: dict[str, Any], records: int | None = None
            ) -> dict[str, Any]:
    """The consume + orjson ceiling (:func:`benchmarks.limits.consume_parse_rate`) over
    ``records`` logs (the profile's ``limit_records`` unless given), the better of two runs
    like every rate a target compares."""
    return _best(lambda: consume_parse_rate(bootstrap, records or profile["limit_records"],
                                            profile["partitions"],
                                            processes=os.cpu_count() or 2),
                 runs=profile.get("best_of", 2))


def run_issue21(spark: SparkSession | None, bootstrap: str, profile: dict[str, Any],
                workdir: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """The named issue 21 scenarios; ``spark`` (a warm session) for all but :data:`ALONE`,
    which run as their own processes (start them with the session stopped): ``l2m run
    --once``, and the backfills in a session started as ``l2m backfill`` starts one."""
    # Here, not at the top: benchmarks.cardinality takes machine() from this module.
    from benchmarks.cardinality import run_expiry, run_state_scale

    out: dict[str, Any] = {}
    if "state" in names and spark is not None:
        out["state"] = run_state_scale(spark, bootstrap, workdir, **profile["state"])
        print(f"state: {out['state']['live_series']:,} live entries, probe batch ratio "
              f"{out['state']['batch_ratio']}, bytes written ratio "
              f"{out['state']['written_ratio']}, restart first sample "
              f"{out['state']['restart_first_sample_s']} s", file=sys.stderr)
    if "expiry" in names and spark is not None:
        out["expiry"] = run_expiry(spark, bootstrap, workdir, **profile["expiry"])
        print(f"expiry: {out['expiry']['state_rows_before']:,} → "
              f"{out['expiry']['state_rows_after']:,} entries, that batch "
              f"{out['expiry']['expiry_batch_ms']:,} ms", file=sys.stderr)
    if "rules_100k" in names and spark is not None:
        out["rules_100k"] = run_rule_scale(spark, bootstrap, workdir, profile["rules_100k"],
                                           profile)
    if "churn" in names and spark is not None:
        # Issue 58: new series per second in bursts of fresh ids, caps off and on.
        from benchmarks.churn import PROFILES as CHURN_SIZES
        from benchmarks.churn import run_churn

        out["churn"] = run_churn(spark, bootstrap, workdir, **CHURN_SIZES[profile["churn"]])
        for mode, summary in out["churn"]["modes"].items():
            print(f"churn ({mode}): {summary['new_series_per_s']:,} new series/s in bursts, "
                  f"trickle ratio {summary['trickle_ratio']}", file=sys.stderr)
    if "cardinality_backfill" in names and spark is None:
        # Its own process: a session started as `l2m backfill` starts one (its JIT differs
        # from the streaming session's, l2m.runtime.session.BATCH_JIT).
        path = workdir / "cardinality-backfill.json"
        # From the source tree (benchmarks/ is not installed; `l2m bench` runs anywhere).
        spec = profile["cardinality_backfill"]
        subprocess.run([sys.executable, "-m", "benchmarks.cardinality", "--logs",
                        str(spec["logs"]), "--repeats", str(spec.get("repeats", 2)),
                        "--backfill-json", str(path)], check=True, timeout=3600, cwd=ROOT)
        out["cardinality_backfill"] = json.loads(path.read_text())
    if "once" in names and spark is None:
        spec = profile["once"]
        # The ceiling each corpus is compared with is measured just before and just after its
        # runs, over the very backlog they read (benchmarks.once.run_once): this machine's
        # speed drifts by half within the hour (197k → 298k logs/s), so a ceiling from the
        # start of the profile says little about this run. Over as many logs as the run
        # reads, as issue 21 measured it: over the profile's 400,000 the consumers' start
        # weighed more, and the ceiling read 15–30% lower.
        out["once"] = run_once(bootstrap, workdir, spec["records"], spec["partitions"],
                               spec.get("per_batch", profile["per_batch"]),
                               spec.get("per_task", profile["per_task"]),
                               spec.get("rounds", 1))
        varied = spec.get("varied")
        if varied:
            # Issue 58: a corpus and rules l2m was not tuned on, read the same way.
            out["once"]["varied"] = run_once(
                bootstrap, workdir, varied["records"], spec["partitions"],
                varied.get("per_batch", spec.get("per_batch", profile["per_batch"])),
                varied.get("per_task", spec.get("per_task", profile["per_task"])),
                spec.get("rounds", 1), corpus="varied",
                shipped_plan=varied.get("shipped", True))
        for run in (out["once"], out["once"].get("varied")):
            if run:
                print(f"run --once ({run['corpus']}): steady {run['steady_logs_per_s']:,} "
                      f"logs/s, whole {run['whole_logs_per_s']:,} logs/s ({run['whole_s']} s), "
                      f"ceiling {run['ceiling']['per_s']:,}", file=sys.stderr)
    return out


def measure_limit(bootstrap: str, profile: dict[str, Any]) -> dict[str, Any]:
    """The machine's read + parse limit: consume and parse timed apart, and the consume +
    ``orjson`` ceiling (:func:`benchmarks.limits.consume_parse_rate`)."""
    # This machine's speed drifts by a quarter within an hour and jumps between runs of
    # a few seconds: every rate a target compares (the limit's two parts, the local
    # drains) is the better of two runs back to back, all of them alike.
    consume = _best(lambda: consume_rate(bootstrap, profile["limit_records"],
                                         profile["partitions"],
                                         processes=os.cpu_count() or 2),
                    runs=profile.get("best_of", 2))
    parse = _best(lambda: parse_rate(min(profile["limit_records"], 200_000)),
                  runs=profile.get("best_of", 2))
    per_core_parse = parse["per_s"] / (os.cpu_count() or 1)
    per_core_consume = consume["per_s"] / consume["processes"]
    cores = os.cpu_count() or 1
    combined = cores / (1 / per_core_consume + 1 / per_core_parse)
    print(f"machine limit: consume {consume['per_s']:,}/s, parse {parse['per_s']:,}/s, "
          f"read+parse {round(combined):,}/s", file=sys.stderr)
    return {"consume": consume, "parse": parse, "read_parse_per_s": round(combined),
            "consume_parse": ceiling(bootstrap, profile)}


def run_drains(spark: SparkSession, bootstrap: str, profile: dict[str, Any],
               rules: list[Any], workdir: Path) -> list[dict[str, Any]]:
    """The drains of every skew with both planners, each the better of two runs."""
    drains = []
    for skew in profile["skews"]:
        for planner in ("balanced", "partition"):
            case = DrainCase(profile["records"], profile["partitions"], skew, planner,
                             profile["per_batch"], profile["per_task"])
            res = _best(lambda case=case: run_drain(spark, bootstrap, case, rules, workdir),
                        key="logs_per_s", runs=profile.get("best_of", 2))
            print(f"{res['case']:<32} {res['logs_per_s']:>8,} logs/s "
                  f"(runs {res['runs']})  "
                  f"tasks max/mean {res['records_per_task_max_over_mean']}",
                  file=sys.stderr)
            drains.append(res)
    return drains


def run_live(spark: SparkSession, bootstrap: str, profile: dict[str, Any],
             workdir: Path) -> dict[str, Any]:
    """Issue 23's scenario: rules added to a running job, and a reload to many rules and
    back (benchmarks/live_rules.py)."""
    out = run_live_rules(spark, bootstrap, workdir, **profile["live_rules"])
    print(f"live rules: first sample after {out['median_first_sample_s']} s (median), "
          f"worst {out['max_first_sample_triggers']} triggers; with {out['big']:,} rules "
          f"{out['big_first_sample_triggers']} triggers", file=sys.stderr)
    return out


def run_remote_write(spark: SparkSession, bootstrap: str, profile: dict[str, Any],
                     rules: list[Any], workdir: Path) -> dict[str, Any]:
    """Issue 22's scenario: remote write's rate beside the Kafka sink's, and the uniform drain
    with ``l2m deliver`` beside it or not."""
    spec = profile["remote_write"]
    out = run_throughput(spark, bootstrap, spec["series"], spec["batches"])
    case = DrainCase(profile["records"], profile["partitions"], Skew(), "balanced",
                     profile["per_batch"], profile["per_task"])
    out["drain"] = run_drain_alongside(spark, bootstrap, case, rules, workdir,
                                       runs=spec["drain_runs"])
    print(f"remote write: {out['remote_write_null']['samples_per_s']:,} samples/s (Kafka sink "
          f"{out['kafka_sink']['samples_per_s']:,}); drain with deliver / without "
          f"{out['drain']['ratio']}", file=sys.stderr)
    return out


def run_only(names: tuple[str, ...], out: Path, profile_name: str) -> int:
    """Run some of issue 21's scenarios into the existing result and re-render it."""
    path = out / outputs(profile_name)[0]
    result = json.loads(path.read_text())
    profile = PROFILES[profile_name]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        if "drain" in names:
            result["limit"] = measure_limit(broker.bootstrap, profile)
        # Scenarios with their own code below; the rest of issue 21's run by run_issue21.
        own = ("rules", "drain", "remote_write", "live_rules")
        in_session = tuple(n for n in names if n not in (*ALONE, *own))
        found: dict[str, Any] = {}
        if in_session or set(own) & set(names):
            spark = session_for(JobConfig(master="local[2]",
                                          spark={"spark.sql.shuffle.partitions": "2"}))
            # As the full run does before its first measured drain: one unmeasured drain,
            # or the session's first batch (≈ 10 s) lands in the first figure.
            run_drain(spark, broker.bootstrap,
                      DrainCase(profile["records"], profile["partitions"], Skew(), "balanced",
                                profile["per_batch"], profile["per_task"]),
                      list(load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules), Path(tmp))
            if "drain" in names:
                rules = list(load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules)
                result["drain"] = run_drains(spark, broker.bootstrap, profile, rules, Path(tmp))
            if "rules" in names:
                result["rule_scale"] = run_rule_scale(spark, broker.bootstrap, Path(tmp),
                                                      profile["rules"], profile)
            found.update(run_issue21(spark, broker.bootstrap, profile, Path(tmp), in_session))
            if "remote_write" in names:
                result["remote_write"] = run_remote_write(
                    spark, broker.bootstrap, profile,
                    list(load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules), Path(tmp))
            if "live_rules" in names:
                result["live_rules"] = run_live(spark, broker.bootstrap, profile, Path(tmp))
            spark.stop()
        alone = tuple(n for n in ALONE if n in names)
        if alone:
            found.update(run_issue21(None, broker.bootstrap, profile, Path(tmp), alone))
    result.setdefault("issue21", {}).update(found)
    result.setdefault("only_runs", []).append(
        {"scenarios": list(names), "seconds": round(time.monotonic() - started, 1),
         "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model()})
    write_outputs(result, out)
    for t in result["targets"]:
        print(f"target: {t['name']}: goal {t['goal']}, measured {t['measured']}, met {t['met']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="tiny data, a few minutes (a smoke test of the harness)")
    size.add_argument("--smoke", action="store_true",
                      help="every scenario once on hundreds of logs, one-second triggers "
                      "(the harness's own test)")
    ap.add_argument("--out", help="results folder (default: the full profile "
                    "benchmarks/results, the committed results; --quick and --smoke "
                    "./bench-results)")
    ap.add_argument("--render", action="store_true",
                    help="only recompute targets, model, plots and RESULTS.md from the JSON")
    ap.add_argument("--only", help="run only these scenarios (comma-separated: "
                    f"{', '.join(ONLY)}) into the existing results, and re-render them")
    args = ap.parse_args(argv)
    profile_name = "smoke" if args.smoke else "quick" if args.quick else "full"
    small = profile_name != "full"
    out = results_folder(args.out, small)
    if args.render:
        return render_only(out, profile_name)
    if args.only:
        names = tuple(n.strip() for n in args.only.split(",") if n.strip())
        unknown = [n for n in names if n not in ONLY]
        if unknown:
            ap.error(f"--only: unknown scenario(s) {', '.join(unknown)}; "
                     f"known: {', '.join(ONLY)}")
        existing = out / outputs(profile_name)[0]
        if not existing.is_file():
            ap.error(f"--only adds to the results in {existing}, which does not exist: run "
                     f"the whole profile{f' (--{profile_name})' if small else ''} into it first")
        return run_only(names, out, profile_name)
    profile = PROFILES[profile_name]
    out.mkdir(parents=True, exist_ok=True)
    rules = list(load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules)
    started = time.monotonic()
    result: dict[str, Any] = {"profile": profile_name, "machine": machine()}
    # Wall seconds of each scenario, set-up included: where a profile's time goes.
    phases: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(name: str) -> Iterator[None]:
        begun = time.monotonic()
        yield
        phases[name] = round(time.monotonic() - begun, 1)
        print(f"({name}: {phases[name]} s)", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        with phase("limit"):
            result["limit"] = measure_limit(broker.bootstrap, profile)
        outside: dict[str, Any] = {}

        def run_outside() -> None:
            """The scenarios that start processes of their own: ``l2m backfill``'s session,
            ``l2m run --once``, the roll-out's ``l2m run``, the peer."""
            with phase("cardinality_backfill, once"):
                outside["issue21"] = run_issue21(None, broker.bootstrap, profile, Path(tmp),
                                                 ALONE)
            with phase("rollout"):
                outside["rollout"] = run_rollout(broker.bootstrap, Path(tmp),
                                                 rollouts=profile["rollouts"],
                                                 **profile.get("rollout", {}))
            outside["rollout"].pop("log")
            print(f"roll-out: median gap {outside['rollout']['median_gap_s']} s, phases "
                  f"{outside['rollout']['median_phases_s']}", file=sys.stderr)
            with phase("peer"):
                outside["peer"] = run_peer_scenario(broker.bootstrap, profile, Path(tmp))
            print(f"peer (Quix Streams, {outside['peer']['processes']} processes): "
                  f"{outside['peer']['logs_per_s']:,} logs/s, records per process "
                  f"{outside['peer']['processed']}", file=sys.stderr)

        # The smoke profile's overlap: their peak memory figures then count the processes
        # beside them too (PeakMemory samples every descendant of this process).
        beside = ThreadPoolExecutor(1).submit(run_outside) if profile.get("overlap") \
            else None
        with phase("session"):
            spark = session_for(JobConfig(master="local[2]",
                                          spark={"spark.sql.shuffle.partitions": "2"}))
        # Warm the JVM, the Python workers and the state store code before measuring: the
        # first micro-batch of a session costs about 10 s that no later scenario pays, and
        # each new Python worker's first task ~0.3 s more (its heap grows: ~10k page faults
        # for a 40k-log task). Spark starts more workers as tasks overlap; after a warm-up of
        # 2,000 logs, or of one micro-batch, the first measured drain still met cold workers
        # and ran 10-25% slower than the same drain repeated. So: one drain of the first
        # measured case's shape, unmeasured (not in the smoke profile: it measures nothing).
        with phase("drain"):
            if profile.get("warm_up", True):
                run_drain(spark, broker.bootstrap,
                          DrainCase(profile["records"], profile["partitions"], Skew(),
                                    "balanced", profile["per_batch"], profile["per_task"]),
                          rules, Path(tmp))
            drains = run_drains(spark, broker.bootstrap, profile, rules, Path(tmp))
        with phase("latency"):
            lat_cfg = dict(profile["latency"])
            uniform = next(d for d in drains
                           if d["skew"] == "uniform" and d["planner"] == "balanced")
            rate = lat_cfg.pop("rate") or uniform["logs_per_s"] / 2
            latency = run_latency(spark, broker.bootstrap, rules, Path(tmp), rate=rate,
                                  **lat_cfg)
        print(f"latency at {rate:.0f} logs/s: p50 {latency['latency_ms']['p50']} ms, "
              f"p99 {latency['latency_ms']['p99']} ms", file=sys.stderr)
        with phase("recovery"):
            recovery = run_recovery(spark, broker.bootstrap, Path(tmp), **profile["recovery"])
        with phase("rules"):
            rule_scale = run_rule_scale(spark, broker.bootstrap, Path(tmp), profile["rules"],
                                        profile)
        with phase("state, expiry, rules_100k, churn"):
            issue21 = run_issue21(spark, broker.bootstrap, profile, Path(tmp),
                                  tuple(n for n in ISSUE21 if n not in ALONE))
        with phase("remote_write"):
            remote_write = run_remote_write(spark, broker.bootstrap, profile, rules, Path(tmp))
        with phase("live_rules"):
            live_rules = run_live(spark, broker.bootstrap, profile, Path(tmp))
        spark.stop()  # the peer and the roll-outs get the cores to themselves
        if beside is None:
            run_outside()
        else:
            beside.result()  # its error, if any, raised here
        issue21.update(outside["issue21"])
        rollout, peer = outside["rollout"], outside["peer"]
        cluster = None
        if "cluster" in profile:
            with phase("cluster"):
                cluster = run_cluster(broker.bootstrap, profile, rules, Path(tmp))
        print(f"recovery with {recovery['series']:,} series: first sample after "
              f"{recovery['first_sample_s']} s, caught up after {recovery['caught_up_s']} s",
              file=sys.stderr)
    result["drain"] = drains
    result["peer"] = peer
    result["cluster"] = cluster
    result["latency"] = latency
    result["recovery"] = recovery
    result["rollout"] = rollout
    result["rule_scale"] = rule_scale
    result["issue21"] = issue21
    result["remote_write"] = remote_write
    result["live_rules"] = live_rules
    result["seconds"] = round(time.monotonic() - started, 1)
    result["phases_s"] = phases
    write_outputs(result, out)
    print(f"{'scenario':<32} {'logs/s':>9} {'max/mean':>9}")
    for d in drains:
        print(f"{d['case']:<32} {d['logs_per_s']:>9,} {d['records_per_task_max_over_mean']!s:>9}")
    if small:
        print(NOTES[profile_name].replace("`", ""))
    for t in result["targets"]:
        if small:
            print(f"target: {t['name']}: measured {t['measured']} ({profile_name}; not graded, "
                  f"the full profile's goal is {t['full_goal']})")
        else:
            print(f"target: {t['name']}: goal {t['goal']}, measured {t['measured']}, "
                  f"met {t['met']}")
    print(f"({result['seconds']} s; results in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
