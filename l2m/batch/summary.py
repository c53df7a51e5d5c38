"""What a run of the rules over logs read and wrote: :class:`BackfillSummary`, filled from
the last stage's samples and tally rows (:func:`tally`) — by ``l2m backfill`` on Spark and by
the same stages in one process (:mod:`l2m.batch.local`: ``l2m test``, ``l2m validate
--estimate``).

Input: the samples in the output's order and the tally rows
(:func:`l2m.batch.finals.ordered_lines`). Output: the summary and its text
(:meth:`BackfillSummary.render`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from l2m.batch.finals import CUT, MATCHES, REFUSED, STATUS
from l2m.defaults import MAX_LABEL_VALUE_LENGTH


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
    series: dict[str, int] = field(default_factory=dict)
    # Label values cut to the limit, per rule (l2m.engine.labels); only rules with cuts.
    cut: dict[str, int] = field(default_factory=dict)
    # Logs counted into an overflow series, per "rule (limit)" (l2m.engine.admission).
    refused: dict[str, int] = field(default_factory=dict)
    max_label_value_length: int = MAX_LABEL_VALUE_LENGTH
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

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
        """The per-rule table: a header line, then one line per rule in load order."""
        rows = [[rule, f"{count:,}", f"{self.series.get(rule, 0):,}"]
                for rule, count in self.matches.items()]
        return table(["rule", "logs matched", "samples"], rows, numeric=(1, 2))


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
    for entry in pc.value_counts(samples.column("rule")).to_pylist():
        summary.series[entry["values"]] += entry["counts"]
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


