"""Backfill's last stage (l2m.batch.finals): sort keys that keep Python's order, and the
tally rows beside the samples."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import orjson
import pyarrow as pa
import pytest

from l2m.batch import finals
from l2m.batch.finals import (
    FINAL_ARROW,
    MATCHES,
    STATUS,
    Tallies,
    domain_samples,
    ordered_lines,
    sort_key,
)
from l2m.engine.admission import OVERFLOW_SERIES
from l2m.engine.partials import PARTIAL_ARROW, merge, partial_rows
from l2m.engine.samples import rule_samples, series_labels
from l2m.rules.loader import load_text

ALPHABET = ["", "a", "b", "\x00", "\x00\x00", "\x01", "é", "\uffff", "\U0001f600", "a\x00",
            "ab", " ", "~"]


def _labels(rng: random.Random) -> tuple[tuple[str, str], ...]:
    names = sorted(rng.sample(["a", "b", "c", "l2m_overflow"], rng.randint(0, 3)))
    return tuple((name, "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 3))))
                 for name in names)


def test_sort_keys_order_as_the_python_tuples_do():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    items = []
    for _ in range(3_000):
        window = rng.choice([None, 0, 60_000, -60_000, 1 << 40, -(1 << 40)])
        items.append((_labels(rng), window, rng.randint(0, 20)))
    by_python = sorted(items, key=lambda t: (t[0], t[1] or 0, t[2]))
    by_key = sorted(items, key=lambda t: sort_key(*t))
    assert [(t[0], t[1] or 0, t[2]) for t in by_key] == \
        [(t[0], t[1] or 0, t[2]) for t in by_python]


def test_samples_come_out_by_rule_rank_then_key_and_tallies_apart():
    rows = [
        (1, sort_key([("a", "x")], None, 0), b'{"s":3}', "r1", True, None, None),
        (0, sort_key([("a", "y")], None, 0), b'{"s":2}', "r0", False, None, None),
        (0, sort_key([("a", "x")], 60_000, 0), b'{"s":1}', "r0", True, None, None),
        (None, None, None, "ok", None, STATUS, 7),
        (None, None, None, "r0", None, MATCHES, 5),
    ]
    table = pa.Table.from_pylist([dict(zip(FINAL_ARROW.names, r, strict=True)) for r in rows],
                                 schema=FINAL_ARROW)
    samples, tallies = ordered_lines(table)
    assert samples.column("line").to_pylist() == [b'{"s":1}', b'{"s":2}', b'{"s":3}']
    assert samples.column("finite").to_pylist() == [True, False, True]
    assert tallies.to_pylist() == [{"tally": STATUS, "rule": "ok", "count": 7},
                                   {"tally": MATCHES, "rule": "r0", "count": 5}]


SAMPLE_RULES = """\
rules:
  - {id: plain, name: plain_total, kind: counter, query: "*", aggregation: sum, field: v,
     group_by: [a, b]}
  - {id: tenant, name: "tenant_max", kind: gauge, query: "*", aggregation: max,
     field: v, group_by: [a], account: acme, labels: {team: "q\\"uote"}}
  - {id: avg, name: "avg_ms", kind: gauge, query: "*", aggregation: avg, field: v,
     group_by: [m], labels: {zz: "1", a0: "2"}}
  - {id: low, name: "low_total", kind: counter, query: "*", aggregation: min, field: v}
  - {id: n, name: "n_total", kind: counter, query: "*", aggregation: count, group_by: [b]}
  - {id: h, name: "h_ms", kind: gauge, query: "*", aggregation: histogram, field: v,
     buckets: [1, 10], group_by: [a]}
"""
VALUES = [0.0, -0.0, 1.0, 0.1, 1e20, 1e-7, 123456789.123, 2.0 ** 60, -5.5, math.inf,
          -math.inf, math.nan, 3.0]
LABEL_VALUES = ["", "x", "é", "\U0001f600", 'q"\\', "\x00\x1f\n", "a" * 300, "-", "12:ab",
                "\x7f\u2028/", None, OVERFLOW_SERIES]


def _series_key(rule, text: str | None) -> str:
    # The encoding of l2m.engine.labels: "<length>:<value>" per group-by value, "-" absent.
    if text == OVERFLOW_SERIES:
        return text
    return "".join(f"{len(text)}:{text}" if text is not None else "-"
                   for _ in rule.group_labels)


def _partial_row(rule_id, series, le, window, value, exact, rng):
    n = rng.choice([0, 1, 3]) if exact is None else 1
    return {"rule": rule_id, "series": series, "le": le, "window": window, "matches": n + 1,
            "n": n, "sum": value, "exact_sum": exact, "exact_n": 1 if exact is not None else 0,
            "min": value, "max": value, "ts": rng.choice([None, 0, 1_764_000_000_000])}


def _reference_lines(table, rules):
    """The samples as the state stage builds them, one partial at a time in Python:
    (rank, sort key, orjson line of the sample dict, rule, finite)."""
    by_id = {r.id: r for r in rules}
    rank = {r.id: i for i, r in enumerate(rules)}
    families: dict = {}
    for rule_id, name, le, window, part in partial_rows(table):
        families.setdefault((rule_id, name, window), {})[le or ""] = part
    out = set()
    for (rule_id, name, window), parts in families.items():
        rule = by_id[rule_id]
        labels = series_labels(rule, name)
        if rule.aggregation == "histogram":
            parts = dict(sorted(parts.items(),
                                key=lambda kv: math.inf if kv[0] == "+Inf" else float(kv[0])))
        for i, s in enumerate(rule_samples(rule, labels, window, parts)):
            out.add((rank[rule_id], sort_key(labels, window, i), orjson.dumps(s), rule_id,
                     math.isfinite(s["value"]) if not isinstance(s["value"], str) else False))
    return out


@pytest.mark.parametrize(("seed", "arrow_series"), [(1, 64), (2, 1), (3, 1), (4, 1)])
def test_sample_lines_are_orjson_of_the_sample_byte_for_byte(seed, arrow_series, monkeypatch):
    """domain_samples joins each line from pieces on Arrow: byte for byte orjson's dump of
    the sample dict the state stage builds, for every aggregation (exact sums converted as
    Python converts a Decimal, which Arrow's cast does not), odd label values, non-finite
    values, counters (their largest event time) and gauge windows (negative too).
    ``arrow_series``: a rule's series are labelled on Arrow from this many (the benchmark's
    rules have thousands; these a dozen)."""
    monkeypatch.setattr(finals, "_ARROW_SERIES", arrow_series)
    print(f"seed {seed}")
    rng = random.Random(seed)
    rules = list(load_text(SAMPLE_RULES)[0])
    rows = []
    for rule in rules:
        for text in LABEL_VALUES:
            series = _series_key(rule, text) if rule.group_labels else ""
            for value in VALUES:
                exact = None
                if rng.random() < 0.5 and math.isfinite(value) and abs(value) < 1e19:
                    # 18 places, as Spark's decimal(38,18): not always the double's digits
                    # of any length: Arrow's cast rounds a fifth of these otherwise
                    digits = rng.randrange(10 ** rng.randint(1, 37))
                    exact = Decimal(rng.choice([-1, 1]) * digits).scaleb(-18)
                window = None if rule.kind == "counter" else rng.choice([0, -60_000, 60_000])
                les = ["1", "10", "+Inf"] if rule.aggregation == "histogram" else [None]
                for le in les:
                    rows.append(_partial_row(rule.id, series, le, window, value, exact, rng))
    table = merge([pa.Table.from_pylist(rows, PARTIAL_ARROW)], unique=False)
    got = domain_samples(table, rules, None, Tallies())
    assert got.column("tally").null_count == got.num_rows
    assert set(zip(*(got.column(c).to_pylist() for c in ("rank", "sort", "line", "rule",
                                                          "finite")), strict=True)) == \
        _reference_lines(table, rules)
    assert got.num_rows == len(_reference_lines(table, rules))


def test_a_sum_that_left_the_double_range_both_ways_shows_nan_in_backfill_and_state():
    """A +inf and a -inf double sum merged on Arrow (a read task, backfill's merge) make a
    NaN sum: it reads as NaN, not 0 — the sample shows "NaN" (docs/failure-modes.md), as
    the state's own merge of the two (Partial.merge) does."""
    rule = next(r for r in load_text(SAMPLE_RULES)[0] if r.id == "plain")
    series = _series_key(rule, "x")
    rows = [{"rule": "plain", "series": series, "le": None, "window": None, "matches": 2,
             "n": 2, "sum": total, "exact_sum": None, "exact_n": 0, "min": total / 2,
             "max": total / 2, "ts": 7} for total in (math.inf, -math.inf)]
    table = merge([pa.Table.from_pylist(rows, PARTIAL_ARROW)], unique=False)
    (_, _, _, _, part), = partial_rows(table)
    assert math.isnan(part.sum) and part.exact is None
    lines = domain_samples(table, [rule], None, Tallies())
    sample = orjson.loads(lines.column("line")[0].as_py())
    assert sample["value"] == "NaN" and lines.column("finite").to_pylist() == [False]
    up, down = (next(partial_rows(pa.Table.from_pylist([row], PARTIAL_ARROW)))[4]
                for row in rows)
    assert (up.sum, down.sum) == (math.inf, -math.inf)
    assert math.isnan(up.merge(down).total)
