"""``l2m validate --estimate LOGS...``: what each enabled rule would cost, from a sample of
real logs, before it is submitted (docs/rules.md, "The cost of a rule").

Input: the rules (the enabled ones are run), the sample's JSON-lines files, the job settings
(:class:`~l2m.config.job.JobConfig`: timestamp field, label length, series caps with the
accounts' overrides, ``counter_ttl``). Output: two tables on ``out`` — what each rule made
of the sample (exact: backfill's own stages, :func:`l2m.batch.local.run_local`, run without
series caps so that every series a rule wants is seen), and what it would hold live at the
sample's rate (projected, model below) with the caps that projection exceeds — then
``note:`` lines on what was not projected or on little evidence, and one warning per rule
grouping by a unique id; without an enabled rule, one line saying there is nothing to
estimate. The exit status is 0: the rules are valid (that is
what ``validate`` says), and a sample is evidence, not proof — a warning is for a person to
read, and a script may look for ``warning:`` lines. A sample without a log that has an event
time is an :class:`~l2m.errors.InputError`; one whose event times are all one instant has no
rate, and is shown without a projection. Event times are the parse stage's own
(:func:`~l2m.engine.parse.parse_lines`), so the sample's span covers exactly the logs
:func:`~l2m.batch.local.run_local` counts as having one.

**The projection.** Distinct series grow with the logs a rule matches; the sample shows how.
The sample's first half and quarter (when at least :data:`MIN_PREFIX` lines) are run as
well, and each rule's (logs matched, series) points are fitted to Heaps' law, S(n) = K·n^β
(least squares on logarithms, β kept in [0, 1]; with one point, through (1, 1): one log makes
one series). The last two doublings, not the sample's start, because a curve that bends —
a label running out of new values — extrapolates from where it is now: 200 logs at 2/s of a
50-value label (49 seen) project about 600 live counter series rather than 42,000; 2,000
logs show it flat at 50. A small sample over-projects such a label; it never under-projects
a unique id. A rule whose series did not grow over the sample's second half is *flat*: it
keeps what it has. A sample under 2·MIN_PREFIX lines has no prefix long enough to be a
point: its first half is still run, to see which rules are flat (50 logs of a 5-value label
stay at 5), and the others are fitted on the whole alone, through (1, 1) — shown as a
``(guess)``, with a ``note:``. Otherwise S is carried from what the whole sample saw to n logs,
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

**Distributions.** A native histogram is one series per label set (a classic histogram's
family is its bounds' ``_bucket`` series, ``+Inf``, ``_sum`` and ``_count``; a quantiles
rule's, one per quantile); what it costs besides is its populated buckets, the rows the
state keeps per series (and window, for gauges). They are counted exactly on the whole
sample, with every histogram and quantiles rule run once more as the native histogram it
keeps (:func:`distribution_lines`), and shown with the rule's ``max_buckets`` limit and the
lowest schema a series was lowered to under it.

**A unique id.** A group-by label with at least :data:`UNIQUE_SHARE` as many distinct values
as the rule matched logs, over at least :data:`UNIQUE_MIN_LOGS` logs, makes a series per log
— a warning names the rule, its field and the counts."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import orjson
import pyarrow.compute as pc

from l2m.batch.local import RunSettings, file_lines, run_local
from l2m.batch.summary import BackfillSummary, table
from l2m.config.job import JobConfig
from l2m.engine.admission import RuleCaps, rule_caps
from l2m.engine.parse import STATUS, TIMESTAMP, ParsePlan, parse_lines
from l2m.engine.samples import HISTOGRAM_KEY
from l2m.engine.status import Status
from l2m.errors import InputError
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics.times import duration_text, iso_text
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
    guess: bool = False  # fitted on the whole sample alone (fewer than 2·MIN_PREFIX lines)

    def at(self, logs: float) -> float:
        """The series ``logs`` logs of the rule would make."""
        if self.beta is None or not self.logs:
            return float(self.series)
        projected = self.series * (logs / self.logs) ** self.beta
        projected = min(projected, max(logs, 1.0))
        return projected if self.bound is None else min(projected, float(self.bound))

    def describe(self) -> str:
        """The model in a table cell: ``flat``, ``n^0.98``, ``n^0.62 ≤ 2,500``, and
        ``(guess)`` after one fitted on the whole sample alone."""
        if self.beta is None:
            return "flat"
        text = f"n^{self.beta:.2f}"
        text = text if self.bound is None else f"{text} ≤ {self.bound:,}"
        return f"{text} (guess)" if self.guess else text


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


def growth(rule_id: str, runs: Sequence[BackfillSummary], fitted: int | None = None
           ) -> Growth:
    """A rule's :class:`Growth` from the runs of the sample's prefixes, the whole first
    and its first half second (when there is one): the first ``fitted`` runs (default: up to
    :data:`FIT_POINTS`) are the fit's points, the half says whether growth stopped even when
    it is too short to be one."""
    fitted = min(len(runs), FIT_POINTS) if fitted is None else fitted
    whole = runs[0]
    series = whole.series_created.get(rule_id, 0)
    logs = whole.matches.get(rule_id, 0)
    half = runs[1] if len(runs) > 1 else None
    if series <= 1 or (half is not None and half.series_created.get(rule_id, 0) == series):
        return Growth(series, logs, None, None)
    beta = fit([(run.matches.get(rule_id, 0), run.series_created.get(rule_id, 0))
                for run in runs[:fitted]])
    values = whole.label_values.get(rule_id, {})
    bound: int | None = None
    if half is not None and values and all(
            half.label_values.get(rule_id, {}).get(name) == count
            for name, count in values.items()):
        bound = 1
        for name, count in values.items():
            absent = whole.labelled.get(rule_id, {}).get(name, 0) < series
            bound *= count + (1 if absent else 0)
    return Growth(series, logs, beta, bound, guess=fitted < 2)


@dataclass(frozen=True)
class Sample:
    """The sample's lines and what its event times say: how many lines are logs (not
    blank), how many carry an event time, the earliest and the latest (ms; None without
    any)."""

    lines: list[bytes]
    logs: int
    timed: int
    first: int | None
    last: int | None

    @property
    def span_ms(self) -> int:
        return 0 if self.first is None or self.last is None else self.last - self.first


def read_sample(inputs: Sequence[str], timestamp_field: str) -> Sample:
    """The sample's lines (:func:`~l2m.batch.local.file_lines`) and their event times'
    range, taken from the parse stage's own columns (:func:`~l2m.engine.parse.parse_lines`:
    its event time where its status is ``ok``), so the range covers the logs
    :func:`~l2m.batch.local.run_local` counts as having one."""
    lines = list(file_lines(inputs))
    # No field but the event time: the status and time columns are all this reads.
    batch = parse_lines(lines, ParsePlan((), timestamp_field))
    status = batch.column(STATUS)
    timed = batch.column(TIMESTAMP).filter(pc.equal(status, int(Status.OK)))
    span = pc.min_max(timed).as_py()
    logs = len(lines) - (pc.sum(pc.equal(status, int(Status.BLANK))).as_py() or 0)
    return Sample(lines, logs, len(timed), span["min"], span["max"])


@dataclass(frozen=True)
class Runs:
    """The summaries of the sample's prefixes, the whole first, then its first half and
    quarter, and how many of them are the fit's points (the whole, and the prefixes of at
    least :data:`MIN_PREFIX` lines)."""

    summaries: list[BackfillSummary]
    fitted: int


def prefix_runs(settings: RunSettings, rules: Sequence[Rule], lines: Sequence[bytes]
                ) -> Runs:
    """The summaries of the whole sample, its first half and quarter, each of at least
    :data:`MIN_PREFIX` lines (the points of the fit) — and the first half of a sample too
    short for that, which still shows whether a rule stopped making series (flat)."""
    routing = settings.routing(rules)
    runs = [run_local(routing, lines).summary]
    size = len(lines) // 2
    while size >= MIN_PREFIX and len(runs) < FIT_POINTS:
        runs.append(run_local(routing, lines[:size]).summary)
        size //= 2
    if len(runs) == 1 and len(lines) >= 2:
        runs.append(run_local(routing, lines[:len(lines) // 2]).summary)
        return Runs(runs, 1)
    return Runs(runs, len(runs))


def estimate_command(rules: Sequence[Rule], inputs: Sequence[str], cfg: JobConfig,
                     out: TextIO) -> int:
    """Each enabled rule's cost over the sample ``inputs`` (module docstring), printed on
    ``out``; the exit code (0). A sample without a log that has an event time is an
    :class:`~l2m.errors.InputError` (nothing to estimate from); without an enabled rule,
    one line says there is nothing to estimate."""
    enabled = [r for r in rules if r.enabled]
    sample = read_sample(inputs, cfg.timestamp_field)
    if not sample.timed:
        files = ", ".join(inputs)
        if not sample.logs:
            raise InputError(f"--estimate: {files}: no logs, nothing to estimate from")
        raise InputError(f"--estimate: {files}: no log with an event time in "
                         f"'{cfg.timestamp_field}' among {len(sample.lines):,} line(s), nothing "
                         "to estimate from (is the event time in another field? "
                         "--timestamp-field)")
    if not enabled:
        print(f"estimate: no enabled rule to run on the sample's {sample.logs:,} logs, "
              "nothing to estimate", file=out)
        return 0
    settings = RunSettings(cfg.timestamp_field, cfg.limits.max_label_value_length, limits=None)
    runs = prefix_runs(settings, enabled, sample.lines)
    growths = {r.id: growth(r.id, runs.summaries, runs.fitted) for r in enabled}
    for line in report(enabled, runs.summaries[0], growths, sample, cfg, runs.fitted):
        print(line, file=out)
    distributions = distribution_lines(settings, enabled, sample.lines)
    for line in ["", *distributions] if distributions else []:
        print(line, file=out)
    return 0


def tsdb_series(rule: Rule) -> int:
    """The series one label set of ``rule`` makes in the TSDB: a classic histogram's
    ``_bucket`` per bound and ``+Inf``, ``_sum`` and ``_count``; a native histogram, one;
    a quantiles rule, one per quantile; any other rule, one."""
    if rule.aggregation == Aggregation.QUANTILES:
        return len(rule.quantiles)
    if rule.aggregation == Aggregation.HISTOGRAM:
        classic = len(rule.buckets) + 3 if rule.classic else 0
        return classic + (1 if rule.native_schema is not None else 0)
    return 1


def distribution_lines(settings: RunSettings, rules: Sequence[Rule], lines: Sequence[bytes]
                       ) -> list[str]:
    """The distributions table (module docstring): per histogram or quantiles rule with
    native buckets, the TSDB series per label set, the populated buckets per series (per
    series and window for gauges) — the most and the mean — its limit, and the schema it
    was kept at (the rule's, ``→`` the lowest one a series was lowered to). No lines when
    no rule has native buckets."""
    native = [r for r in rules if r.native_schema is not None]
    if not native:
        return []
    # Each as the native histogram it keeps (its own id, kind, schema and limit), no classic
    # bounds: the samples then carry the buckets the state holds.
    kept = [dataclasses.replace(r, aggregation=Aggregation.HISTOGRAM, buckets=(),
                                bucket_labels=(), quantiles=(), quantile_labels=())
            for r in native]
    run = run_local(settings.routing(kept), lines)
    populated: dict[str, list[int]] = {r.id: [] for r in native}
    schemas: dict[str, int] = {}
    for line in run.lines:
        sample = orjson.loads(line)
        histogram = sample.get(HISTOGRAM_KEY)
        if histogram is None:
            continue
        populated[sample["rule"]].append(len(histogram["positive"]) + len(histogram["negative"])
                                         + (1 if histogram["zero_count"] else 0))
        schemas[sample["rule"]] = min(schemas.get(sample["rule"], histogram["schema"]),
                                      histogram["schema"])
    rows = []
    for rule in native:
        counts = populated[rule.id]
        assert rule.native_schema is not None
        lowest = schemas.get(rule.id, rule.native_schema)
        rows.append([rule.id, str(rule.aggregation), f"{tsdb_series(rule):,}",
                     f"{max(counts, default=0):,}",
                     f"{sum(counts) / len(counts):,.1f}" if counts else "-",
                     f"{rule.native_max_buckets:,}",
                     str(rule.native_schema) if lowest == rule.native_schema
                     else f"{rule.native_schema} → {lowest}"])
    return ["distributions (exact; populated native buckets are the rows the state keeps "
            "per series, per series and window for gauges):"] + \
        ["  " + line for line in table(
            ["rule", "aggregation", "TSDB series per label set", "populated buckets (most)",
             "(mean)", "max_buckets", "schema"], rows, numeric=(2, 3, 4, 5))]


def report(rules: Sequence[Rule], summary: BackfillSummary, growths: dict[str, Growth],
           sample: Sample, cfg: JobConfig, fitted: int = FIT_POINTS) -> list[str]:
    """The estimate's text (module docstring); ``fitted``: how many of the sample's
    prefixes the growth was fitted on (:class:`Runs`)."""
    span = sample.span_ms
    lines = [f"estimate: {summary.logs:,} logs in the sample, {summary.parsed:,} with an "
             f"event time" + (f" over {duration_text(span)}" if span else "")
             + (f", {summary.no_timestamp:,} without one" if summary.no_timestamp else "")
             + (f", {summary.malformed:,} malformed" if summary.malformed else "")
             + (f" — {per_second(summary.parsed / (span / 1000))} logs/s" if span else ""),
             "", "seen in the sample (exact; every series, no caps applied):"]
    rows = []
    for rule in rules:
        matched = summary.matches.get(rule.id, 0)
        largest = summary.largest_label(rule.id)
        rows.append([rule.id, rule.kind.value, f"{matched:,}",
                     f"{100 * matched / summary.parsed:.1f}%" if summary.parsed else "-",
                     f"{summary.series_created.get(rule.id, 0):,}",
                     f"{summary.window_series.get(rule.id, 0):,}"
                     if rule.kind == Kind.GAUGE else "-",
                     "-" if largest is None else f"{largest[0]} ({largest[1]:,})"])
    lines += ["  " + line for line in table(
        ["rule", "kind", "logs matched", "share", "series", "most in a window",
         "largest label (values)"], rows, numeric=(2, 3, 4, 5))]
    ttl = cfg.counter_ttl_ms
    lines.append("")
    live_text = (f"live: counters over counter_ttl {duration_text(ttl)}, gauges per "
                 "one-minute window")
    if not span:
        lines.append("not projected (live series as seen; caps checked against them):")
    elif fitted >= 2:
        parts = "quarter, half and whole" if fitted >= 3 else "half and whole"
        lines.append("projected at the sample's rate (Heaps' law S = K·n^β fitted on the "
                     f"sample's first {parts}; {live_text}):")
    else:
        lines.append(f"projected at the sample's rate (the sample is too small to fit growth "
                     f"on its prefixes: flat where its second half made no new series, else "
                     f"S = n^β through the whole sample, a guess; {live_text}):")
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
            rate_s = summary.matches.get(rule.id, 0) * 1000 / span
            rows.append([rule.id, per_second(rate_s), growths[rule.id].describe(),
                         f"~{round(live[rule.id]):,}", f"~{round(per_day[rule.id]):,}", hit])
        else:
            rows.append([rule.id, f"{round(live[rule.id]):,}", hit])
    header = ["rule", "logs/s", "growth", "live series (proj.)", "series per day (proj.)",
              "caps hit (proj.)"] if span else ["rule", "live series (seen)", "caps hit"]
    lines += ["  " + line for line in table(
        header, rows, numeric=(1, 3, 4) if span else (1,))]
    lines += notes(rules, summary, growths, sample, fitted)
    lines += unique_id_warnings(rules, summary)
    return lines


def notes(rules: Sequence[Rule], summary: BackfillSummary, growths: dict[str, Growth],
          sample: Sample, fitted: int) -> list[str]:
    """The ``note:`` lines under the projection: why rules are not projected, or are on
    little evidence."""
    if not sample.span_ms:
        return [f"note: {len(rules)} rule(s) not projected: every event time in the sample is "
                f"{iso_text(sample.first or 0)}, so it has no rate — a sample over a span of "
                "time says more"]
    out = []
    guessed = [r.id for r in rules if growths[r.id].guess and growths[r.id].beta is not None]
    if guessed:
        out.append(f"note: {len(guessed)} rule(s) still made new series in the second half of "
                   f"a sample of {len(sample.lines):,} lines, too few to fit their growth "
                   f"(at least {2 * MIN_PREFIX} lines): their projection, marked (guess), "
                   "rests on the whole sample alone — a larger sample says more")
    few = [r.id for r in rules if 0 < summary.matches.get(r.id, 0) < UNIQUE_MIN_LOGS
           and r.id not in guessed]
    if few and fitted >= 2:
        out.append(f"note: {len(few)} rule(s) matched fewer than {UNIQUE_MIN_LOGS} logs: "
                   "their growth is fitted on little — a larger sample says more")
    return out


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

