"""Native histograms against a classic one (issue 56): what a series costs the state, and what
a rule costs the read task and the drain, on the same logs.

    python -m benchmarks.histograms [--logs 240000] [--state-logs 120000] [--partitions 8]
                                    [--per-task 30000] [--runs 2] [--quick] [--no-drain]
                                    [--only ID,…] [--out DIR]

Logs: the load generator's (:mod:`benchmarks.load`, :class:`l2m.dev.generator.LogGenerator`):
``http.duration_ms`` lognormal (median 25 ms, 5xx four times slower; 0.2 ms to 3 s),
six services, 2,000 logs per second of event time. Rules, one at a time, each over
``http.duration_ms`` by ``service`` (built in code, :data:`VARIANTS`): a classic counter
histogram of 10 bounds, native counter histograms at schemas 3 and 5 (a histogram's default
bucket limit, 160) and at schema 5 with a limit of 1,000 (:data:`WIDE_MAX_BUCKETS`), both
kinds in one rule, and gauges (one-minute windows): a classic gauge histogram, per-minute
quantiles at schema 5 with a quantiles rule's default limit (320) and with 1,000.

* **State** (no JVM; ``--state-logs`` logs): the logs through the read task and the merge
  (as ``l2m backfill``'s stages, :mod:`l2m.batch.local`), each series' partials by ``le``
  bounded as the state bounds them (:func:`l2m.engine.nativebuckets.reduced_parts`), then
  its stored form: a format 7 series entry (:func:`l2m.state.format.dump_entry` of
  ``[generation, last seen, {le: partial}]`` for counters, ``[generation, {le: partial}]``
  per gauge window; LZ4-framed past 1 KiB). Beside it, the form a *histogram column* would
  have stored (one partial for count and sum, the buckets as spans and deltas): the design
  rejected (README, "Native histograms and quantiles"). And a counter series' stored bytes
  against the values it holds (the first 60, 600, … logs).
* **Quantile error** (no JVM): each quantiles rule's samples against the exact nearest-rank
  quantile of each window's values, as the parse stage reads them.
* **Read task** (no JVM): partial rows out of one task of ``--per-task`` logs, and the
  logs/s of all of backfill's stages in this process (:func:`l2m.batch.local.run_local`;
  parsing is most of it and the same for every rule), the best of five rounds or
  ``--runs``, the rules in turn in each.
* **Drain** (``local[2]``, embedded broker): a backlog of ``--logs`` logs on ``--partitions``
  partitions drained by the streaming job (availableNow, the skew-aware plan) with one rule,
  each rule in turn, ``--runs`` rounds alternating (after one unmeasured drain); the best
  and the median of each, with the load average after each run.

Prints a table; writes ``histograms.json`` and ``histograms.png`` into ``--out`` (default
``./bench-results`` in the working directory; ``benchmarks/results`` to record a run: then
``RESULTS.md``'s section is rewritten from it); names the machine and its load. ``--only``
re-runs the named variants (:data:`VARIANTS` ids) with the options of the run recorded in
``--out`` and replaces their rows there, the others kept as recorded; the section lists what
was re-run when. Not part of
``python -m benchmarks`` (about three minutes on 2 cores at the defaults, four to seven
for ``--logs 480000 --runs 3``, the recorded run)."""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from l2m.batch.local import routing_for, run_local
from l2m.defaults import BATCH_ROWS
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.nativebuckets import reduced_parts
from l2m.engine.parse import Form
from l2m.engine.partials import PARTIAL_ARROW, Partial, merge, partial_rows
from l2m.engine.readtask import ReadTask
from l2m.query.compiler import parse_query
from l2m.rules.model import (
    MAX_NATIVE_BUCKETS,
    NATIVE_MAX_BUCKETS,
    QUANTILES_MAX_BUCKETS,
    Aggregation,
    Kind,
    Rule,
)
from l2m.semantics import exphist
from l2m.state.format import dump_entry

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
QUERY = "_exists_:http.duration_ms"
FIELD = "http.duration_ms"
CLASSIC_BOUNDS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0)
QUANTILES = (0.5, 0.9, 0.99)
START_MS = 1_795_341_600_000  # benchmarks.load's backlog start
SEED = 11  # benchmarks.load's first producer's
WINDOW_MS = 60_000
MARK = "<!-- histograms.py -->"  # RESULTS.md's section lies between two of these
# The "-wide" variants' limit: the most a rule may ask for (MAX_NATIVE_BUCKETS, 1,000), far
# above what these values populate at schema 5 (about 330 buckets), so nothing is lowered.
WIDE_MAX_BUCKETS = min(1_000, MAX_NATIVE_BUCKETS)
# Options a re-run of some variants (--only) must share with the run it completes.
SAME_OPTIONS = ("logs", "drain_logs", "partitions", "per_task", "runs")


@dataclass(frozen=True)
class Variant:
    """One rule of the comparison: its id, what it is, and how it is built."""

    id: str
    label: str
    kind: Kind
    aggregation: Aggregation
    buckets: tuple[float, ...] = ()
    schema: int | None = None
    max_buckets: int = NATIVE_MAX_BUCKETS


VARIANTS = (
    Variant("classic-10", "classic, 10 bounds", Kind.COUNTER, Aggregation.HISTOGRAM,
            CLASSIC_BOUNDS),
    Variant("native-3", "native, schema 3", Kind.COUNTER, Aggregation.HISTOGRAM, schema=3),
    Variant("native-5", "native, schema 5", Kind.COUNTER, Aggregation.HISTOGRAM, schema=5),
    Variant("native-5-wide", f"native, schema 5, limit {WIDE_MAX_BUCKETS:,}", Kind.COUNTER,
            Aggregation.HISTOGRAM, schema=5, max_buckets=WIDE_MAX_BUCKETS),
    Variant("both-3", "classic 10 + native 3", Kind.COUNTER, Aggregation.HISTOGRAM,
            CLASSIC_BOUNDS, 3),
    Variant("gauge-classic-10", "gauge, classic, 10 bounds", Kind.GAUGE,
            Aggregation.HISTOGRAM, CLASSIC_BOUNDS),
    # a quantiles rule's own default limit, as a rule without max_buckets gets it
    Variant("gauge-quantiles-5", f"gauge, quantiles, schema 5, limit {QUANTILES_MAX_BUCKETS}",
            Kind.GAUGE, Aggregation.QUANTILES, schema=5, max_buckets=QUANTILES_MAX_BUCKETS),
    Variant("gauge-quantiles-5-wide", f"gauge, quantiles, schema 5, limit {WIDE_MAX_BUCKETS:,}",
            Kind.GAUGE, Aggregation.QUANTILES, schema=5, max_buckets=WIDE_MAX_BUCKETS),
)


def rule_of(variant: Variant) -> Rule:
    """The rule of ``variant`` (by ``service``)."""
    quantiles = variant.aggregation == Aggregation.QUANTILES
    return Rule(id=variant.id, name=f"bench_{variant.id.replace('-', '_')}_ms",
                kind=variant.kind, query=QUERY, aggregation=variant.aggregation, field=FIELD,
                buckets=variant.buckets, bucket_labels=tuple(f"{b:g}" for b in variant.buckets),
                native_schema=variant.schema, native_max_buckets=variant.max_buckets,
                quantiles=QUANTILES if quantiles else (),
                quantile_labels=tuple(f"{q:g}" for q in QUANTILES) if quantiles else (),
                group_by=("service",), compiled=parse_query(QUERY))


def log_lines(n: int) -> list[bytes]:
    """``n`` logs of the load generator (its first producer's, as a backlog's start)."""
    gen = LogGenerator(GeneratorConfig(seed=SEED, start_ms=START_MS, rate_per_s=2000))
    return [gen.next_line() for _ in range(n)]


def _task_partials(rule: Rule, lines: Sequence[bytes]) -> pa.Table:
    routing = routing_for([rule])
    task = ReadTask(routing.plan, routing)
    for start in range(0, len(lines), BATCH_ROWS):
        for _ in task.add(lines[start:start + BATCH_ROWS]):
            pass
    table = pa.Table.from_batches(list(task.finish()), schema=PARTIAL_ARROW)
    return table.filter(pa.compute.equal(table.column("rule"), rule.id))


def column_form(parts: dict[str, Partial]) -> list[Any]:
    """What a histogram column would store for these partials: one partial (count, sum) and
    the native histogram as [schema, zero count, positive spans, deltas, negative spans,
    deltas] — the stored form of the design not taken."""
    total = Partial()
    for part in parts.values():
        total = total.merge(part)
    native = [(le, p) for le, p in parts.items() if "/" in le]
    if not native:
        return [total.dump()]
    from l2m.engine.nativebuckets import native_histogram

    found = native_histogram(dict(native), 0, 0)
    if found is None:
        return [total.dump()]
    h = found[0]
    pos, neg = exphist.encode_buckets(h.positive), exphist.encode_buckets(h.negative)
    return [total.dump(), [h.schema, h.zero_count, pos[0], pos[1], neg[0], neg[1]]]


def state_cost(variant: Variant, lines: Sequence[bytes]) -> dict[str, Any]:
    """Stored bytes per series (counters) or per series and window (gauges) after every log."""
    rule = rule_of(variant)
    table = merge([_task_partials(rule, lines)], unique=False)
    held: dict[tuple[str, int | None], dict[str, Partial]] = defaultdict(dict)
    for _rule, series, le, window, part in partial_rows(table):
        held[series, window][le or ""] = part
    entries, columns, rows, schemas, values = [], [], [], [], []
    for (_series, _window), parts in held.items():
        if rule.native_schema is not None:
            parts = reduced_parts(parts, rule.native_max_buckets) or parts
            schemas.append(min((int(le[1:].partition("/")[0]) for le in parts
                                if le[:1] in "pn" and "/" in le), default=rule.native_schema))
        stored = {le: p.dump() for le, p in parts.items()}
        last = max(p.ts or 0 for p in parts.values())
        entry = [1, last, stored] if rule.kind == Kind.COUNTER else [1, stored]
        column = column_form(parts)
        alternative = [1, last, *column] if rule.kind == Kind.COUNTER else [1, *column]
        entries.append(len(dump_entry(entry)))
        columns.append(len(dump_entry(alternative)))
        rows.append(len(parts))
        values.append(sum(p.n for le, p in parts.items() if "/" not in le)
                      if rule.native_schema is None else
                      sum(p.n for le, p in parts.items() if "/" in le))
    return {"series": len(entries), "bytes_per_series": round(statistics.mean(entries)),
            "bytes_max": max(entries), "rows_per_series": round(statistics.mean(rows), 1),
            "column_bytes_per_series": round(statistics.mean(columns))
            if rule.native_schema is not None else None,
            "schemas_kept": sorted(set(schemas)),
            "values_per_series": round(statistics.mean(values), 1)}


GROWTH = ("classic-10", "native-3", "native-5", "native-5-wide")
GROWTH_LOGS = (60, 600, 6_000, 60_000)


def growth(lines: Sequence[bytes], ids: Sequence[str] = GROWTH
           ) -> dict[str, list[list[float]]]:
    """Stored bytes per counter series against the values it holds: the first 60, 600, …
    logs (as many as there are), per rule of :data:`GROWTH` (those of ``ids``):
    ``[values per series, bytes]``."""
    out: dict[str, list[list[float]]] = {}
    by_id = {v.id: v for v in VARIANTS}
    for variant_id in (i for i in GROWTH if i in ids):
        points = []
        for n in [*(n for n in GROWTH_LOGS if n < len(lines)), len(lines)]:
            cost = state_cost(by_id[variant_id], lines[:n])
            points.append([cost["values_per_series"], cost["bytes_per_series"]])
        out[variant_id] = points
    return out


def window_values(rule: Rule, lines: Sequence[bytes]) -> dict[tuple[str, int], list[float]]:
    """(service, window start) → the values the rule counts, as the parse stage reads them."""
    routing = routing_for([rule])
    plan = routing.plan
    task = ReadTask(plan)
    batches = [b for start in range(0, len(lines), BATCH_ROWS)
               for b in task.add(lines[start:start + BATCH_ROWS])]
    table = pa.Table.from_batches([*batches, *task.finish()])
    values = table.column(plan.column(FIELD, Form.NUMBER)).to_pylist()
    services = table.column(plan.column("service", Form.STRING)).to_pylist()
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    for value, service, ts in zip(values, services, table.column("_ts").to_pylist(),
                                  strict=True):
        if value is not None and service is not None and ts is not None:
            out[service, ts - ts % WINDOW_MS].append(value)
    return out


def quantile_error(variant: Variant, lines: Sequence[bytes]) -> dict[str, Any] | None:
    """For a quantiles rule: the largest relative error of its samples against the exact
    nearest-rank quantile of each window's values, and the bound of the coarsest schema its
    windows were kept at (the bucket limit lowers it where a window populates more)."""
    rule = rule_of(variant)
    if rule.aggregation != Aggregation.QUANTILES:
        return None
    exact = window_values(rule, lines)
    worst = 0.0
    compared = 0
    for line in run_local(routing_for([rule]), lines).lines:
        sample = orjson.loads(line)
        values = sorted(exact[sample["labels"]["service"], sample["timestamp"]])
        q = float(sample["labels"]["quantile"])
        want = values[max(1, math.ceil(q * len(values))) - 1]
        worst = max(worst, abs(sample["value"] - want) / abs(want))
        compared += 1
    kept = state_cost(variant, lines)["schemas_kept"]
    return {"samples": compared, "max_relative_error": worst,
            "bound_of_schema": exphist.relative_error_bound(rule.native_schema or 0),
            "bound_of_schema_kept": exphist.relative_error_bound(min(kept))}


def task_rows(variant: Variant, lines: Sequence[bytes], per_task: int) -> dict[str, Any]:
    """Partial rows out of one read task of ``per_task`` logs (what it hands the shuffle and
    the state: native buckets are bounded only there)."""
    return {"task_logs": min(per_task, len(lines)),
            "task_rows": _task_partials(rule_of(variant), lines[:per_task]).num_rows}


def local_rates(variants: Sequence[Variant], lines: Sequence[bytes], runs: int
                ) -> dict[str, list[int]]:
    """Logs/s of backfill's stages in this process over every line, per rule: ``runs``
    rounds, the rules in turn in each (the machine's drift falls on all alike)."""
    rates: dict[str, list[int]] = {v.id: [] for v in variants}
    routings = {v.id: routing_for([rule_of(v)]) for v in variants}
    for _ in range(runs):
        for variant in variants:
            started = time.perf_counter()
            run_local(routings[variant.id], lines)
            rates[variant.id].append(round(len(lines) / (time.perf_counter() - started)))
    return rates


def drain_cost(variants: Sequence[Variant], records: int, partitions: int, per_task: int,
               runs: int) -> dict[str, dict[str, Any]]:
    """The streaming job's drain of a fresh backlog with each rule alone, ``runs`` rounds
    alternating (after one unmeasured drain: a session's first pays its warm-up)."""
    from benchmarks.drain import DrainCase, run_drain
    from benchmarks.load import Skew
    from l2m.config.job import JobConfig
    from l2m.dev.broker import EmbeddedBroker
    from l2m.runtime.runner import session_for

    case = DrainCase(records, partitions, Skew(), "balanced", per_batch=records // 2,
                     per_task=per_task)
    out: dict[str, dict[str, Any]] = {v.id: {"runs": []} for v in variants}
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        spark = session_for(JobConfig(master="local[2]",
                                      spark={"spark.sql.shuffle.partitions": "2"}))
        run_drain(spark, broker.bootstrap, case, [rule_of(variants[0])], Path(tmp))
        for _ in range(runs):
            for variant in variants:
                got = run_drain(spark, broker.bootstrap, case, [rule_of(variant)], Path(tmp))
                out[variant.id]["runs"].append(got["logs_per_s"])
                out[variant.id].setdefault("load", []).append(_load())
                out[variant.id]["median_batch_ms"] = got["median_batch_ms"]
                print(f"drain {variant.id}: {got['logs_per_s']:,} logs/s (load {_load()})",
                      file=sys.stderr)
        spark.stop()
    for figures in out.values():
        figures["logs_per_s"] = max(figures["runs"])
        figures["median_logs_per_s"] = round(statistics.median(figures["runs"]))
    return out


def table(result: dict[str, Any]) -> str:
    """The result as a text table."""
    rows = [f"{'rule':<42} {'state B/series':>14} {'rows/series':>11} {'schema kept':>11} "
            f"{'column B':>8} {'task rows':>9} {'local logs/s':>12} {'drain logs/s':>12} "
            f"{'median':>8}"]
    for r in result["rules"]:
        drain = r.get("drain", {}).get("logs_per_s")
        kept = ",".join(map(str, r["state"]["schemas_kept"])) or "-"
        rows.append(f"{r['label']:<42} {r['state']['bytes_per_series']:>14,} "
                    f"{r['state']['rows_per_series']:>11} {kept:>11} "
                    f"{_n(r['state']['column_bytes_per_series']):>8} {r['read']['task_rows']:>9,} "
                    f"{r['read']['local_logs_per_s']:>12,} "
                    f"{_n(drain):>12} {_n(r.get('drain', {}).get('median_logs_per_s')):>8}")
    rows += [quantile_line(r) for r in result["rules"] if r.get("quantile_error")]
    return "\n".join(rows)


def _n(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def quantile_line(r: dict[str, Any]) -> str:
    """The quantile rule's measured error, as a sentence."""
    e = r["quantile_error"]
    return (f"{r['label']}: {e['samples']:,} quantile samples, largest relative error against "
            f"the exact quantile {e['max_relative_error']:.3%} (bound at its schema "
            f"{e['bound_of_schema']:.3%}; at the coarsest schema its bucket limit kept "
            f"{e['bound_of_schema_kept']:.3%})")


def markdown(result: dict[str, Any]) -> list[str]:
    """RESULTS.md's section on this benchmark."""
    m = result["machine"]
    load = result["load_average"]
    lines = [
        MARK, "## Native histograms and quantiles", "",
        f"`python -m benchmarks.histograms` on {m['date']} ({m['cpus']} cores, {m['cpu']}; "
        f"load average {load['before']} before, {load['after']} after: the cores are shared). "
        f"{result['logs']:,} generated logs, `http.duration_ms` by `service` "
        f"({result['rules'][0]['state']['series']} series), each rule alone; counters' state "
        "after every log, gauges' per one-minute window. Stored bytes: a format 7 series "
        "entry (LZ4 past 1 KiB); *column*: the form a histogram column would have stored "
        "(not taken; benchmarks/README.md). Task rows: partial rows out of one read task of "
        f"{result['per_task']:,} logs. Local: all of backfill's stages in one process "
        f"(best of {max(result['runs'], 5)}, alternating). Drain: the streaming job, "
        f"{result['drain_logs']:,} logs on {result['partitions']} partitions, "
        f"{result['drain_logs'] // 2:,} per micro-batch "
        f"({result['runs']} runs of each, alternating).", "",
        *(line for r in result.get("reruns", []) for line in (
            f"Re-run on {r['date']} with the same options (load average {r['before']} before, "
            f"{r['after']} after): {', '.join(f'`{i}`' for i in r['ids'])}, alternating among "
            "themselves; the other rows are the whole run's. Rates of different runs met "
            "different loads: compare those within one run.", "")),
        "| rule | stored bytes per series | partial rows per series | schema kept | "
        "column bytes | task rows | local logs/s | drain logs/s, best | median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rules"]:
        s = r["state"]
        drain = r.get("drain", {}).get("logs_per_s")
        lines.append(f"| {r['label']} (`{r['id']}`) | {s['bytes_per_series']:,} | "
                     f"{s['rows_per_series']} | "
                     f"{','.join(map(str, s['schemas_kept'])) or '—'} | "
                     f"{_n(s['column_bytes_per_series'])} | {r['read']['task_rows']:,} | "
                     f"{r['read']['local_logs_per_s']:,} | {_n(drain)} | "
                     f"{_n(r.get('drain', {}).get('median_logs_per_s'))} |")
    lines += ["", *("- " + quantile_line(r) + "." for r in result["rules"]
                    if r.get("quantile_error")),
              *growth_markdown(result.get("growth") or {}), "",
              "![histograms.png](histograms.png)", MARK]
    return lines


def growth_markdown(grown: dict[str, list[list[float]]]) -> list[str]:
    """The growth of a counter series' stored bytes with its values, as a table."""
    if not grown:
        return []
    labels = {v.id: v.label for v in VARIANTS}
    first = next(iter(grown.values()))
    lines = ["", "Stored bytes of a counter series against the values it holds (the first "
             "logs of the same stream):", "",
             "| values per series | " + " | ".join(labels[v] for v in grown) + " |",
             "|---|" + "---|" * len(grown)]
    for i, (count, _bytes) in enumerate(first):
        lines.append(f"| {count:,.0f} | "
                     + " | ".join(f"{points[i][1]:,}" for points in grown.values()) + " |")
    return lines


def record(result: dict[str, Any], folder: Path) -> None:
    """Rewrite this benchmark's section of the committed RESULTS.md files."""
    section = markdown(result)
    for path, prefix in ((folder / "RESULTS.md", ""), (ROOT / "benchmarks" / "RESULTS.md",
                                                       "results/")):
        if not path.exists():
            continue
        text = path.read_text()
        body = "\n".join(section).replace("](histograms.png)", f"]({prefix}histograms.png)")
        if MARK in text:
            head, _old, tail = text.split(MARK, 2)
            text = head + body + tail
        else:
            text = text.rstrip("\n") + "\n\n" + body + "\n"
        path.write_text(text)


def plot(result: dict[str, Any], path: Path) -> None:
    """Stored bytes per series and the drain's logs/s per rule; a counter series' stored
    bytes against its values."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rules = result["rules"]
    labels = [r["id"] for r in rules]
    fig, (left, right, third) = plt.subplots(1, 3, figsize=(17, 4.5))
    x = range(len(rules))
    left.bar([i - 0.2 for i in x], [r["state"]["bytes_per_series"] for r in rules], 0.4,
             label="stored (partial per bucket)")
    left.bar([i + 0.2 for i in x], [r["state"]["column_bytes_per_series"] or 0 for r in rules], 0.4,
             label="a histogram column (not taken)")
    left.set_xticks(list(x), labels, fontsize=7, rotation=30, ha="right")
    left.set_ylabel("state bytes per series (gauges: per window)")
    left.legend()
    left.set_title("State")
    runs = [r.get("drain", {}).get("runs") or [0] for r in rules]
    middle = [statistics.median(v) for v in runs]
    right.bar(list(x), middle, 0.6,
              yerr=[[m - min(v) for m, v in zip(middle, runs, strict=True)],
                    [max(v) - m for m, v in zip(middle, runs, strict=True)]], capsize=4)
    right.set_xticks(list(x), labels, fontsize=7, rotation=30, ha="right")
    right.set_ylabel("drain logs/s: median, min to max")
    right.set_title(f"Streaming drain, one rule ({result['drain_logs']:,} logs)")
    labels_of = {v.id: v.label for v in VARIANTS}
    for variant_id, points in (result.get("growth") or {}).items():
        third.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                   label=labels_of[variant_id])
    third.set_xscale("log")
    third.set_yscale("log")
    third.set_xlabel("values in the series")
    third.set_ylabel("stored bytes per counter series")
    third.legend(fontsize=7)
    third.set_title("State against values")
    fig.suptitle(f"Native vs classic histograms: {result['machine']['cpus']} cores, "
                 f"{result['logs']:,} logs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def merged(recorded: dict[str, Any], rerun: dict[str, Any], ids: Sequence[str]
           ) -> dict[str, Any]:
    """The recorded run with the rows of ``ids`` replaced by ``rerun``'s (the same options:
    else ValueError), and the re-run listed under ``reruns``."""
    if differ := [f"{k} {recorded.get(k)} (recorded) against {rerun[k]}"
                  for k in SAME_OPTIONS if recorded.get(k) != rerun[k]]:
        raise ValueError("--only re-runs with the recorded run's options; these differ: "
                         + ", ".join(differ))
    out = dict(recorded)
    fresh = {r["id"]: r for r in rerun["rules"]}
    order = [v.id for v in VARIANTS]
    kept = [r for r in recorded["rules"] if r["id"] not in fresh and r["id"] in order]
    out["rules"] = sorted([*kept, *fresh.values()], key=lambda r: order.index(r["id"]))
    out["growth"] = {i: (rerun["growth"].get(i) or recorded.get("growth", {}).get(i))
                     for i in GROWTH
                     if i in rerun["growth"] or i in recorded.get("growth", {})}
    out["reruns"] = [*recorded.get("reruns", []),
                     {"ids": list(ids), "date": rerun["machine"]["date"],
                      "before": rerun["load_average"]["before"],
                      "after": rerun["load_average"]["after"], "seconds": rerun["seconds"]}]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.histograms")
    ap.add_argument("--logs", type=int, default=240_000, help="logs drained per rule")
    ap.add_argument("--state-logs", type=int, default=120_000,
                    help="logs for the state and local figures")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--per-task", type=int, default=30_000, help="logs per read task")
    ap.add_argument("--runs", type=int, default=2, help="runs of each (the best is kept)")
    ap.add_argument("--quick", action="store_true", help="8,000 logs, one run")
    ap.add_argument("--no-drain", action="store_true", help="no JVM: state and read task only")
    ap.add_argument("--only", default=None,
                    help="these variant ids (comma-separated), merged into --out's run")
    ap.add_argument("--out", default=None, help="results folder (default ./bench-results)")
    args = ap.parse_args(argv)
    known = [v.id for v in VARIANTS]
    only = known if args.only is None else [i.strip() for i in args.only.split(",")]
    if unknown := [i for i in only if i not in known]:
        ap.error(f"--only: no variant {', '.join(unknown)} (variants: {', '.join(known)})")
    variants = [v for v in VARIANTS if v.id in only]
    if args.quick:
        args.logs = args.state_logs = 8_000
        args.per_task, args.runs = 2_000, 1
    from benchmarks.__main__ import machine

    out = Path(args.out) if args.out else Path.cwd() / "bench-results"
    out.mkdir(parents=True, exist_ok=True)
    recorded = None
    if args.only is not None:
        if not (out / "histograms.json").exists():
            ap.error(f"--only completes a recorded run: no histograms.json in {out}")
        recorded = json.loads((out / "histograms.json").read_text())
        options = {"logs": args.state_logs, "drain_logs": args.logs, "rules": [],
                   "partitions": args.partitions, "per_task": args.per_task, "runs": args.runs}
        try:  # before minutes of work
            merged(recorded, {**options, "growth": {}, "machine": {"date": ""},
                              "load_average": {"before": 0, "after": 0}, "seconds": 0}, only)
        except ValueError as e:
            ap.error(str(e))
    started = time.monotonic()
    result: dict[str, Any] = {"machine": machine(), "load_average": {"before": _load()},
                              "logs": args.state_logs, "drain_logs": args.logs,
                              "partitions": args.partitions, "per_task": args.per_task,
                              "runs": args.runs, "classic_bounds": list(CLASSIC_BOUNDS),
                              "max_buckets": NATIVE_MAX_BUCKETS,
                              "quantiles_max_buckets": QUANTILES_MAX_BUCKETS, "rules": []}
    lines = log_lines(args.state_logs)
    rates = local_rates(variants, lines, max(args.runs, 5))
    for variant in variants:
        read = task_rows(variant, lines, args.per_task)
        read.update(local_logs_per_s=max(rates[variant.id]), local_runs=rates[variant.id])
        result["rules"].append({"id": variant.id, "label": variant.label,
                                "max_buckets": variant.max_buckets,
                                "state": state_cost(variant, lines), "read": read,
                                "quantile_error": quantile_error(variant, lines)})
    if not args.no_drain:
        drains = drain_cost(variants, args.logs, args.partitions, args.per_task, args.runs)
        for r in result["rules"]:
            r["drain"] = drains[r["id"]]
    result["growth"] = growth(lines, only)
    result["load_average"]["after"] = _load()
    result["seconds"] = round(time.monotonic() - started, 1)
    if recorded is not None:
        try:
            result = merged(recorded, result, only)
        except ValueError as e:
            ap.error(str(e))
    (out / "histograms.json").write_text(json.dumps(result, indent=2))
    plot(result, out / "histograms.png")
    if out.resolve() == RESULTS.resolve():
        record(result, out)
    print(table(result))
    this = result["reruns"][-1] if recorded is not None else {
        **result["load_average"], "seconds": result["seconds"]}
    print(f"({result['machine']['cpus']} cores, load {this['before']} → {this['after']}, "
          f"{this['seconds']} s; results in {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
