"""The second benchmark corpus (benchmarks/corpus_varied.py: timestamps in seven forms,
nesting to depth 6, dotted keys, numeric strings, nulls, long messages) through the JVM-free
backfill with its text-heavy rules (benchmarks/rules_text.yaml) equals the pure-Python
reference (tests/support/reference.py), sample for sample."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.corpus_varied import VariedConfig, VariedGenerator
from l2m.batch.local import RunSettings, run_local
from l2m.rules.loader import load_rules
from tests.support import reference

ROOT = Path(__file__).resolve().parents[3]


def test_the_varied_corpus_with_text_rules_equals_the_reference() -> None:
    lines = list(VariedGenerator(VariedConfig(seed=9, rate_per_s=20)).lines(3_000))
    rules = list(load_rules([ROOT / "benchmarks" / "rules_text.yaml"]).rules)
    local = run_local(RunSettings(limits=None).routing(rules), lines)
    got = [json.loads(line) for line in local.lines]
    expected = reference.backfill(rules, [line.decode() for line in lines])
    assert len(got) == len(expected) == 368
    assert got == expected
