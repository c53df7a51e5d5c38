"""Gauges stage (SPEC §3): one-minute tumbling windows per series.

Input: one rule's open window in a gauge key — a format 2 blob's section
(:mod:`l2m.state.format2`) or the entries format 9 fetched for it (:mod:`l2m.state.windowkeys`),
as ``{"sig", "series"}`` — and its partials of this micro-batch. Output: the new content and
the corrected samples of the series the batch touched.

The watermark is Spark's (``withWatermark`` on the partials' event time: the largest event
time seen minus the grace, advanced at the end of each micro-batch). A window stays open —
each batch that changes it re-emits its corrected value — until the watermark passes its
end; then its state goes, and logs that still arrive for it are dropped and counted."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import Accumulator

from l2m.engine.admission import REFUSED_GROUP_BY, Admission, redirected
from l2m.engine.nativebuckets import logs_twice, reduced_parts
from l2m.engine.partials import Partial
from l2m.engine.samples import rule_samples, series_labels
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics.windows import window_closed, window_final
from l2m.state.counters import REFUSED_RULE, same_signature, signature
from l2m.state.tally import Tally

# Logs a gauge rule counted into its overflow series in one one-minute window because they
# would have opened a series past a cap in that window (l2m.engine.admission), in the window
# key's section REFUSED_RULE. A gauge per window, as the rules' are: a window's refusals go
# with its state.
REFUSED_GAUGE_RULE = Rule(id="l2m-series-refused-window", name="l2m_series_refused",
                          kind=Kind.GAUGE, query="*", aggregation=Aggregation.COUNT,
                          group_by=REFUSED_GROUP_BY, file="<l2m>")


@dataclass
class GaugeState:
    """One rule's open window in a key (:meth:`update`), for either format.

    A rule's window: ``{"sig", "series": {series: {le: partial}}}`` (layouts:
    :mod:`l2m.state.format`). A key that gets no data is looked at again every ``recheck_ms`` of
    processing time, to let its window go once the watermark has passed."""

    rules: Mapping[str, Rule]
    recheck_ms: int = 60_000
    # The driver's metrics (l2m.state.tally.Latest): open series per (rule, shard, window) key.
    tally: Accumulator[Tally] | None = None
    # When a window's value is published as final (state format 9; None: never): the newest
    # event time past its end by publish_delay_ms (docs/prometheus.md).
    grace_ms: int | None = None
    publish_delay_ms: int = 0

    def final(self, window: int, watermark: int) -> bool:
        """The window's value is published now (:func:`l2m.semantics.windows.window_final`)."""
        return self.grace_ms is not None and \
            window_final(window, watermark, self.grace_ms, self.publish_delay_ms)

    @staticmethod
    def closed(window: int, watermark: int) -> bool:
        """The watermark has passed the window: its state goes, and the logs still arriving
        for it are counted as late by the input statuses (l2m_late_logs_total)."""
        return window_closed(window, watermark)

    def rule(self, rule_id: str) -> Rule | None:
        """A gauge rule of the job, or l2m's own refusal gauge; None for a removed rule."""
        if rule_id == REFUSED_RULE:
            return REFUSED_GAUGE_RULE
        return self.rules.get(rule_id)

    def update(self, rule_id: str, window: int, stored: dict[str, Any],
               rows: list[tuple[str, str, Partial]], admission: Admission | None = None
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One rule's open window in one key: its stored content (``{"sig", "series"}``) and
        its partials of this batch → the new content and the samples of the series this
        batch touched (corrected values re-emitted). ``admission``: new series past a cap go
        to the rule's overflow series."""
        rule = self.rule(rule_id)
        assert rule is not None
        series: dict[str, dict[str, list[Any]]] = stored.get("series", {})
        if stored.get("sig") is not None and not same_signature(stored["sig"], rule):
            series = {}
        touched: set[str] = set()
        for name, le, part in redirected(rows, series, admission, rule_id, logs_twice(rule)):
            buckets = series.setdefault(name, {})
            buckets[le] = part.merged_into(buckets.get(le))
            touched.add(name)
        if rule.native_schema is not None:
            for name in touched:
                series[name] = bounded(series[name], rule.native_max_buckets)
        content = {"sig": signature(rule), "series": series}
        return content, self.samples(rule, window, series, sorted(touched))

    @staticmethod
    def samples(rule: Rule, window: int, series: Mapping[str, Mapping[str, Any]],
                names: list[str] | None = None) -> list[dict[str, Any]]:
        """The samples of a rule's stored series (``names`` of them, by default all, in key
        order) in the window."""
        return [s for name in (sorted(series) if names is None else names)
                for s in rule_samples(rule, series_labels(rule, name), window,
                                      {le: Partial.load(v) for le, v in series[name].items()})]


def bounded(buckets: dict[str, list[Any]], max_buckets: int) -> dict[str, list[Any]]:
    """A native histogram's (or quantiles') series in a window, ``{le: stored partial}``,
    kept at most ``max_buckets`` populated buckets
    (:func:`~l2m.engine.nativebuckets.reduced_parts`): the same partials when they need no
    re-keying. Exact (the window's samples depend only on its observations); a hostile
    stream keeps its rows few."""
    reduced = reduced_parts(_Loaded(buckets), max_buckets)
    return buckets if reduced is None else {le: p.dump() for le, p in reduced.items()}


class _Loaded(Mapping[str, Partial]):
    """Stored partials by ``le``, each loaded when read: deciding that nothing needs re-keying
    reads the keys only (a load parses a decimal)."""

    def __init__(self, stored: Mapping[str, list[Any]]) -> None:
        self.stored = stored

    def __getitem__(self, le: str) -> Partial:
        return Partial.load(self.stored[le])

    def __iter__(self) -> Iterator[str]:
        return iter(self.stored)

    def __len__(self) -> int:
        return len(self.stored)
