"""Counters stage (SPEC §3): cumulative totals per (rule, series) since first seen; idle
series expire after the TTL.

Input: one rule's counters in a counter key — a format 2 blob's section
(:mod:`l2m.state.format2`) or the entries format 9 fetched for it (:mod:`l2m.state.counterkeys`),
as ``{"sig", "series"[, "late"]}`` — and its partials of this micro-batch. Output: the new
content and the samples of the series the batch touched; for the input statuses also the
late-log count. Also what both formats share about counters: l2m's own counter rules, a
rule's signature, what a rule's counters tell the driver (:func:`tallied`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import Accumulator

from l2m.engine.admission import REFUSED_GROUP_BY, Admission, redirected
from l2m.engine.labels import CUT_RULE
from l2m.engine.nativebuckets import logs_twice, reduced_parts
from l2m.engine.partials import Partial
from l2m.engine.samples import MARK_KEY, NEW, rule_samples, series_labels, series_samples
from l2m.engine.status import STATUS_RULE, status_label
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics.windows import window_closed
from l2m.state.tally import CutCount, InputCount, LateCount, SeriesCount, Tally

# How often a counter key re-checks its untouched rules: format 2 drops their idle series,
# format 9 re-counts every rule's live series for the driver's metrics (series expire without
# a call).
SWEEP_MS = 60_000

# The input counter l2m keeps about itself: logs per parse status (ok, malformed, …).
INPUT_RULE = Rule(id="l2m-input", name="l2m_input_logs_total", kind=Kind.COUNTER, query="*",
                  aggregation=Aggregation.COUNT, group_by=("status",), file="<l2m>")
# Logs that arrived after the watermark had closed their one-minute window: the gauges
# ignored them (counters still counted them).
LATE_RULE = Rule(id="l2m-late", name="l2m_late_logs_total", kind=Kind.COUNTER, query="*",
                 aggregation=Aggregation.COUNT, file="<l2m>")
# Label values from logs cut to the job's limit (l2m.engine.labels), per rule: the cut rows'
# series is the rule's id, read as the label `rule`.
CUT_COUNT_RULE = Rule(id="l2m-label-cut", name="l2m_label_values_cut_total", kind=Kind.COUNTER,
                      query="*", aggregation=Aggregation.COUNT, group_by=("rule",),
                      file="<l2m>")
# Logs a counter rule counted into its overflow series because they would have opened a
# series past a cap (l2m.engine.admission): per rule, its account and the cap (`limit`).
REFUSED_RULE = "__refused__"
REFUSED_COUNT_RULE = Rule(id="l2m-series-refused", name="l2m_series_refused_total",
                          kind=Kind.COUNTER, query="*", aggregation=Aggregation.COUNT,
                          group_by=REFUSED_GROUP_BY, file="<l2m>")
# The counters l2m keeps about itself, by the rule id of their rows.
INTERNAL_RULES = {STATUS_RULE: INPUT_RULE, CUT_RULE: CUT_COUNT_RULE,
                  REFUSED_RULE: REFUSED_COUNT_RULE}


def signature(rule: Rule) -> tuple[Any, ...]:
    """What makes accumulated values meaningful: when it changes, a series restarts. Stored
    with the values (as a list: ``[aggregation, field, [bound…], [group-by…]]``), compared
    with :func:`same_signature`."""
    return rule.signature


def same_signature(stored: Any, rule: Rule) -> bool:
    """Whether a stored signature (read back as lists, or set in this call) is the rule's
    (a native schema is among its bounds, :attr:`~l2m.rules.model.Rule.signature`)."""
    sig = rule.signature
    return stored is not None and len(stored) == len(sig) and stored[0] == sig[0] \
        and stored[1] == sig[1] and tuple(stored[2]) == sig[2] and tuple(stored[3]) == sig[3]


@dataclass
class CounterState:
    """One rule's counters in a key (:meth:`update`), for either format.

    A rule's counters: ``{"sig": signature, "series": {series: [last_seen_ms, {le:
    partial}]}}`` (layouts: :mod:`l2m.state.format`), so many series are updated per Python
    call and the state schema does not depend on the rules. Series idle for longer than the TTL are
    dropped (a later log restarts them at 0, a counter reset for PromQL).

    The input-status key (rule ``__status__``, one shard) also counts late logs: its status
    partials carry each log's one-minute window in ``le``, and a log whose window the
    watermark has closed — the gauges ignore it — is added to ``"late"``, emitted as
    ``l2m_late_logs_total``. Counting here, once per log and in the checkpoint, keeps the
    count exact across restarts."""

    rules: Mapping[str, Rule]
    ttl_ms: int
    late: Accumulator[int] | None = None  # late logs, for the progress line
    # The driver's metrics (l2m.state.tally.Latest): live series per key; for the input-status
    # key its exact per-status and late counts.
    tally: Accumulator[Tally] | None = None

    def update(self, rule_id: str, stored: dict[str, Any],
               rows: list[tuple[str, str, Partial]], now: int, watermark: int,
               sweep: bool = True, admission: Admission | None = None, marked: bool = False
               ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """One rule's counters in one key: its stored content (``{"sig", "series"[, "late"]}``),
        its partials of this batch → the new content (None: nothing left to keep) and the
        samples of the series this batch touched. ``sweep``: drop series idle past the TTL.
        ``admission``: new series past a cap go to the rule's overflow series. ``marked``: the
        samples of a series' first batch *with a value* carry :data:`~l2m.engine.samples.NEW`
        (state format 9, for remote write): a series started by logs without one (a missing
        or non-numeric ``field``) is stored with no sample, and its first sample, in a later
        batch, is the one remote write must precede with a 0; so is the late-log count's
        first (docs/prometheus.md)."""
        status = rule_id == STATUS_RULE
        rule = INTERNAL_RULES.get(rule_id) or self.rules.get(rule_id)
        series: dict[str, list[Any]] = stored.get("series", {})
        late = stored.get("late")
        late_before = Partial.load(late).matches if late else 0
        if rule is not None and stored.get("sig") is not None \
                and not same_signature(stored["sig"], rule):
            series = {}
        # The merged partials of the touched series, for their samples (loading them back
        # from their stored form costs a Decimal parse each).
        merged: dict[str, dict[str, Partial]] = {}
        # Series that had produced no sample before this batch: new, or stored with no value
        # (count ``n`` at index 1 of each stored partial: every bucket's, for a histogram).
        started: set[str] = set()
        twice = rule is not None and logs_twice(rule)
        # One pass per row; a burst of new series makes this loop the state stage's hottest.
        for name, le, part in redirected(rows, series, admission, rule_id, twice):
            if status:
                if le and window_closed(int(le), watermark):
                    late = part.merged_into(late)
                le = ""
            entry = series.get(name)
            parts = merged.get(name)
            if parts is None:
                parts = merged[name] = {}
                if marked and not _sampled(entry):
                    started.add(name)
            if entry is None:
                entry = series[name] = [now, {}]
                before = None
            else:
                entry[0] = now
                before = parts.get(le)
                if before is None:
                    stored_part = entry[1].get(le)
                    before = Partial.load(stored_part) if stored_part is not None else None
            after = part if before is None else before.merge(part)
            parts[le] = after
            entry[1][le] = after.dump()
        if rule is not None and rule.native_schema is not None:
            for name, parts in merged.items():
                merged[name] = bounded(series[name], parts, rule.native_max_buckets)
        if sweep:
            cutoff = now - self.ttl_ms
            series = {s: v for s, v in series.items() if v[0] >= cutoff}
        content: dict[str, Any] | None = None
        if series or late:
            sig = signature(rule) if rule is not None else stored.get("sig")
            content = {"sig": sig, "series": series}
            if late:
                content["late"] = late
        if rule is None or not merged:
            return content, []
        return content, _touched_samples(rule, series, merged, started) + \
            self._late(late, late_before, marked)

    def _late(self, late: list[Any] | None, before: int, marked: bool) -> list[dict[str, Any]]:
        """The late-log count's sample when it grew from ``before``; its first (``before`` 0:
        none yet, or expired) marked new."""
        counted = Partial.load(late) if late else None
        if counted is None or counted.matches <= before:
            return []
        produced = series_samples(LATE_RULE, [], counted.ts or 0, counted)
        if marked and before == 0:
            for s in produced:
                s[MARK_KEY] = NEW
        if self.late is not None:
            self.late.add(counted.matches - before)
        return produced


def _touched_samples(rule: Rule, series: Mapping[str, list[Any]],
                     merged: Mapping[str, dict[str, Partial]], started: set[str]
                     ) -> list[dict[str, Any]]:
    """The samples of the series a batch touched (``merged``: their partials this batch, by
    ``le``; ``series``: every bucket's stored form), in key order; those in ``started`` (their
    first with a value) marked :data:`~l2m.engine.samples.NEW`."""
    samples = []
    for name in sorted(merged):
        produced = rule_samples(rule, series_labels(rule, name), None,
                                merged[name] if rule.native_schema is not None else
                                {le: merged[name].get(le) or Partial.load(v)
                                 for le, v in series[name][1].items()})
        if name in started:
            for s in produced:
                s[MARK_KEY] = NEW
        samples += produced
    return samples


def bounded(entry: list[Any], touched: Mapping[str, Partial], max_buckets: int
            ) -> dict[str, Partial]:
    """A native histogram's series after a batch (``entry``: ``[last_seen, {le: stored
    partial}]``, ``touched``: the partials this batch merged, by ``le``) kept at most
    ``max_buckets`` populated buckets (:func:`~l2m.engine.nativebuckets.reduced_parts`):
    ``entry`` rewritten when they are re-keyed. Returns every partial of the series, by
    ``le``. Exact: a sample, and backfill's, depend only on the observations, not on how
    batches split them; a hostile stream (values over 1e-300..1e300) keeps its rows few."""
    parts = {le: touched.get(le) or Partial.load(v) for le, v in entry[1].items()}
    reduced = reduced_parts(parts, max_buckets)
    if reduced is None:
        return parts
    entry[1] = {le: p.dump() for le, p in reduced.items()}
    return reduced


def _sampled(entry: list[Any] | None) -> bool:
    """Whether a stored counter series (``[last_seen, {le: partial}]``) has produced a sample:
    a value counted in some bucket (``n``, index 1 of a stored partial)."""
    return entry is not None and any(p[1] > 0 for p in entry[1].values())


def tallied(rule_id: str, shard: int, window: int,
             content: dict[str, Any] | None) -> Tally:
    """What a rule's counters in a key tell the driver's metrics (:mod:`l2m.runtime.telemetry`): its
    live series; the input statuses their totals per status (``2:ok`` → ``ok``) and late
    logs; the cut rows their totals per rule (``label_values_cut_total``)."""
    series: dict[str, list[Any]] = (content or {}).get("series", {})
    late = (content or {}).get("late")
    if rule_id == CUT_RULE:
        return {CutCount(status_label(name)): sum(Partial.load(p).matches
                                                  for p in entry[1].values())
                for name, entry in series.items()}
    if rule_id != STATUS_RULE:
        return {SeriesCount(rule_id, shard, window): len(series)}
    tally: Tally = {
        InputCount(status_label(name)): sum(Partial.load(p).matches
                                               for p in entry[1].values())
        for name, entry in series.items()}
    tally[LateCount()] = Partial.load(late).matches if late else 0
    return tally
