"""``l2m validate --estimate LOGS...``: what each enabled rule would cost, from a sample of
real logs, before it is submitted (docs/rules.md, "The cost of a rule").

Input: the rules (the enabled ones are run), the sample's JSON-lines files, the job settings
(:class:`~l2m.config.job.JobConfig`: timestamp field, label length, series caps with the
accounts' overrides, ``counter_ttl``). Output: two tables on ``out`` — what each rule made
of the sample (exact: backfill's own stages, :func:`l2m.batch.local.run_local`, run without
series caps so that every series a rule wants is seen), and what it would hold live at the
sample's rate (projected, model below) with the caps that projection exceeds — then one
warning per rule grouping by a unique id. The exit status is 0: the rules are valid (that is
what ``validate`` says), and a sample is evidence, not proof — a warning is for a person to
read, and a script may look for ``warning:`` lines. A sample without a log that has an event
time is an :class:`~l2m.errors.InputError`; one whose event times are all one instant has no
rate, and is shown without a projection.

**The projection.** Distinct series grow with the logs a rule matches; the sample shows how.
The sample's first half and quarter (when at least :data:`MIN_PREFIX` lines) are run as
well, and each rule's (logs matched, series) points are fitted to Heaps' law, S(n) = K·n^β
(least squares on logarithms, β kept in [0, 1]; with one point, through (1, 1): one log makes
one series). The last two doublings, not the sample's start, because a curve that bends —
a label running out of new values — extrapolates from where it is now: 200 logs at 2/s of a
50-value label (49 seen) project about 600 live counter series rather than 42,000; 2,000
logs show it flat at 50. A small sample over-projects such a label; it never under-projects
a unique id. A rule whose series did not grow over the sample's second half is *flat*: it
keeps what it has. Otherwise S is carried from what the whole sample saw to n logs,
S·(n/seen logs)^β, and bounded by n (a log makes at most one series) and, once every group-by
label stopped giving new values in the second half, by the product of their values (one
more for a label some logs lack). n is the rule's logs in a span of event time at the
sample's rate (its matched logs over the span of the sample's event times): a counter's live
series are those of ``counter_ttl`` (a series idle longer expires), a gauge's those of one
window (each window is capped on its own) — or the most one window of the sample holds, if
more: logs come in bursts; series per day are S at a day's logs, for both.

**Caps** (docs/rules.md, "Series limits"): a rule's live series against its cap (its
``max_series``, or its account's per-rule cap), the sum over its account's rules of one
metric name against the per-metric cap, the sum over the account's counter rules (and over
its gauge rules: they are counted apart) against the per-account cap; a rule without an
account has only its own cap. A cap is hit when the projection is above it.

**A unique id.** A group-by label with at least :data:`UNIQUE_SHARE` as many distinct values
as the rule matched logs, over at least :data:`UNIQUE_MIN_LOGS` logs, makes a series per log
— a warning names the rule, its field and the counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from l2m.batch.local import RunSettings, file_lines, run_local
from l2m.batch.summary import BackfillSummary, table
from l2m.config.job import JobConfig
from l2m.engine.admission import RuleCaps, rule_caps
from l2m.engine.decoding import decode
from l2m.errors import InputError
from l2m.rules.model import Kind, Rule
from l2m.semantics.values import lookup, parse_timestamp
from l2m.semantics.windows import MINUTE_MS

MIN_PREFIX = 32  # the shortest prefix of the sample run for the fit (lines)
FIT_POINTS = 3  # the prefixes fitted: the whole sample, its first half and quarter
UNIQUE_SHARE = 0.9  # a label with this share of distinct values per matched log ...
UNIQUE_MIN_LOGS = 100  # ... over at least this many logs: a unique id
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Growth:
    """How one rule's distinct series grow with its logs (the projection, module docstring):
    ``series`` in ``logs`` (the whole sample), ``beta`` (None: flat), ``bound`` (the labels'
    product once every label stopped growing; None: unbounded)."""

    series: int
    logs: int
    beta: float | None
    bound: int | None

    def at(self, logs: float) -> float:
        """The series ``logs`` logs of the rule would make."""
        if self.beta is None or not self.logs:
            return float(self.series)
        projected = self.series * (logs / self.logs) ** self.beta
        projected = min(projected, max(logs, 1.0))
        return projected if self.bound is None else min(projected, float(self.bound))

    def describe(self) -> str:
        """The model in a table cell: ``flat``, ``n^0.98``, ``n^0.62 ≤ 2,500``."""
        if self.beta is None:
            return "flat"
        text = f"n^{self.beta:.2f}"
        return text if self.bound is None else f"{text} ≤ {self.bound:,}"


def fit(points: Sequence[tuple[int, int]]) -> float:
    """Heaps' β: the least-squares slope of log(series) on log(logs) over ``points`` (logs,
    series), in [0, 1]; with (1, 1) when there is one point."""
    xs: list[float] = []
    ys: list[float] = []
    for logs, series in points:
        if logs > 1 and series >= 1:
            xs.append(math.log(logs))
            ys.append(math.log(series))
    if len(set(xs)) < 2:
        xs.append(0.0)
        ys.append(0.0)
    if len(set(xs)) < 2:
        return 1.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / \
        sum((x - mx) ** 2 for x in xs)
    return min(1.0, max(0.0, slope))


def growth(rule_id: str, runs: Sequence[BackfillSummary]) -> Growth:
    """A rule's :class:`Growth` from the runs of the sample's prefixes, the whole first
    and its first half second (when there is one)."""
    whole = runs[0]
    series = whole.series_created.get(rule_id, 0)
    logs = whole.matches.get(rule_id, 0)
    half = runs[1] if len(runs) > 1 else None
    if series <= 1 or (half is not None and half.series_created.get(rule_id, 0) == series):
        return Growth(series, logs, None, None)
    beta = fit([(run.matches.get(rule_id, 0), run.series_created.get(rule_id, 0))
                for run in runs[:FIT_POINTS]])
    values = whole.label_values.get(rule_id, {})
    bound: int | None = None
    if half is not None and values and all(
            half.label_values.get(rule_id, {}).get(name) == count
            for name, count in values.items()):
        bound = 1
        for name, count in values.items():
            absent = whole.labelled.get(rule_id, {}).get(name, 0) < series
            bound *= count + (1 if absent else 0)
    return Growth(series, logs, beta, bound)


@dataclass(frozen=True)
class Sample:
    """The sample's lines and what its event times say: how many logs carry one, the
    earliest and the latest (ms; None without any)."""

    lines: list[bytes]
    timed: int
    first: int | None
    last: int | None

    @property
    def span_ms(self) -> int:
        return 0 if self.first is None or self.last is None else self.last - self.first


def read_sample(inputs: Sequence[str], timestamp_field: str) -> Sample:
    """The sample's lines (:func:`~l2m.batch.local.file_lines`) and their event times'
    range, as the engine reads event times (:func:`~l2m.semantics.values.parse_timestamp`)."""
    lines = list(file_lines(inputs))
    timed = 0
    first: int | None = None
    last: int | None = None
    for line in lines:
        if not line.strip():
            continue
        doc, _ = decode(line)
        ts = None if doc is None else parse_timestamp(lookup(doc, timestamp_field))
        if ts is None:
            continue
        timed += 1
        first = ts if first is None else min(first, ts)
        last = ts if last is None else max(last, ts)
    return Sample(lines, timed, first, last)


def prefix_runs(settings: RunSettings, rules: Sequence[Rule], lines: Sequence[bytes]
                ) -> list[BackfillSummary]:
    """The summaries of the whole sample, its first half and quarter, each of at least
    :data:`MIN_PREFIX` lines (the points of the fit)."""
    routing = settings.routing(rules)
    runs = [run_local(routing, lines).summary]
    size = len(lines) // 2
    while size >= MIN_PREFIX and len(runs) < FIT_POINTS:
        runs.append(run_local(routing, lines[:size]).summary)
        size //= 2
    return runs


def estimate_command(rules: Sequence[Rule], inputs: Sequence[str], cfg: JobConfig,
                     out: TextIO) -> int:
    """Each enabled rule's cost over the sample ``inputs`` (module docstring), printed on
    ``out``; the exit code (0). A sample without a log that has an event time is an
    :class:`~l2m.errors.InputError` (nothing to estimate from)."""
    enabled = [r for r in rules if r.enabled]
    sample = read_sample(inputs, cfg.timestamp_field)
    if not sample.timed:
        files = ", ".join(inputs)
        if not any(line.strip() for line in sample.lines):
            raise InputError(f"--estimate: {files}: no logs, nothing to estimate from")
        raise InputError(f"--estimate: {files}: no log with an event time in "
                         f"'{cfg.timestamp_field}' among {len(sample.lines):,} line(s), nothing "
                         "to estimate from (is the event time in another field? "
                         "--timestamp-field)")
    settings = RunSettings(cfg.timestamp_field, cfg.limits.max_label_value_length, limits=None)
    runs = prefix_runs(settings, enabled, sample.lines)
    for line in report(enabled, runs[0], {r.id: growth(r.id, runs) for r in enabled},
                       sample, cfg):
        print(line, file=out)
    return 0


def report(rules: Sequence[Rule], summary: BackfillSummary, growths: dict[str, Growth],
           sample: Sample, cfg: JobConfig) -> list[str]:
    """The estimate's text (module docstring)."""
    span = sample.span_ms
    lines = [f"estimate: {summary.logs:,} logs in the sample, {summary.parsed:,} with an "
             f"event time" + (f" over {duration(span)}" if span else "")
             + (f", {summary.no_timestamp:,} without one" if summary.no_timestamp else "")
             + (f", {summary.malformed:,} malformed" if summary.malformed else "")
             + (f" — {per_second(summary.parsed / (span / 1000))} logs/s" if span else ""),
             "", "seen in the sample (exact; every series, no caps applied):"]
    rows = []
    for rule in rules:
        matched = summary.matches.get(rule.id, 0)
        largest = summary.largest_label(rule.id)
        rows.append([rule.id, rule.kind.value, f"{matched:,}",
                     f"{100 * matched / summary.parsed:.1f}%",
                     f"{summary.series_created.get(rule.id, 0):,}",
                     f"{summary.window_series.get(rule.id, 0):,}"
                     if rule.kind == Kind.GAUGE else "-",
                     "-" if largest is None else f"{largest[0]} ({largest[1]:,})"])
    lines += ["  " + line for line in table(
        ["rule", "kind", "logs matched", "share", "series", "most in a window",
         "largest label (values)"], rows, numeric=(2, 3, 4, 5))]
    ttl = cfg.counter_ttl_ms
    lines.append("")
    if span:
        lines.append(
            "projected at the sample's rate (Heaps' law S = K·n^β fitted on the sample's "
            "first quarter, half and whole; live: counters over counter_ttl "
            + duration(ttl) + ", gauges per one-minute window):")
    else:
        lines.append("not projected: every event time in the sample is the same, so it has no "
                     "rate; caps checked against what the sample shows:")
    live: dict[str, float] = {}
    per_day: dict[str, float] = {}
    for rule in rules:
        g = growths[rule.id]
        if span:
            rate = summary.matches.get(rule.id, 0) / span  # logs per ms of event time
            if rule.kind == Kind.GAUGE:  # logs come in bursts: a window seen may hold more
                live[rule.id] = max(g.at(rate * MINUTE_MS),
                                    float(summary.window_series.get(rule.id, 0)))
            else:
                live[rule.id] = g.at(rate * ttl)
            per_day[rule.id] = g.at(rate * DAY_MS)
        else:
            live[rule.id] = summary.window_series.get(rule.id, 0) \
                if rule.kind == Kind.GAUGE else summary.series_created.get(rule.id, 0)
    hits = caps_hit(rules, live, rule_caps(rules, cfg.limits.series))
    rows = []
    for rule in rules:
        hit = ", ".join(f"{limit} ({cap:,})" for limit, cap in hits.get(rule.id, [])) or "-"
        if span:
            rate_s = summary.matches.get(rule.id, 0) / (span / 1000)
            rows.append([rule.id, per_second(rate_s), growths[rule.id].describe(),
                         f"~{round(live[rule.id]):,}", f"~{round(per_day[rule.id]):,}", hit])
        else:
            rows.append([rule.id, f"{round(live[rule.id]):,}", hit])
    header = ["rule", "logs/s", "growth", "live series (proj.)", "series per day (proj.)",
              "caps hit (proj.)"] if span else ["rule", "live series (seen)", "caps hit"]
    lines += ["  " + line for line in table(
        header, rows, numeric=(1, 3, 4) if span else (1,))]
    few = [r.id for r in rules if 0 < summary.matches.get(r.id, 0) < UNIQUE_MIN_LOGS]
    if span and few:
        lines.append(f"note: {len(few)} rule(s) matched fewer than {UNIQUE_MIN_LOGS} logs: "
                     "their growth is fitted on little — a larger sample says more")
    lines += unique_id_warnings(rules, summary)
    return lines


def per_second(rate: float) -> str:
    """A rate with the digits that matter: ``12,345``, ``1.25``, ``0.0031``."""
    if rate >= 100:
        return f"{rate:,.0f}"
    if rate >= 1 or rate == 0:
        return f"{rate:.2f}"
    return f"{rate:#.2g}"


def caps_hit(rules: Sequence[Rule], live: dict[str, float], caps: dict[str, RuleCaps]
             ) -> dict[str, list[tuple[str, int]]]:
    """Per rule, the caps its live series would pass (module docstring): (``rule``,
    ``metric`` or ``account``, the cap) in that order."""
    metrics: dict[tuple[str, str], float] = {}
    accounts: dict[tuple[str, Kind], float] = {}
    for rule in rules:
        account = caps[rule.id].account_name
        if account is not None:
            metric = (account, caps[rule.id].metric_name)
            metrics[metric] = metrics.get(metric, 0.0) + live[rule.id]
            accounts[(account, rule.kind)] = accounts.get((account, rule.kind), 0.0) + \
                live[rule.id]
    hits: dict[str, list[tuple[str, int]]] = {}
    for rule in rules:
        c = caps[rule.id]
        found = []
        if c.rule and round(live[rule.id]) > c.rule:
            found.append(("rule", c.rule))
        if c.account_name is not None:
            if c.metric and round(metrics[(c.account_name, c.metric_name)]) > c.metric:
                found.append(("metric", c.metric))
            if c.account and round(accounts[(c.account_name, rule.kind)]) > c.account:
                found.append(("account", c.account))
        if found:
            hits[rule.id] = found
    return hits


def unique_id_warnings(rules: Sequence[Rule], summary: BackfillSummary) -> list[str]:
    """One warning per rule grouping by a label with nearly a value per log (module
    docstring), naming the field as the rule writes it."""
    lines = []
    for rule in rules:
        matched = summary.matches.get(rule.id, 0)
        if matched < UNIQUE_MIN_LOGS:
            continue
        values = summary.label_values.get(rule.id, {})
        for label, field in rule.group_labels:
            count = values.get(label, 0)
            if count >= UNIQUE_SHARE * matched:
                lines.append(f"warning: rule '{rule.id}' groups by {field}: {count:,} distinct "
                             f"values in {matched:,} logs — a unique id makes a series per "
                             "log")
    return lines


def duration(ms: int) -> str:
    """A span of time as people read it: ``7d``, ``16m 39s``, ``1.5s``, ``250ms``."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    seconds = ms // 1000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts)
