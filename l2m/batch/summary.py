"""What a run of the rules over logs read and wrote: :class:`BackfillSummary`, filled from
the last stage's samples and tally rows (:func:`tally`) — by ``l2m backfill`` on Spark and by
the same stages in one process (:mod:`l2m.batch.local`: ``l2m test``, ``l2m validate
--estimate``).

Input: the samples in the output's order, with their sort keys, and the tally rows
(:func:`l2m.batch.finals.ordered_lines`). Output: the summary and its text
(:meth:`BackfillSummary.render`; the per-rule table :meth:`BackfillSummary.render_rules`).

**Where each count is made.** Sums (logs by status, cut values, refused logs, matches) are
tally rows of the last-stage tasks, added up. Distinct counts are not additive: each
last-stage task holds whole windows, and a series spans windows (a counter's one domain is
whole in one task, but a gauge's series is in every window it has logs in). So the series
per rule, the most in one window and each group-by label's distinct values are counted here,
on the driver, over every sample written — from each sample's sort key
(:func:`l2m.batch.finals.sort_key`: its series' labels, its window, its place in its family),
not its JSON. One histogram family (its ``_bucket`` per bound, ``_sum``, ``_count``) shares
one labels key, so it is one series. Spark's backfill and :func:`l2m.batch.local.run_local`
hand this the same samples, so both count the same.

Series a cap refused are counted as logs (per rule and cap, the tally), not as series: the
read tasks fold a rule's series past its cap into the overflow series before the shuffle
(:func:`l2m.engine.admission.beyond_rule_caps`), so no stage holds them all — counting them
would mean sending every refused series' name through the shuffle, the cost that cut
saves. ``l2m validate --estimate`` runs without caps and sees them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.batch.finals import CUT, MATCHES, REFUSED, STATUS, TAIL_BYTES
from l2m.defaults import MAX_LABEL_VALUE_LENGTH
from l2m.engine.admission import Limit
from l2m.rules.model import Kind, Rule


@dataclass
class BackfillSummary:
    """What a backfill read and wrote."""

    logs: int = 0  # non-blank lines
    parsed: int = 0
    malformed: int = 0
    no_timestamp: int = 0
    blank_lines: int = 0
    samples: int = 0
    nonfinite: int = 0  # samples whose value left the double range (+Inf, -Inf, NaN)
    seconds: float = 0.0
    matches: dict[str, int] = field(default_factory=dict)
    # samples written per rule (a rule's distinct series are series_created)
    samples_per_rule: dict[str, int] = field(default_factory=dict)
    # Label values cut to the limit, per rule (l2m.engine.labels); only rules with cuts.
    cut: dict[str, int] = field(default_factory=dict)
    # Logs counted into an overflow series, per "rule (limit)" (l2m.engine.admission).
    refused: dict[str, int] = field(default_factory=dict)
    max_label_value_length: int = MAX_LABEL_VALUE_LENGTH
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    # Per rule, counted on the driver over the samples (module docstring): distinct series
    # (label sets, the overflow series among them; a histogram family is one), the most in
    # one window (gauges), and each group-by label's distinct values, in group_by order.
    series_created: dict[str, int] = field(default_factory=dict)
    window_series: dict[str, int] = field(default_factory=dict)
    label_values: dict[str, dict[str, int]] = field(default_factory=dict)
    # ... and how many of its series carry each (fewer than its series: some logs lack it)
    labelled: dict[str, dict[str, int]] = field(default_factory=dict)
    # What the counts above need of the rules: each one's group-by label names, its kind.
    group_labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gauges: set[str] = field(default_factory=set)

    @classmethod
    def for_rules(cls, rules: Sequence[Rule],
                  max_label_value_length: int = MAX_LABEL_VALUE_LENGTH) -> BackfillSummary:
        """An empty summary of a run of ``rules`` (the enabled ones, as routed)."""
        return cls(matches={r.id: 0 for r in rules},
                   samples_per_rule={r.id: 0 for r in rules},
                   max_label_value_length=max_label_value_length,
                   group_labels={r.id: tuple(name for name, _ in r.group_labels)
                                 for r in rules},
                   gauges={r.id for r in rules if r.kind == Kind.GAUGE})

    def largest_label(self, rule_id: str) -> tuple[str, int] | None:
        """The rule's group-by label with the most distinct values (the first in group_by
        order among equals) and their number; None for a rule without group_by."""
        values = self.label_values.get(rule_id)
        if not values:
            return None
        name = max(values, key=lambda n: values[n])  # max keeps the first of equals
        return name, values[name]

    def refused_logs(self, rule_id: str) -> dict[str, int]:
        """Logs of the rule counted into its overflow series, per limit, in the order the
        caps are checked (rule, metric, account)."""
        out = {}
        for key, logs in self.refused.items():
            rule, _, limit = key.rpartition(" (")
            if rule == rule_id:
                out[limit.rstrip(")")] = logs
        order = [str(limit) for limit in Limit]
        return dict(sorted(out.items(), key=lambda kv: order.index(kv[0])
                           if kv[0] in order else len(order)))

    def count_status(self, status: str, count: int) -> None:
        if status == "blank":
            self.blank_lines += count
            return
        self.logs += count
        if status == "ok":
            self.parsed += count
        elif status == "malformed":
            self.malformed += count
        elif status == "no_timestamp":
            self.no_timestamp += count

    def render(self) -> str:
        rate = self.logs / self.seconds if self.seconds else 0.0
        lines = [
            f"logs read:          {self.logs}",
            f"malformed lines:    {self.malformed}",
            f"without timestamp:  {self.no_timestamp} (skipped)",
            f"corrupt files:      {len(self.skipped_files)} (skipped)",
            *[f"  {path}: {reason}" for path, reason in self.skipped_files],
            f"samples written:    {self.samples}"
            + (f" ({self.nonfinite} non-finite: +Inf/-Inf/NaN)" if self.nonfinite else ""),
            f"label values cut:   {sum(self.cut.values())} (longer than "
            f"{self.max_label_value_length} characters)",
            *[f"  {rule}: {count}" for rule, count in self.cut.items()],
            f"series refused:     {sum(self.refused.values())} logs (counted into overflow "
            "series, l2m_overflow=\"true\")",
            *[f"  {rule}: {count}" for rule, count in sorted(self.refused.items())],
            f"time:               {self.seconds:.1f}s ({rate:,.0f} logs/s)",
            "per rule:",
            *[f"  {line}" for line in self.render_rules()],
        ]
        return "\n".join(lines)

    def render_rules(self) -> list[str]:
        """The per-rule table: a header line, then one line per rule in load order — logs
        matched, samples written, series (distinct label sets), the most series in one window
        (gauges; ``-`` for counters), the largest group-by label and its distinct values, and
        the logs counted into the overflow series per cap (``-``: none)."""
        rows = []
        for rule, count in self.matches.items():
            largest = self.largest_label(rule)
            refused = self.refused_logs(rule)
            rows.append([
                rule, f"{count:,}", f"{self.samples_per_rule.get(rule, 0):,}",
                f"{self.series_created.get(rule, 0):,}",
                f"{self.window_series.get(rule, 0):,}" if rule in self.gauges else "-",
                "-" if largest is None else f"{largest[0]} ({largest[1]:,})",
                ", ".join(f"{logs:,} {limit}" for limit, logs in refused.items()) or "-"])
        return table(["rule", "logs matched", "samples", "series", "most in a window",
                      "largest label (values)", "logs refused (cap)"], rows,
                     numeric=(1, 2, 3, 4))


def table(header: list[str], rows: list[list[str]], numeric: tuple[int, ...] = ()
          ) -> list[str]:
    """Aligned columns, two spaces apart: the ``numeric`` ones right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
                         ).rstrip()

    return [line(header), *(line(r) for r in rows)]


def tally(summary: BackfillSummary, samples: pa.Table, tallies: pa.Table) -> None:
    """The run's counts from the samples written and the tasks' tally rows
    (:func:`l2m.batch.finals.ordered_lines`)."""
    summary.samples += samples.num_rows
    summary.nonfinite += pc.sum(pc.invert(samples.column("finite"))).as_py() or 0
    count_series(summary, samples)
    for entry in pc.value_counts(samples.column("rule")).to_pylist():
        summary.samples_per_rule[entry["values"]] += entry["counts"]
    rows = sorted(zip(tallies.column("tally").to_pylist(), tallies.column("rule").to_pylist(),
                      tallies.column("count").to_pylist(), strict=True))
    for kind, name, count in rows:
        if kind == STATUS:
            summary.count_status(name, count)
        elif kind == CUT:
            summary.cut[name] = summary.cut.get(name, 0) + count
        elif kind == REFUSED:
            summary.refused[name] = summary.refused.get(name, 0) + count
        elif kind == MATCHES:
            summary.matches[name] += count


def count_series(summary: BackfillSummary, samples: pa.Table) -> None:
    """Series per rule, the most in one window and group-by labels' distinct values, over
    every sample written (``rule`` and ``sort`` columns, in the output's order; module
    docstring). The output's order is by rule, then labels, window and place in the family,
    so a series' samples are adjacent, and a series' windows in order: each count is of the
    rows where a key changes — one pass, no hashing of every sample (a rule grouping by a
    unique id has as many series as samples)."""
    rows = samples.num_rows
    if not rows:
        return
    sort = samples.column("sort").combine_chunks()
    rule = samples.column("rule").combine_chunks()
    labels = pc.binary_slice(sort, 0, -TAIL_BYTES)
    # a sort key's window: the 8 bytes before its last 4 (l2m.batch.finals._tail)
    window = pc.binary_slice(sort, -TAIL_BYTES, -TAIL_BYTES + 8)
    new_series = _changes(rule, rows)
    new_series[1:] |= _changes(labels, rows)[1:]
    new_window = new_series.copy()
    new_window[1:] |= _changes(window, rows)[1:]
    starts = pa.array(np.flatnonzero(new_series))
    for entry in pc.value_counts(rule.take(starts)).to_pylist():
        name = entry["values"]
        summary.series_created[name] = summary.series_created.get(name, 0) + entry["counts"]
    at = np.flatnonzero(new_window)
    gauge = pc.is_in(rule.take(pa.array(at)), pa.array(sorted(summary.gauges), pa.string()))
    at = at[gauge.to_numpy(zero_copy_only=False)]
    if len(at):
        # a (series, window) starts at each row of ``at``: count them per (rule, window)
        per = pa.table({"rule": rule.take(pa.array(at)), "window": window.take(pa.array(at))})
        counts = per.group_by(["rule", "window"], use_threads=False).aggregate(
            [([], "count_all")])
        most = counts.group_by("rule", use_threads=False).aggregate([("count_all", "max")])
        for name, count in zip(most.column("rule").to_pylist(),
                               most.column("count_all_max").to_pylist(), strict=True):
            summary.window_series[name] = max(summary.window_series.get(name, 0), count)
    _count_label_values(summary, pa.table({"rule": rule.take(starts),
                                           "labels": labels.take(starts)}))


def _changes(values: pa.Array, rows: int) -> np.ndarray:
    """Where each row differs from the one before it (the first row: True)."""
    changed = np.ones(rows, np.bool_)
    if rows > 1:
        changed[1:] = pc.not_equal(values.slice(1), values.slice(0, rows - 1)).to_numpy(
            zero_copy_only=False)
    return changed


def _count_label_values(summary: BackfillSummary, series: pa.Table) -> None:
    """Each group-by label's distinct values per rule, from the distinct series' labels keys
    (:func:`l2m.batch.finals.labels_key`: ``01 name 00 01 value 00`` per label, then
    ``00``; a NUL inside is escaped as ``00 ff``, so ``00 01`` only parts two strings)."""
    labels = series.column("labels").combine_chunks()
    named = pc.greater(pc.binary_length(labels), 1)  # b"\x00": a series without labels
    labels = labels.filter(named)
    rules = series.column("rule").combine_chunks().filter(named)
    if not len(labels):
        return
    parts = pc.split_pattern(pc.binary_slice(labels, 1, -2), b"\x00\x01")
    flat = pc.list_flatten(parts)
    parent = pc.list_parent_indices(parts).to_numpy()
    offsets = parts.offsets.to_numpy()
    position = np.arange(len(flat)) - offsets[parent]
    names = np.flatnonzero(position % 2 == 0)
    pairs = pa.table({"rule": rules.take(pa.array(parent[names])),
                      "name": flat.take(pa.array(names)),
                      "value": flat.take(pa.array(names + 1))})
    counted = pairs.group_by(["rule", "name"], use_threads=False).aggregate(
        [("value", "count_distinct"), ("value", "count")])
    found: dict[tuple[str, bytes], tuple[int, int]] = {
        (rule, name): (distinct, series) for rule, name, distinct, series in zip(
            *(counted.column(c).to_pylist()
              for c in ("rule", "name", "value_count_distinct", "value_count")), strict=True)}
    for rule, names_of in summary.group_labels.items():
        values = summary.label_values.setdefault(rule, {})
        labelled = summary.labelled.setdefault(rule, {})
        for name in names_of:
            distinct, series = found.get((rule, name.encode()), (0, 0))
            values[name] = values.get(name, 0) + distinct
            labelled[name] = labelled.get(name, 0) + series
