"""The Quix Streams peer's rules, compiled once into Python predicates
(benchmarks/predicates.py), against the reference evaluator (tests/support/reference.py): the peer
is compared with l2m only while it computes exactly what the SPEC defines."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import orjson

from benchmarks.predicates import CompiledRules, compile_node
from benchmarks.tenants import write_rules
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.errors import QueryError
from l2m.query.compiler import parse_query
from l2m.rules.loader import load_rules
from tests.support import reference
from tests.support.randomq import random_doc, random_query

ROOT = Path(__file__).resolve().parents[3]


def test_random_queries_on_random_logs_equal_the_reference():
    rng = random.Random(2027)
    docs = [random_doc(rng) for _ in range(120)]
    compiled = []
    while len(compiled) < 250:
        with contextlib.suppress(QueryError):
            compiled.append(parse_query(random_query(rng)))
    mismatches = [(c.source, doc) for c in compiled for doc in docs
                  if compile_node(c.root)(doc) != reference.matches(c.root, doc)]
    assert mismatches == []


def test_rules_of_many_accounts_on_generated_logs_equal_the_reference(tmp_path: Path):
    """The benchmark rules, the example rules and tenant rules of 20 accounts: per log, the
    labels and value each rule takes (None where it does not count the log), account
    selection included."""
    rules = [r for r in (*load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules,
                         *load_rules([ROOT / "rules"]).rules,
                         *load_rules([write_rules(tmp_path / "tenants.yaml", 20)]).rules)
             if r.enabled]
    compiled = CompiledRules(rules)
    gen = LogGenerator(GeneratorConfig(seed=5, accounts=20, malformed_ratio=0.0))
    docs = [orjson.loads(line) for line in gen.lines(1500)]
    counted = 0
    for doc in docs:
        chosen = {c.rule.id: c.match(doc) for c in compiled.for_doc(doc)}
        for rule in rules:
            expected = reference.rule_match(rule, doc)
            assert chosen.get(rule.id) == expected, (rule.id, doc)
            counted += expected is not None
    assert len(rules) > 100 and counted > 5000
