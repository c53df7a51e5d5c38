"""The pipeline against the pure-Python reference implementation (tests/support/reference.py): the
example rules over generated logs through the whole backfill, and random queries over random
logs through the parse stage and the matcher. The JVM-free backfill (l2m.batch.local.run_local,
what `l2m test` runs) against `l2m backfill` itself: the same sample lines, byte for byte, and
the same summary."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
from pathlib import Path

from l2m.batch.backfill import run_backfill
from l2m.batch.local import RunSettings, file_lines, run_local
from l2m.batch.summary import BackfillSummary
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.match import Matcher
from l2m.engine.parse import ParsePlan, parse_lines
from l2m.errors import QueryError
from l2m.policy.limits import Limits, SeriesLimits
from l2m.query.compiler import parse_query
from l2m.rules.loader import load_rules
from tests.support import reference
from tests.support.randomq import random_doc, random_query

ROOT = Path(__file__).resolve().parents[2]


def generated_logs(path: Path) -> list[str]:
    """4,000 generated logs (seeded) with malformed, late and timestamp-less shares, written
    to ``path``."""
    gen = LogGenerator(GeneratorConfig(seed=11, rate_per_s=20, malformed_ratio=0.01,
                                       late_ratio=0.05, no_timestamp_ratio=0.01))
    lines = [line.decode() for line in gen.lines(4000)]
    path.write_text("\n".join(lines) + "\n")
    return lines


def same_summary(local: BackfillSummary, backfill: BackfillSummary) -> None:
    """Every count of the two summaries equal (the time aside)."""
    assert dataclasses.replace(local, seconds=0.0) == dataclasses.replace(backfill, seconds=0.0)


def test_example_rules_on_generated_logs_equal_the_reference(spark, tmp_path):
    lines = generated_logs(tmp_path / "logs.jsonl")
    rules = list(load_rules([ROOT / "rules"]).rules)
    out = tmp_path / "out.jsonl"
    summary = run_backfill(spark, rules, [str(tmp_path / "logs.jsonl")], out, progress=False)
    got = [json.loads(x) for x in out.read_text().splitlines()]
    expected = reference.backfill(rules, lines)
    assert len(got) == len(expected) > 300
    assert got == expected
    # ... and what l2m test computes without a JVM is that backfill's output, byte for byte
    local = run_local(RunSettings().routing(rules), file_lines([tmp_path / "logs.jsonl"]))
    assert local.lines == out.read_bytes().splitlines()
    assert summary.malformed > 0 and summary.no_timestamp > 0
    same_summary(local.summary, summary)


def test_the_jvm_free_backfill_equals_backfill_past_caps_and_label_limits(spark, tmp_path):
    """The shipped samples and generated logs, with caps low enough to refuse series (every
    cap, per-account overrides too) and label values cut."""
    generated_logs(tmp_path / "logs.jsonl")
    inputs = [str(ROOT / "samples" / "logs.jsonl"), str(tmp_path / "logs.jsonl")]
    limits = Limits(SeriesLimits(per_rule=6, per_metric=8, per_account=100),
                    accounts=(("acme", (("per_metric", 2),)), ("platform", (("per_account", 3),))))
    settings = RunSettings(max_label_value_length=16, limits=limits)
    rules = list(load_rules([ROOT / "rules"], limits=limits).rules)
    out = tmp_path / "out.jsonl"
    summary = run_backfill(spark, rules, inputs, out, progress=False,
                           max_label_value_length=16, limits=limits)
    local = run_local(settings.routing(rules), file_lines(inputs))
    assert len(local.lines) > 300
    assert local.lines == out.read_bytes().splitlines()
    assert {key.split(" ")[1] for key in summary.refused} == {"(rule)", "(metric)",
                                                              "(account)"}
    assert sum(summary.cut.values()) > 0
    same_summary(local.summary, summary)


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
