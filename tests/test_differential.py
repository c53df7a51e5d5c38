"""The Spark pipeline against the pure-Python reference implementation (tests/reference.py):
the example rules over generated logs, and random queries over random logs."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from l2m.backfill import parse_frame, run_backfill
from l2m.columns import to_column
from l2m.errors import QueryError
from l2m.generator import GeneratorConfig, LogGenerator
from l2m.parse import ParsePlan
from l2m.query import parse_query
from l2m.rules import load_rules

from . import reference

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent


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


FIELDS = ["s", "n", "t", "message", "a.b"]
WORDS = ["x", "X", "10", "2.5", "-3", "abc", "Hello", "true", "a b", "é"]


def random_value(rng: random.Random):
    return rng.choice([None, True, False, 0, 10, -3, 2.5, 1.0, "10", "2.5", "abc", "Hello World",
                       "hello", "x", "X y", "a b c", "", "  ", "é!", {"b": "x"}, ["x"]])


def random_doc(rng: random.Random) -> dict:
    doc = {f: random_value(rng) for f in FIELDS if rng.random() < 0.7}
    if rng.random() < 0.3:
        doc["a"] = {"b": random_value(rng)}
    return doc


def random_query(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth < 3 and roll < 0.35:
        op = rng.choice([" AND ", " OR ", " ", " AND NOT "])
        return f"({random_query(rng, depth + 1)}{op}{random_query(rng, depth + 1)})"
    if depth < 3 and roll < 0.45:
        return rng.choice(["NOT ", "-", "+"]) + random_query(rng, depth + 1)
    field = rng.choice([*FIELDS, None])
    prefix = f"{field}:" if field else ""
    word = rng.choice(WORDS)
    kind = rng.random()
    if kind < 0.3:
        return prefix + (f'"{word}"' if " " in word else word)
    if kind < 0.45:
        return prefix + rng.choice(["x*", "*b*", "?", "h*o", "1*", "*"])
    if kind < 0.55 and field:
        regexes = ["x", "[a-z]+", "h.*", "1.?", ".*", "\\w+", "(?i)x", "a{,3}", "[[]", "x|a b",
                   "(a+)+b", "[^a-z]*", "\\pL+", "é?.", "."]
        return f"{prefix}/{rng.choice(regexes)}/"
    if kind < 0.8 and field:
        lo, hi = sorted(rng.sample(["-5", "0", "2.5", "10", "*", "a", "h", "z"], 2))
        return f"{prefix}{rng.choice('[{')}{lo} TO {hi}{rng.choice(']}')}"
    if kind < 0.9 and field:
        return f"{prefix}{rng.choice(['>', '>=', '<', '<='])}{rng.choice(['0', '2.5', 'b'])}"
    return f"_exists_:{rng.choice(FIELDS)}"


def test_random_queries_on_random_logs_equal_the_reference(spark):
    rng = random.Random(2026)
    docs = [random_doc(rng) for _ in range(120)]
    compiled = []
    while len(compiled) < 250:
        with contextlib.suppress(QueryError):
            compiled.append(parse_query(random_query(rng)))
    plan = ParsePlan.merge([u for c in compiled for u in c.fields])
    raw = spark.createDataFrame([(json.dumps(d),) for d in docs], "value string")
    cols = [to_column(c.root, plan).alias(f"q{i}") for i, c in enumerate(compiled)]
    rows = (parse_frame(raw, plan)
            .select(F.monotonically_increasing_id().alias("_row"), *cols).collect())
    rows.sort(key=lambda r: r["_row"])
    mismatches = [
        (c.source, docs[n])
        for i, c in enumerate(compiled)
        for n, row in enumerate(rows)
        if row[f"q{i}"] != reference.matches(c.root, docs[n])
    ]
    assert mismatches == []
