"""The pipeline against the pure-Python reference implementation (tests/support/reference.py): the
example rules over generated logs through the whole backfill, and random queries over random
logs through the parse stage and the matcher."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

from l2m.batch.backfill import run_backfill
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.match import Matcher
from l2m.engine.parse import ParsePlan, parse_lines
from l2m.errors import QueryError
from l2m.query.compiler import parse_query
from l2m.rules.loader import load_rules
from tests.support import reference
from tests.support.randomq import random_doc, random_query

ROOT = Path(__file__).resolve().parents[2]


def test_example_rules_on_generated_logs_equal_the_reference(spark, tmp_path):
    gen = LogGenerator(GeneratorConfig(seed=11, rate_per_s=20, malformed_ratio=0.01,
                                       late_ratio=0.05, no_timestamp_ratio=0.01))
    lines = [line.decode() for line in gen.lines(4000)]
    logs = tmp_path / "logs.jsonl"
    logs.write_text("\n".join(lines) + "\n")
    rules = list(load_rules([ROOT / "rules"]).rules)
    out = tmp_path / "out.jsonl"
    run_backfill(spark, rules, [str(logs)], out, progress=False)
    got = [json.loads(x) for x in out.read_text().splitlines()]
    expected = reference.backfill(rules, lines)
    assert len(got) == len(expected) > 300
    assert got == expected


def test_random_queries_on_random_logs_equal_the_reference():
    rng = random.Random(2026)
    docs = [random_doc(rng) for _ in range(120)]
    compiled = []
    while len(compiled) < 250:
        with contextlib.suppress(QueryError):
            compiled.append(parse_query(random_query(rng)))
    plan = ParsePlan.merge([u for c in compiled for u in c.fields])
    matcher = Matcher(parse_lines([json.dumps(d) for d in docs], plan), plan)
    mismatches = [
        (c.source, docs[n])
        for c in compiled
        for n, hit in enumerate(matcher.mask(c.root).to_pylist())
        if hit != reference.matches(c.root, docs[n])
    ]
    assert mismatches == []
