"""The Arrow match stage (l2m/engine/match.py) against the reference evaluator, no JVM: random
queries over random logs, the example rules over generated logs, and shared nodes evaluated
once."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

import pyarrow as pa
import pytest

from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.match import Matcher
from l2m.engine.parse import STATUS, ParsePlan, parse_lines
from l2m.engine.status import ROUTED
from l2m.errors import QueryError
from l2m.query.compiler import parse_query
from l2m.query.nodes import KeywordEquals, Node, Or
from l2m.rules.loader import load_rules
from tests.support import reference
from tests.support.randomq import random_doc, random_query

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("seed", [2026, 7, 99])
def test_random_queries_on_random_logs_equal_the_reference(seed: int) -> None:
    print(f"seed {seed}")
    rng = random.Random(seed)
    docs = [random_doc(rng) for _ in range(150)]
    compiled = []
    while len(compiled) < 300:
        with contextlib.suppress(QueryError):
            compiled.append(parse_query(random_query(rng)))
    plan = ParsePlan.merge([u for c in compiled for u in c.fields])
    batch = parse_lines([json.dumps(d) for d in docs], plan)
    matcher = Matcher(batch, plan)
    mismatches = [
        (c.source, docs[n], got)
        for c in compiled
        for n, got in enumerate(matcher.mask(c.root).to_pylist())
        if got != reference.matches(c.root, docs[n])
    ]
    assert mismatches == []


def test_example_rules_on_generated_logs_equal_the_reference() -> None:
    gen = LogGenerator(GeneratorConfig(seed=5, malformed_ratio=0.0, no_timestamp_ratio=0.0))
    lines = [line.decode() for line in gen.lines(2000)]
    rules = [r for r in load_rules([ROOT / "rules"]).rules if r.enabled]
    plan = ParsePlan.merge([u for r in rules for u in r.compiled.fields])  # type: ignore[union-attr]
    batch = parse_lines(lines, plan)
    assert set(batch.column(STATUS).to_pylist()) <= set(ROUTED)
    matcher = Matcher(batch, plan)
    docs = [json.loads(line) for line in lines]
    total = 0
    for rule in rules:
        assert rule.compiled is not None
        got = matcher.mask(rule.compiled.root).to_pylist()
        assert got == [reference.matches(rule.compiled.root, d) for d in docs], rule.id
        total += sum(got)
    assert total > 1000  # the rules do match something


def test_a_node_shared_by_many_queries_is_evaluated_once(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    queries = [parse_query(f"service:checkout AND status:{code}") for code in range(300)]
    plan = ParsePlan.merge([u for q in queries for u in q.fields])
    lines = [json.dumps({"service": s, "status": c})
             for s in ("checkout", "web") for c in range(5)]
    matcher = Matcher(parse_lines(lines, plan), plan)
    seen: list[Node] = []
    original = Matcher.visit_KeywordEquals

    def counting(self: Matcher, node: KeywordEquals) -> pa.BooleanArray:
        seen.append(node)
        return original(self, node)

    monkeypatch.setattr(Matcher, "visit_KeywordEquals", counting)
    masks = [matcher.mask(q.root).to_pylist() for q in queries]
    assert masks[3] == [c == 3 for _s in ("checkout",) for c in range(5)] + [False] * 5
    assert seen.count(KeywordEquals("service", "checkout")) == 1
    assert len(seen) == 301  # checkout once, each status once


def test_empty_batches_and_empty_connectives() -> None:
    plan = ParsePlan.merge(parse_query("a:x").fields)
    matcher = Matcher(parse_lines([], plan), plan)
    assert matcher.mask(parse_query("a:x").root).to_pylist() == []
    assert Matcher(parse_lines(["{}"], plan), plan).mask(Or(())).to_pylist() == [False]


def test_an_unknown_node_is_a_typed_error() -> None:
    class Strange(Node):
        pass

    plan = ParsePlan.merge([])
    with pytest.raises(QueryError) as caught:
        Matcher(parse_lines(["{}"], plan), plan).mask(Strange())
    assert (caught.value.code, caught.value.params["construct"]) == ("QUERY_UNSUPPORTED",
                                                                      "Strange")
