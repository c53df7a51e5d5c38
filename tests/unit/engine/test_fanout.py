"""The Arrow fan-out (l2m/engine/fanout.py) produces exactly the match rows the reference evaluator
(tests/support/reference.py) reads off each log: the example and benchmark rules over generated
logs, with malformed and undated ones, and rules scoped to accounts."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import orjson

from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.fanout import MATCH_SCHEMA, fan_out
from l2m.engine.parse import parse_lines
from l2m.engine.routing import plan_for
from l2m.engine.samples import series_labels
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Rule
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
