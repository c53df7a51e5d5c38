"""The Arrow fan-out (l2m/engine/fanout.py) produces exactly the match rows the reference evaluator
(tests/support/reference.py) reads off each log: the example and benchmark rules over generated
logs, with malformed and undated ones, and rules scoped to accounts."""

from __future__ import annotations

import bisect
import dataclasses
from pathlib import Path
from typing import Any

import orjson

from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.fanout import MATCH_SCHEMA, fan_out
from l2m.engine.parse import parse_lines
from l2m.engine.routing import plan_for
from l2m.engine.samples import series_labels
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Aggregation, Rule
from l2m.semantics import exphist
from l2m.semantics.values import lookup, parse_timestamp
from l2m.semantics.windows import window_start
from tests.support import reference
from tests.support.rulesets import SCOPED_RULES

ROOT = Path(__file__).resolve().parents[3]



def _native_key(value: float, schema: int) -> str:
    """The ``le`` of a value's native bucket, from exphist's definition of the bucket (not the
    engine's vectorised one): ``p<schema>/<index>``, ``n…``, ``z/``, or ``x/`` for NaN."""
    where = exphist.bucket_of(value, schema)
    if where is None:
        return "x/"
    side, index = where
    if side == exphist.ZERO:
        return "z/"
    return f"{'p' if side == exphist.POSITIVE else 'n'}{schema}/{index}"


def _expected(rule: Rule, doc: dict[str, Any], ts: int) -> list[tuple[Any, ...]]:
    """The reference's match rows of one log for one rule: one, or for a histogram asking for
    classic and native buckets one of each."""
    match = reference.rule_match(rule, doc)
    if match is None:
        return []
    labels, value = match
    les: list[str | None] = [None]
    if rule.aggregation in ("histogram", "quantiles"):
        les = []
        if rule.buckets:
            i = bisect.bisect_left(list(rule.buckets), value)
            les.append(rule.bucket_labels[i] if i < len(rule.buckets) else "+Inf")
        if rule.native_schema is not None:
            les.append(_native_key(value, rule.native_schema))
    window = window_start(ts) if rule.kind == "gauge" else None
    return [(rule.id, tuple(sorted(labels.items())), le, window, ts, value) for le in les]


def test_fan_out_equals_the_reference_match_rows() -> None:
    gen = LogGenerator(GeneratorConfig(seed=3, malformed_ratio=0.02, no_timestamp_ratio=0.02,
                                       late_ratio=0.05))
    lines = list(gen.lines(3000))
    rules = [*load_rules([ROOT / "rules", ROOT / "benchmarks" / "rules.yaml"]).rules,
             *load_text(SCOPED_RULES)[0]]
    routing = plan_for(rules)
    table = fan_out(parse_lines(lines, routing.plan), routing, with_status=False)
    assert table.schema == MATCH_SCHEMA
    by_id = {r.id: r for r in rules}
    # Rows without a numeric value count as matches only; the reference skips them.
    got = sorted((r["rule"], tuple(series_labels(by_id[r["rule"]], r["series"])), r["le"],
                  r["window"], r["ts"], r["v"]) for r in table.to_pylist() if r["v"] is not None)
    expected = []
    for line in lines:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        ts = parse_timestamp(lookup(doc, "@timestamp")) if isinstance(doc, dict) else None
        if ts is None:
            continue
        expected += [m for rule in routing.rules for m in _expected(rule, doc, ts)]
    expected.sort()
    assert len(got) == len(expected) > 10_000
    assert got == expected
    matched = set(table.column("rule").to_pylist())
    assert {"acct-web", "acct-lat"} <= matched and "none" not in matched


def test_a_histogram_with_classic_and_native_buckets_has_a_row_of_each_per_log() -> None:
    base, problems = load_text("""\
rules:
  - {id: both, name: both_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [1, 10]}
  - {id: q, name: q_ms, kind: gauge, query: '*', aggregation: sum, field: ms}
""")
    assert problems == []
    rules = [dataclasses.replace(base[0], native_schema=0),
             dataclasses.replace(base[1], aggregation=Aggregation.QUANTILES, native_schema=2,
                                 quantiles=(0.5,), quantile_labels=("0.5",))]
    routing = plan_for(rules)
    t = 1795341600000
    lines = [orjson.dumps({"@timestamp": t + i, "ms": v})
             for i, v in enumerate([3, 0, -0.5, "x", None, 1e300, 10])]
    table = fan_out(parse_lines(lines, routing.plan), routing, with_status=False)
    def order(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return row[0], row[1], row[2] or 0, row[3] or 0

    rows = sorted(((r["rule"], r["le"], r["ts"], r["v"]) for r in table.to_pylist()),
                  key=order)
    # classic bound, then native key: p0/2 is (2, 4], n0/-1 is [-0.5, -0.25), 1e300 in p0/997;
    # "x" and null: no value, the +Inf bound and the no-bucket key, no event time
    assert rows == sorted([
        ("both", "10", t, 3.0), ("both", "p0/2", t, 3.0),
        ("both", "1", t + 1, 0.0), ("both", "z/", t + 1, 0.0),
        ("both", "1", t + 2, -0.5), ("both", "n0/-1", t + 2, -0.5),
        ("both", "+Inf", None, None), ("both", "x/", None, None),
        ("both", "+Inf", None, None), ("both", "x/", None, None),
        ("both", "+Inf", t + 5, 1e300), ("both", "p0/997", t + 5, 1e300),
        ("both", "10", t + 6, 10.0), ("both", "p0/4", t + 6, 10.0),
        ("q", "p2/7", t, 3.0), ("q", "z/", t + 1, 0.0), ("q", "n2/-4", t + 2, -0.5),
        ("q", "x/", None, None), ("q", "x/", None, None),
        ("q", "p2/3987", t + 5, 1e300), ("q", "p2/14", t + 6, 10.0)], key=order)
