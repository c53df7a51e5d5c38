"""The second benchmark corpus (benchmarks/corpus_varied.py) and its rules
(benchmarks/rules_text.yaml): the shapes issue 58 asks for, deterministic by seed, and every
rule counting some of its logs (by the pure-Python reference of SPEC §2–3)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from benchmarks.corpus_varied import VariedConfig, VariedGenerator
from l2m.rules.loader import load_rules
from l2m.semantics.values import lookup, number, parse_timestamp
from tests.support.reference import rule_match

ROOT = Path(__file__).resolve().parents[3]
LINES = list(VariedGenerator(VariedConfig(seed=5)).lines(6_000))
DOCS = [orjson.loads(line) for line in LINES]


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _nulls(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_nulls(v) for v in value.values())
    if isinstance(value, list):
        return sum(_nulls(v) for v in value)
    return value is None


def test_the_same_seed_gives_the_same_logs_and_another_seed_others() -> None:
    again = list(VariedGenerator(VariedConfig(seed=5)).lines(200))
    other = list(VariedGenerator(VariedConfig(seed=6)).lines(200))
    assert again == LINES[:200]
    assert other != LINES[:200]


def test_log_sizes_run_from_about_100_bytes_to_4_kb() -> None:
    sizes = [len(line) for line in LINES]
    assert 100 <= min(sizes) < 140
    assert 3_000 < max(sizes) <= 4_200
    assert sum(s < 200 for s in sizes) > 300 and sum(s > 1_500 for s in sizes) > 50


def test_timestamps_come_in_every_form_and_all_parse() -> None:
    forms: Counter[str] = Counter()
    for doc in DOCS:
        ts = doc["@timestamp"]
        assert parse_timestamp(ts) is not None, ts
        if isinstance(ts, int):
            forms["epoch ms"] += 1
        elif isinstance(ts, float):
            forms["epoch ms with a fraction"] += 1
        elif ts.endswith("Z"):
            forms["Z"] += 1
        elif " " in ts:
            forms["space"] += 1
        elif ts[-3] == ":":
            forms["fraction 6" if len(ts) == 32 else "fraction 0" if len(ts) == 25
                  else "other offset"] += 1
        else:
            forms["offset without colon"] += 1
    assert set(forms) == {"epoch ms", "epoch ms with a fraction", "Z", "space", "fraction 6",
                          "fraction 0", "offset without colon"}
    assert min(forms.values()) > 200


def test_shapes_vary_in_nesting_keys_numeric_strings_and_nulls() -> None:
    depths = Counter(_depth(doc) for doc in DOCS)
    assert min(depths) == 1 and max(depths) == 6
    keys = [len(doc) for doc in DOCS]
    assert min(keys) == 3 and max(keys) == 65
    assert sum(any("." in k for k in doc) for doc in DOCS) > 2_000  # dotted top-level keys
    assert sum(_nulls(doc) > 0 for doc in DOCS) > 1_000
    statuses = [doc["http.response.status_code"] for doc in DOCS
                if "http.response.status_code" in doc]
    assert sum(isinstance(s, str) for s in statuses) > 100
    assert sum(isinstance(s, int) for s in statuses) > 1_000
    durations = [lookup(doc, "postgresql.log.duration_ms") for doc in DOCS]
    durations = [d for d in durations if d is not None]
    assert durations and all(isinstance(d, str) and number(d) is not None for d in durations)
    # "host" is a string in some sources and an object in others; "host.name" is flat in one
    hosts = Counter(type(doc.get("host")).__name__ for doc in DOCS if "host" in doc)
    assert set(hosts) == {"str", "dict"}
    assert sum("host.name" in doc for doc in DOCS) > 1_000


def test_every_rule_is_valid_and_counts_some_logs_but_not_all() -> None:
    rules = load_rules([ROOT / "benchmarks" / "rules_text.yaml"]).rules
    assert len(rules) == 28
    text = sum("message" in str(r.query) or not any(c in r.query for c in ":*") or
               '"' in r.query for r in rules)
    assert text >= 14  # heavier on message text than the harness's rules
    counted = {r.id: sum(rule_match(r, doc) is not None for doc in DOCS) for r in rules}
    assert all(n > 0 for n in counted.values()), counted
    assert all(n < len(DOCS) for rid, n in counted.items() if rid != "t-all"), counted
