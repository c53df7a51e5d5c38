"""The churn scenario (issue 58, 2): what a new series costs a warm streaming job.

    python -m benchmarks.churn [--profile full|quick|smoke] [--out DIR] [--modes uncapped,capped]

Input: the cardinality rules (:func:`benchmarks.cardinality.cardinality_rules`: the example
rules plus a counter by a unique ``request_id`` and a gauge by ``user_id`` per one-minute
window) and generated logs on the embedded broker, one running query in ``local[2]``. Per
mode — ``uncapped`` (no series caps) and ``capped`` (the job's default caps) — a job of its
own: an unmeasured warm-up batch, a batch of ``burst`` ordinary logs (the steady rate),
``probes`` batches of :data:`~benchmarks.cardinality.PROBE` ordinary logs (the trickle
before), ``bursts`` bursts of ``burst`` logs with a fresh ``request_id`` and ``user_id`` each,
then ``probes`` trickle batches again.

Output (:func:`run_churn`): per burst its batch time and the new series it made — counter
series plus gauge (series, window) pairs, counted from the job's own accounting (the state
tasks' live series per rule and key, :class:`~l2m.state.tally.SeriesCount`, before and after
the burst) and checked against the series its logs offer (counted as they were generated);
with caps, what was admitted and the logs refused (:class:`~l2m.state.tally.RefusedCount`).
:func:`churn_targets` grades it (≥ 50,000 new series/s without caps, the trickle after the
bursts ≤ 1.5× the one before), :func:`churn_markdown` and :func:`plot` show it."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

from benchmarks.cardinality import (
    DEAD_LETTER_LABELS,
    PARTITIONS,
    PROBE,
    USERS,
    Feed,
    Logs,
    after_boundary,
    cardinality_rules,
    input_statuses,
    wait_for,
)
from benchmarks.load import fresh_topics
from l2m.config.job import JobConfig, LimitsConfig, SourceConfig
from l2m.state.tally import RefusedCount, SeriesCount

# The two rules whose series the bursts create (benchmarks.cardinality.RULES).
COUNTER_RULE, GAUGE_RULE = "per-request", "per-user-latency"
WINDOW_MS = 60_000  # a gauge rule's window (SPEC §3)
NEW_SERIES_PER_S = 50_000  # issue 58, 1: the goal without caps
TRICKLE_RATIO = 1.5  # issue 58, 1: a trickle batch after the bursts / before them
MODES: dict[str, LimitsConfig] = {
    "uncapped": LimitsConfig(max_series_per_rule=0, max_series_per_metric=0,
                             max_series_per_account=0),
    "capped": LimitsConfig(),
}
# Sizes per harness profile (benchmarks/__main__.py's PROFILES[...]["churn"] names one): the
# full one is issue 58's burst — 250,000 logs, ≈ 440,000 new series — twice, so the trickle
# after them runs on ≈ 880,000 live series; five trickle batches a side (their medians: one of three
# swung 0.7–3.6 s on this shared machine).
PROFILES: dict[str, dict[str, Any]] = {
    "full": {"burst": 250_000, "bursts": 2, "probes": 5, "trigger_ms": 10_000},
    "quick": {"burst": 20_000, "bursts": 1, "probes": 2, "trigger_ms": 2_000},
    # the test suite's: no warm-up batch (the session's first batch is measured; nothing is),
    # one job (caps off: the series the logs offer, counted exactly; the caps' own tests cover
    # refusals)
    "smoke": {"burst": 2_000, "bursts": 1, "probes": 1, "trigger_ms": 1_000, "warm_up": 0,
              "modes": ("uncapped",)},
}
# Called as (mode, kind, "before" | "after") around each measured batch: the cost study
# (/work/notes/churn-costs.md) samples the processes' CPU and profiles there.
Observer = Callable[[str, str, str], None]


class ChurnLogs(Logs):
    """:class:`~benchmarks.cardinality.Logs` that also records the series each burst offers
    the two id rules: a ``request_id`` per log, a (``user_id``, window) pair per log that has
    ``http.duration_ms`` (the gauge's query). Pairs already offered by an earlier burst of the
    same job are not new."""

    def __init__(self, logs: int, seed: int = 58) -> None:
        super().__init__(logs, seed)
        self.pairs: set[tuple[str, int]] = set()
        self.offered: dict[str, int] = {}  # the last burst's new series per id rule

    def burst(self, n: int) -> list[bytes]:
        out = []
        requests = pairs = 0
        for _ in range(n):
            doc = self.gen.next_doc()
            # The generator dates a log by its clock (no late logs in its default config).
            window = int(self.gen.clock) // WINDOW_MS * WINDOW_MS
            self.ids += 1
            doc["request_id"] = f"{self.rng.getrandbits(128):032x}"
            doc["user_id"] = user = f"user-{self.rng.randrange(USERS)}"
            requests += 1
            http = doc.get("http")
            if isinstance(http, dict) and "duration_ms" in http and (user, window) not in \
                    self.pairs:
                self.pairs.add((user, window))
                pairs += 1
            out.append(orjson.dumps(doc))
        self.offered = {COUNTER_RULE: requests, GAUGE_RULE: pairs}
        return out


def series_counts(tally: dict[Any, float]) -> dict[SeriesCount, int]:
    """The live-series counts of a tally (the job's ``counts.tally``), copied."""
    return {k: int(v) for k, v in tally.items() if isinstance(k, SeriesCount)}


def new_series(before: dict[SeriesCount, int], after: dict[SeriesCount, int]
               ) -> dict[str, int]:
    """Series created between two tallies, per rule: each state key's growth of live series
    (a key absent before held none). A key whose count fell or vanished (a gauge window
    closed) created none: windows close whole, and a burst's windows are newer than any the
    job's watermark closes in its batch."""
    out: dict[str, int] = {}
    for key, live in after.items():
        grown = live - before.get(key, 0)
        if grown > 0:
            out[key.rule] = out.get(key.rule, 0) + grown
    return out


def refused_logs(before: dict[Any, float], after: dict[Any, float]) -> dict[str, int]:
    """Logs counted into overflow series between two of the job's summed tallies
    (``counts.activity``), per rule."""
    out: dict[str, int] = {}
    for key, logs in after.items():
        if isinstance(key, RefusedCount):
            grown = int(logs - before.get(key, 0))
            if grown:
                out[key.rule] = out.get(key.rule, 0) + grown
    return out


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def run_mode(spark: SparkSession, bootstrap: str, workdir: Path, mode: str, burst: int,
             bursts: int, probes: int, trigger_ms: int, warm_up: bool = True,
             observer: Observer | None = None) -> list[dict[str, Any]]:
    """One job with ``mode``'s caps (:data:`MODES`): every measured batch's step, in order
    (module docstring)."""
    from l2m.streaming.job import start_job

    topics = fresh_topics(bootstrap, f"churn-{mode}", PARTITIONS)
    checkpoint = workdir / mode / "ck"
    cfg = JobConfig(kafka={"bootstrap.servers": bootstrap}, topics=topics,
                    checkpoint=str(checkpoint), trigger_ms=trigger_ms,
                    # a burst's ≈ 900,000 samples take the embedded broker minutes to take
                    sink_kafka={"message.timeout.ms": "900000"},
                    source=SourceConfig(max_records_per_trigger=None,
                                        max_records_per_task=40_000), limits=MODES[mode])
    feed = Feed(bootstrap, topics.logs, PARTITIONS)
    source = ChurnLogs(burst * (bursts + 1) + (2 * probes + 1) * PROBE)
    rules = cardinality_rules()
    job = start_job(spark, cfg, rules)
    counts = job.counts
    assert counts is not None and counts.tally is not None and counts.activity is not None
    steps: list[dict[str, Any]] = []
    seen = -1

    def run(kind: str, lines: list[bytes]) -> dict[str, Any]:
        nonlocal seen
        after_boundary(trigger_ms)
        assert counts is not None and counts.tally is not None and counts.activity is not None
        series_before = series_counts(counts.tally.value)
        activity_before = dict(counts.activity.value)
        if observer is not None:
            observer(mode, kind, "before")
        produce_s = feed.send(lines)
        batches = wait_for(job.query, feed.records, seen)
        if observer is not None:
            observer(mode, kind, "after")
        seen = batches[-1]["batchId"]
        series_after = series_counts(counts.tally.value)
        statuses = input_statuses(job)
        dead = {k: v for k, v in statuses.items() if k in DEAD_LETTER_LABELS and v}
        if dead:
            raise RuntimeError(f"logs dead-lettered in {mode} {kind}: {dead}")
        state = batches[-1].get("stateOperators") or []
        out = {"kind": kind, "logs": len(lines), "batches": len(batches),
               "batch_ms": sum(p["durationMs"]["triggerExecution"] for p in batches),
               "durations": [p["durationMs"] for p in batches],
               "batch_ids": [p["batchId"] for p in batches],
               "new_series": new_series(series_before, series_after),
               "refused_logs": refused_logs(activity_before, dict(counts.activity.value)),
               "offered": dict(source.offered) if kind == "burst" else {},
               "live_series": sum(series_after.values()),
               "state_rows": sum(int(s.get("numRowsTotal", 0)) for s in state),
               "produce_s": round(produce_s, 2)}
        print(f"churn {mode:<8} {kind:<7} {len(lines):>8,} logs: {out['batch_ms']:>7,} ms in "
              f"{out['batches']} batch(es), new series {sum(out['new_series'].values()):,}, "
              f"refused logs {sum(out['refused_logs'].values()):,}, live series "
              f"{out['live_series']:,}", file=sys.stderr)
        return out

    try:
        if warm_up:
            # Unmeasured: a job's first micro-batch costs seconds no later one pays.
            run("warmup", source.ordinary(PROBE))
        steps.append(run("steady", source.ordinary(burst)))
        for _ in range(probes):
            steps.append(run("before", source.ordinary(PROBE)))
        for _ in range(bursts):
            lines = source.burst(burst)
            steps.append(run("burst", lines))
        for _ in range(probes):
            steps.append(run("after", source.ordinary(PROBE)))
    finally:
        job.query.stop()
    return steps


def summarise_mode(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's steps (:func:`run_mode`) as figures: per burst the new series (all rules'
    and the id rules'), the logs refused, new series per second of batch time; the steady
    rate; the trickle batches before and after the bursts (medians) and their ratio."""
    steady = next(s for s in steps if s["kind"] == "steady")
    before = [s["batch_ms"] for s in steps if s["kind"] == "before"]
    after = [s["batch_ms"] for s in steps if s["kind"] == "after"]
    bursts = []
    for s in steps:
        if s["kind"] != "burst":
            continue
        made = sum(s["new_series"].values())
        ids = {rule: s["new_series"].get(rule, 0) for rule in (COUNTER_RULE, GAUGE_RULE)}
        seconds = s["batch_ms"] / 1000
        bursts.append({
            "logs": s["logs"], "batch_ms": s["batch_ms"], "batches": s["batches"],
            "new_series": made, "id_rule_series": ids,
            "offered": s["offered"], "offered_series": sum(s["offered"].values()),
            "refused_logs": sum(s["refused_logs"].values()),
            "new_series_per_s": round(made / max(seconds, 1e-9)),
            "logs_per_s": round(s["logs"] / max(seconds, 1e-9)),
            "live_series": s["live_series"], "durations": s["durations"]})
    made = sum(b["new_series"] for b in bursts)
    seconds = sum(b["batch_ms"] for b in bursts) / 1000
    trickle_before, trickle_after = _median(before), _median(after)
    return {
        "steady": {"logs": steady["logs"], "batch_ms": steady["batch_ms"],
                   "logs_per_s": round(steady["logs"] / max(steady["batch_ms"] / 1000, 1e-9))},
        "bursts": bursts,
        "new_series": made,
        "new_series_per_s": round(made / max(seconds, 1e-9)),
        "burst_logs_per_s": round(sum(b["logs"] for b in bursts) / max(seconds, 1e-9)),
        # Without caps every series the logs offer must be made, exactly.
        "offered_made": all(b["id_rule_series"] == b["offered"] for b in bursts),
        "refused_logs": sum(b["refused_logs"] for b in bursts),
        "trickle_before_ms": before, "trickle_after_ms": after,
        "trickle_before_median_ms": trickle_before, "trickle_after_median_ms": trickle_after,
        "trickle_ratio": round(trickle_after / max(trickle_before, 1e-9), 2),
        "live_series": max((s["live_series"] for s in steps), default=0),
        "steps": steps,
    }


def run_churn(spark: SparkSession, bootstrap: str, workdir: Path, burst: int, bursts: int = 1,
              probes: int = 1, trigger_ms: int = 10_000, warm_up: int = 1,
              modes: tuple[str, ...] = ("uncapped", "capped"),
              observer: Observer | None = None) -> dict[str, Any]:
    """The churn scenario in a warm session (module docstring): each of ``modes`` a job of
    its own, one after the other, summarised (:func:`summarise_mode`)."""
    result: dict[str, Any] = {"burst": burst, "bursts": bursts, "probes": probes,
                              "warm_up": bool(warm_up),
                              "probe_logs": PROBE, "trigger_ms": trigger_ms,
                              "partitions": PARTITIONS, "modes": {}}
    for mode in modes:
        steps = run_mode(spark, bootstrap, workdir / "churn", mode, burst, bursts, probes,
                         trigger_ms, bool(warm_up), observer)
        summary = summarise_mode(steps)
        limits = MODES[mode]
        summary["caps"] = {"per_rule": limits.max_series_per_rule,
                           "per_metric": limits.max_series_per_metric,
                           "per_account": limits.max_series_per_account}
        result["modes"][mode] = summary
    return result


def churn_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 58's targets on the churn scenario, as the harness lists targets (name, goal,
    measured, met, note): new series per second in a burst without caps, and the trickle
    batch after the bursts against the one before them."""
    out: list[dict[str, Any]] = []
    free = result["modes"].get("uncapped")
    if free:
        note = (f"{free['new_series']:,} new series in {len(free['bursts'])} burst(s) of "
                f"{result['burst']:,} logs, batches "
                + ", ".join(f"{b['batch_ms']:,}" for b in free["bursts"]) + " ms; steady "
                f"{free['steady']['logs_per_s']:,} logs/s")
        if not free["offered_made"]:
            note += "; NOT every offered series was counted"
        out.append({"name": f"new series per second in a burst of {result['burst']:,} logs "
                            "with fresh ids, no series caps",
                    "goal": f">= {NEW_SERIES_PER_S:,}", "measured": free["new_series_per_s"],
                    "met": free["new_series_per_s"] >= NEW_SERIES_PER_S, "note": note})
        out.append({"name": f"batch of {result['probe_logs']:,} ordinary logs after the bursts "
                            f"({free['live_series']:,} live series) / before them, no caps",
                    "goal": f"<= {TRICKLE_RATIO}", "measured": free["trickle_ratio"],
                    "met": free["trickle_ratio"] <= TRICKLE_RATIO,
                    "note": f"{free['trickle_after_median_ms']:,} vs "
                            f"{free['trickle_before_median_ms']:,} ms (medians)"})
    return out


def churn_markdown(result: dict[str, Any]) -> list[str]:
    """RESULTS.md's section for the churn scenario (lines)."""
    lines = ["", "## Churn: new series in a burst", "",
             f"A warm job (`benchmarks/churn.py`): the example rules plus a counter by a unique "
             f"`request_id` and a gauge by `user_id` per one-minute window; bursts of "
             f"{result['burst']:,} logs with fresh ids (each one micro-batch), beside a batch "
             f"of {result['burst']:,} ordinary logs in the same job. New series: counter "
             "series plus gauge (series, window) pairs the job's state tasks counted "
             f"(overflow series included). Trickle: batches of {result['probe_logs']:,} "
             "ordinary logs before and after the bursts (medians).", "",
             "| caps | burst | batch, ms | new series | logs refused, summed over rules | "
             "new series/s | logs/s |",
             "|---|---|---|---|---|---|---|"]
    for mode, m in result["modes"].items():
        for i, b in enumerate(m["bursts"], 1):
            lines.append(f"| {mode} | {i} | {b['batch_ms']:,} | {b['new_series']:,} | "
                         f"{b['refused_logs']:,} | {b['new_series_per_s']:,} | "
                         f"{b['logs_per_s']:,} |")
    lines += ["", "| caps | steady batch of the same size, ms | steady logs/s | new series/s "
                  "in bursts | trickle before, ms | trickle after, ms | ratio |",
              "|---|---|---|---|---|---|---|"]
    for mode, m in result["modes"].items():
        lines.append(f"| {mode} | {m['steady']['batch_ms']:,} | {m['steady']['logs_per_s']:,} "
                     f"| {m['new_series_per_s']:,} | {m['trickle_before_median_ms']:,} | "
                     f"{m['trickle_after_median_ms']:,} | {m['trickle_ratio']} |")
    free = result["modes"].get("uncapped")
    if free:
        lines += ["", "Without caps the id rules' new series "
                      + ("equal" if free["offered_made"] else "do NOT equal")
                      + " the series their logs offered (counted as generated)."]
    return lines


def plot(result: dict[str, Any], path: Path) -> None:
    """New series per second per burst and mode against the goal; the trickle before and
    after the bursts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    modes = result["modes"]
    labels, rates = [], []
    for mode, m in modes.items():
        for i, b in enumerate(m["bursts"], 1):
            labels.append(f"{mode} {i}")
            rates.append(b["new_series_per_s"])
    left.bar(labels, rates, color="#1b9e77")
    left.axhline(NEW_SERIES_PER_S, color="#d95f02", linestyle="--",
                 label=f"goal {NEW_SERIES_PER_S:,}/s (no caps)")
    left.set_ylabel("new series per second of batch")
    left.set_title(f"Bursts of {result['burst']:,} logs with fresh ids")
    left.legend()
    names = list(modes)
    xs = range(len(names))
    right.bar([x - 0.2 for x in xs], [modes[n]["trickle_before_median_ms"] for n in names],
              width=0.4, label="before the bursts")
    right.bar([x + 0.2 for x in xs], [modes[n]["trickle_after_median_ms"] for n in names],
              width=0.4, label="after them")
    right.set_xticks(list(xs), names)
    right.set_ylabel("batch, ms (median)")
    right.set_title(f"Batches of {result['probe_logs']:,} ordinary logs")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.__main__ import machine
    from l2m.dev.broker import EmbeddedBroker
    from l2m.runtime.runner import session_for

    ap = argparse.ArgumentParser(prog="python -m benchmarks.churn")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="full")
    ap.add_argument("--out", default=None, help="results folder (default ./bench-results)")
    ap.add_argument("--modes", default="uncapped,capped", help="comma-separated: "
                    + ", ".join(MODES))
    args = ap.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown modes: {unknown}")
    out = Path(args.out) if args.out else Path.cwd() / "bench-results"
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        spark = session_for(JobConfig(master="local[2]", checkpoint=f"{tmp}/ck",
                                      spark={"spark.sql.shuffle.partitions": "2"}))
        sizes = PROFILES[args.profile]
        result = run_churn(spark, broker.bootstrap, Path(tmp), sizes["burst"], sizes["bursts"],
                           sizes["probes"], sizes["trigger_ms"], sizes.get("warm_up", 1),
                           modes)
        spark.stop()
    result.update(machine=machine(), profile=args.profile,
                  seconds=round(time.monotonic() - started, 1),
                  at=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    result["targets"] = churn_targets(result)
    (out / "churn.json").write_text(json.dumps(result, indent=2))
    plot(result, out / "churn.png")
    print("\n".join(churn_markdown(result)))
    for t in result["targets"]:
        print(f"target: {t['name']}: goal {t['goal']}, measured {t['measured']}, "
              f"met {t['met']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
