"""Backfill's last stage, on the executors: the partials of whole admission domains → sample
lines, each with the key that puts it in the output's order, and the run's tallies.

Input: every read task's partials (:data:`~l2m.engine.partials.PARTIAL_SCHEMA`) of some
windows, all of each window (a window is one admission domain; counters, window null, are
one), and the routing option (:func:`l2m.engine.pipeline.routing_option`). Output:
:data:`FINAL_SCHEMA` rows — a sample's JSON line with its rule's rank and its sort key, or
(``line`` null) a tally: the input statuses, cut label values, refused logs and matches per
rule. :func:`ordered_lines` puts the samples in the output's order on the driver.

Semantics are streaming's (:mod:`l2m.engine.admission`) as if every log came in one
micro-batch: per domain, rules in id order, a rule's new series in key order. The output's
order: rules as loaded, then labels, window and bucket bound. Building the samples here, not
on the driver, spreads it over the cores (350,000 samples cost the driver ≈ 4 s,
benchmarks/README.md)."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from l2m.collector import collector_paused
from l2m.engine.admission import (
    OVERFLOW_SERIES,
    Admission,
    Limit,
    RuleCaps,
    beyond_rule_caps,
    redirected,
)
from l2m.engine.labels import CUT_RULE
from l2m.engine.partials import Partial, merge, partial_rows
from l2m.engine.pipeline import routing_from_option
from l2m.engine.samples import (
    SampleLines,
    is_finite_sample,
    rule_samples,
    series_labels,
    series_value,
)
from l2m.engine.status import STATUS_RULE, status_label
from l2m.rules.model import Aggregation, Rule

FINAL_SCHEMA = "rank int, sort binary, line binary, rule string, finite boolean, " \
               "tally string, count bigint"
FINAL_ARROW = pa.schema([("rank", pa.int32()), ("sort", pa.binary()), ("line", pa.binary()),
                         ("rule", pa.string()), ("finite", pa.bool_()),
                         ("tally", pa.string()), ("count", pa.int64())])
# What a tally row counts (its ``rule`` column names what it counts it for).
STATUS = "status"  # input lines by parse status (status label)
CUT = "cut"  # label values cut to the limit (rule id)
REFUSED = "refused"  # logs counted into an overflow series ("rule (limit)")
MATCHES = "matches"  # logs a rule's samples count (rule id)
_WINDOW_BIAS = 1 << 63  # a window (ms, may be negative) as an unsigned, order-keeping int


def _text_key(text: str) -> bytes:
    # UTF-8 orders as code points do and never holds 0xff, so escaping 0x00 as 00 ff and
    # ending each string with 00 keeps a tuple of strings in Python's order.
    return b"\x01" + text.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff") + \
        b"\x00"


def labels_key(labels: Iterable[tuple[str, str]]) -> bytes:
    """The start of :func:`sort_key`: bytes that order as a series' labels (sorted (name,
    value) pairs) do in Python."""
    return b"".join(_name_key(name) + _text_key(value) for name, value in labels) + b"\x00"


@functools.cache
def _name_key(name: str) -> bytes:
    return _text_key(name)  # a handful of label names, each in every sample


_TAIL = struct.Struct(">QI")


def _tail(window: int | None, index: int) -> bytes:
    """The end of :func:`sort_key`: a window and a sample's place in its family."""
    return _TAIL.pack((window or 0) + _WINDOW_BIAS, index)


def sort_key(labels: Iterable[tuple[str, str]], window: int | None, index: int) -> bytes:
    """Bytes that order as ``(labels, window or 0, index)`` does in Python: a series' labels
    (sorted (name, value) pairs), its window, and a sample's place in its family."""
    return labels_key(labels) + _tail(window, index)


def _count_collapsed(admission: Admission, rule_id: str,
                     rows: list[tuple[str, str, Partial]]) -> None:
    """Count the logs of the series :func:`~l2m.engine.admission.beyond_rule_caps` merged into
    the overflow series before admission: refused for the reason of the rule's own first
    refusal (after it every later series is refused alike), or its per-rule cap when its
    candidates all got in."""
    logs = [part for name, _, part in rows if name == OVERFLOW_SERIES]
    if not logs:
        return
    reasons = [limit for rule, limit in admission.refused if rule == rule_id]
    reason = reasons[0] if reasons else Limit.RULE
    for part in logs:
        admission.count(rule_id, reason, part.matches, part.ts)


class Tallies:
    """The tally rows of one task, summed by (tally, name)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}

    def add(self, tally: str, name: str, count: int) -> None:
        self.counts[(tally, name)] = self.counts.get((tally, name), 0) + count


def domain_samples(rows: Iterable[tuple[str, str, str | None, int | None, Partial]],
                   rules: Sequence[Rule], caps: Mapping[str, RuleCaps] | None,
                   tallies: Tallies) -> Iterator[tuple[int, bytes, bytes, str, bool]]:
    """Merged partials of whole domains, as (rule, series, le, window, partial) → (rule rank,
    sort key, sample's JSON line, rule id, value finite) in no particular order, counting the
    input statuses, cuts, refusals and matches into ``tallies``. With ``caps``, series past a
    cap go to their rule's overflow series."""
    by_id = {r.id: r for r in rules}
    rank = {r.id: i for i, r in enumerate(rules)}
    domains: dict[int | None, dict[str, list[tuple[str, str, Partial]]]] = {}
    for rule_id, series, le, window, part in rows:
        if rule_id == STATUS_RULE:
            tallies.add(STATUS, status_label(series), part.matches)
            continue
        if rule_id == CUT_RULE:
            tallies.add(CUT, status_label(series), part.matches)
            continue
        # "" outside histograms, as the state stage reads partials (frame_partials)
        domains.setdefault(window, {}).setdefault(rule_id, []).append((series, le or "", part))
    # Per rule: a series' labels, its sort key's start and its lines' start, built once per
    # task — a gauge's series recurs in every window it has values in.
    seen: dict[str, dict[str, tuple[list[tuple[str, str]], bytes, bytes]]] = {}
    # Per rule with samples here (not per rule loaded: a backfill may load 100,000).
    templates: dict[str, SampleLines] = {}
    for window, by_rule in domains.items():
        admission = Admission(caps, {}) if caps else None
        tail = _tail(window, 0)
        for rule_id in sorted(by_rule):
            rule = by_id[rule_id]
            known = seen.setdefault(rule_id, {})
            at = rank[rule_id]
            rows_of = by_rule[rule_id]
            kept = redirected(rows_of, {}, admission, rule_id)
            if admission is not None:
                _count_collapsed(admission, rule_id, rows_of)
            # A series key and its labels are one to one (series_labels), so a family is
            # keyed by the key; the rows of one (a histogram's buckets, or the series an
            # overflow series took in) are merged in key order.
            families: dict[str, dict[str, Partial]] = {}
            for name, le, part in kept:
                parts_of = families.setdefault(name, {})
                parts_of[le] = part.merge(parts_of[le]) if le in parts_of else part
            matches = 0
            template = templates.get(rule_id)
            if template is None and rule.aggregation != Aggregation.HISTOGRAM:
                template = templates[rule_id] = SampleLines(rule)
            for name, parts in families.items():
                entry = known.get(name)
                if entry is None:
                    labels = series_labels(rule, name)
                    entry = known[name] = (labels, labels_key(labels),
                                           template.prefix(labels) if template else b"")
                labels, start, prefix = entry
                if template is None:  # a histogram
                    parts = dict(sorted(parts.items(), key=lambda kv: _le_order(kv[0])))
                    matches += sum(p.matches for p in parts.values())
                    for i, sample in enumerate(rule_samples(rule, labels, window, parts)):
                        yield (at, start + _tail(window, i), orjson.dumps(sample), rule_id,
                               is_finite_sample(sample))
                    continue
                part = parts[""]
                matches += part.matches
                value = series_value(rule, part)
                if value is not None:
                    line, finite = template.line(
                        prefix, value, (part.ts or 0) if window is None else window)
                    yield at, start + tail, line, rule_id, finite
            tallies.add(MATCHES, rule_id, matches)
        for (rule_id, limit), (logs, _ts) in (admission.refused if admission else {}).items():
            tallies.add(REFUSED, f"{rule_id} ({limit})", logs)


def _le_order(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le) if le else 0.0


def final_rows(option: str, capped: Mapping[str, int]
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over whole domains' partials (module docstring): merged by
    key, the series a per-rule cap refuses for certain collapsed
    (:func:`~l2m.engine.admission.beyond_rule_caps`), then :func:`domain_samples`."""
    cut = beyond_rule_caps  # taken here, on the driver: the function the tasks run

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        routing = routing_from_option(option)
        tables = [pa.Table.from_batches([b]) for b in batches]
        if not tables:
            return
        merged = merge(tables, unique=False)
        if capped:
            merged = cut(merged, capped)
        tallies = Tallies()
        ranks: list[int] = []
        keys: list[bytes] = []
        lines: list[bytes] = []
        names: list[str] = []
        finite: list[bool] = []
        # Hundreds of thousands of rows, samples and lines, none in a cycle: collecting
        # while they are built took half the stage (benchmarks/README.md).
        with collector_paused():
            for rank, key, line, rule_id, ok in domain_samples(
                    partial_rows(merged), routing.rules, routing.caps, tallies):
                ranks.append(rank)
                keys.append(key)
                lines.append(line)
                names.append(rule_id)
                finite.append(ok)
        counted = sorted(tallies.counts.items())
        empty = [None] * len(counted)
        yield from pa.table({
            "rank": pa.array(ranks + empty, pa.int32()),
            "sort": pa.array(keys + empty, pa.binary()),
            "line": pa.array(lines + empty, pa.binary()),
            "rule": pa.array(names + [name for (_, name), _ in counted], pa.string()),
            "finite": pa.array(finite + empty, pa.bool_()),
            "tally": pa.array([None] * len(lines) + [t for (t, _), _ in counted], pa.string()),
            "count": pa.array([None] * len(lines) + [c for _, c in counted], pa.int64()),
        }, schema=FINAL_ARROW).to_batches(max_chunksize=10_000)

    return run


def ordered_lines(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The tasks' rows (:data:`FINAL_SCHEMA`) → the samples in the output's order (``line``,
    ``rule``, ``finite``) and the tally rows (``tally``, ``rule``, ``count``)."""
    is_sample = pc.is_valid(table.column("line"))
    samples = table.filter(is_sample)
    order = pc.sort_indices(samples, sort_keys=[("rank", "ascending"), ("sort", "ascending")])
    samples = samples.take(order).select(["line", "rule", "finite"])
    tallies = table.filter(pc.invert(is_sample)).select(["tally", "rule", "count"])
    return samples, tallies
