"""Rules by the thousand (issue 10): the cost of the number of rules.

* ``validate`` of the tenants' rule file (``l2m validate``, a fresh process), seconds;
* drain throughput of the same backlog — logs spread over the tenant accounts — with 20
  (the benchmark rules), … 10,000 rules (:mod:`benchmarks.tenants`), with the peak resident
  memory of the driver JVM and of the Python workers under l2m's default settings;
* the in-task cost per log (parse + route + pre-aggregate, one process) against the number
  of rules: the scale model's rule-count axis;
* backfill of ``backfill_logs`` logs with the example rules (a warm session: the second of
  two runs) and with the 10,000 rules."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.drain import DrainCase, run_drain
from benchmarks.load import Skew
from benchmarks.tenants import RULES_PER_ACCOUNT, write_rules, write_tenant_dirs
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.policy.tenancy import Tenancy
from l2m.rules.loader import load_rules
from l2m.rules.model import Rule

ROOT = Path(__file__).resolve().parent.parent


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(root: int) -> list[tuple[int, str]]:
    """(pid, command name) of every process below ``root``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        pid = int(stat.parent.name)
        names[pid] = text[text.index("(") + 1:text.rindex(")")]
        parent = int(text[text.rindex(")") + 2:].split()[1])
        children.setdefault(parent, []).append(pid)
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append((child, names.get(child, "?")))
            stack.append(child)
    return out


class PeakMemory:
    """Samples the resident memory of this process's JVM and Python workers."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.jvm = 0.0
        self.python_worker = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def now() -> tuple[float, float]:
        """The resident memory right now: the JVM's, and the largest Python worker's (MiB)."""
        jvm = worker = 0.0
        for pid, name in _descendants(os.getpid()):
            rss = _rss_mib(pid)
            if name == "java":
                jvm = max(jvm, rss)
            elif name.startswith("python"):
                worker = max(worker, rss)
        return jvm, worker

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for pid, name in _descendants(os.getpid()):
                rss = _rss_mib(pid)
                if name == "java":
                    self.jvm = max(self.jvm, rss)
                elif name.startswith("python"):
                    self.python_worker = max(self.python_worker, rss)


def rule_sets(counts: list[int], workdir: Path, tenant_dirs: bool = False
              ) -> dict[int, tuple[list[Rule], Path | None]]:
    """The rules of each size: 20 = the benchmark rules, else tenants' rules (10 each), in
    one file with an ``account`` per rule, or (``tenant_dirs``) one folder per account as
    tenant mode takes them."""
    out: dict[int, tuple[list[Rule], Path | None]] = {}
    for n in counts:
        if n == 20:
            out[n] = (list(load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules), None)
        elif tenant_dirs:
            path = write_tenant_dirs(workdir / f"tenants-{n}", n // RULES_PER_ACCOUNT)
            out[n] = (list(load_rules([path], tenancy=Tenancy()).rules), path)
        else:
            path = write_rules(workdir / f"tenants-{n}.yaml", n // RULES_PER_ACCOUNT)
            out[n] = (list(load_rules([path]).rules), path)
    return out


def validate_seconds(path: Path) -> float:
    """Wall time of ``l2m validate`` on the file (a folder: ``--tenants``), as a user runs
    it."""
    started = time.monotonic()
    what = ["--tenants", str(path)] if path.is_dir() else [str(path)]
    subprocess.run([sys.executable, "-m", "l2m.cli", "validate", *what], check=True,
                   capture_output=True)
    return round(time.monotonic() - started, 2)


def cost_per_log(sets: dict[int, tuple[list[Rule], Path | None]], accounts: int,
                 logs: int = 20_000) -> list[dict[str, Any]]:
    """Per log, one process: parse, route (fan out) and pre-aggregate, by number of rules."""
    from l2m.engine.parse import parse_lines
    from l2m.engine.pipeline import TaskPipeline
    from l2m.engine.routing import plan_for

    lines = list(LogGenerator(GeneratorConfig(seed=4, rate_per_s=2000,
                                              accounts=accounts)).lines(logs))
    out = []
    for n, (rules, _path) in sorted(sets.items()):
        routing = plan_for(rules)
        best: dict[str, float] = {}
        for _ in range(2):
            started = time.perf_counter()
            batches = [parse_lines(lines[i:i + 10_000], routing.plan)
                       for i in range(0, logs, 10_000)]
            parsed = time.perf_counter()
            pipeline = TaskPipeline(routing)
            for batch in batches:
                pipeline.add(batch)
            partials = sum(b.num_rows for b in pipeline.finish())
            done = time.perf_counter()
            for key, value in (("parse_us", parsed - started), ("route_preagg_us", done - parsed)):
                best[key] = min(best.get(key, 1e9), value / logs * 1e6)
        out.append({"rules": n, "parse_us": round(best["parse_us"], 2),
                    "route_preagg_us": round(best["route_preagg_us"], 2),
                    "total_us": round(best["parse_us"] + best["route_preagg_us"], 2),
                    "match_rows_per_log": round(pipeline.match_rows / logs, 2),
                    "partials": partials})
    return out


def run_rule_scale(spark: SparkSession, bootstrap: str, workdir: Path,
                   spec: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    counts: list[int] = spec["rule_counts"]
    accounts = spec["accounts"]
    sets = rule_sets(counts, workdir, spec.get("tenant_dirs", False))
    largest = max(counts)
    result: dict[str, Any] = {"accounts": accounts, "rule_counts": counts,
                              "tenant_dirs": spec.get("tenant_dirs", False)}
    path = sets[largest][1]
    result["validate_s"] = validate_seconds(path) if path else None
    result["cost_per_log"] = cost_per_log(sets, accounts, spec.get("cost_logs", 20_000))
    drains = []
    for n in counts:
        rules, _ = sets[n]
        case = DrainCase(spec["records"], profile["partitions"], Skew(), "balanced",
                         profile["per_batch"], profile["per_task"], accounts=accounts)
        with PeakMemory() as peak:
            res = run_drain(spark, bootstrap, case, rules, workdir)
        drains.append({"rules": n, "logs_per_s": res["logs_per_s"], "drain_s": res["drain_s"],
                       "median_batch_ms": res["median_batch_ms"],
                       "peak_jvm_rss_mib": round(peak.jvm),
                       "peak_python_worker_rss_mib": round(peak.python_worker)})
        print(f"{n:>6} rules over {accounts} accounts: {res['logs_per_s']:,} logs/s, JVM "
              f"{peak.jvm:.0f} MiB, Python worker {peak.python_worker:.0f} MiB", file=sys.stderr)
    result["drain"] = drains
    result["backfill"] = run_backfills(spark, workdir, spec["backfill_logs"], sets[largest][0],
                                       accounts, spec.get("backfill_runs", 2))
    return result


def run_backfills(spark: SparkSession, workdir: Path, logs: int, many: list[Rule],
                  accounts: int, example_runs: int = 2) -> dict[str, Any]:
    """Backfill ``logs`` logs: the example rules (the last of ``example_runs`` runs: with
    two, a warm session), then the many rules."""
    from l2m.batch.backfill import run_backfill

    path = workdir / "backfill.jsonl"
    gen = LogGenerator(GeneratorConfig(seed=12, rate_per_s=200, accounts=accounts))
    with path.open("wb") as f:
        for start in range(0, logs, 10_000):
            f.write(b"\n".join(gen.lines(min(10_000, logs - start))) + b"\n")
    examples = list(load_rules([ROOT / "rules"]).rules)
    runs = []
    for _ in range(example_runs):
        summary = run_backfill(spark, examples, [str(path)], workdir / "out.jsonl",
                               progress=False)
        runs.append(round(summary.seconds, 2))
    many_summary = run_backfill(spark, many, [str(path)], workdir / "out-many.jsonl",
                                progress=False)
    warm = runs[-1]
    out = {"logs": logs, "bytes": path.stat().st_size, "example_rules": len(examples),
           "example_runs_s": runs, "example_logs_per_s": round(logs / warm),
           "many_rules": len(many), "many_s": round(many_summary.seconds, 2),
           "many_logs_per_s": round(logs / many_summary.seconds),
           "many_samples": many_summary.samples}
    print(f"backfill {logs:,} logs: {out['example_logs_per_s']:,} logs/s with the examples "
          f"(warm), {len(many):,} rules in {out['many_s']} s", file=sys.stderr)
    path.unlink()
    return out
