"""Queries at the limits `l2m validate` allows (issue 8): hundreds of OR/AND terms (once a
left-deep chain that overflowed the JVM's stack), chains of NOTs, nesting at the parenthesis
limit, and hostile regexes and wildcards over long values — each checked against the
reference evaluator, through the matcher and through the whole fan-out stage."""

from __future__ import annotations

import json
import time

from l2m.engine.fanout import fan_out
from l2m.engine.match import Matcher
from l2m.engine.parse import ParsePlan, parse_lines
from l2m.engine.routing import plan_for
from l2m.engine.status import STATUS_RULE
from l2m.query.compiler import parse_query
from l2m.query.limits import MAX_NESTING, MAX_TERMS
from l2m.rules.loader import load_text
from tests.support import reference

# Distinct one-character words (CJK ideographs are letters, so each is one token): the only
# way to fit hundreds of distinct terms in 4096 characters.
WORDS = [chr(0x4E00 + i) for i in range(MAX_TERMS)]


def nested(depth: int) -> str:
    """Parentheses nested ``depth`` deep, alternating OR and AND so nothing flattens."""
    query = "z"
    for level in range(depth):
        op = " OR " if level % 2 else " AND "
        query = f"({WORDS[level]}{op}{query})"
    return query


QUERIES = {
    "or-800": " OR ".join(WORDS[:800]),
    "and-680": " AND ".join(WORDS[:680]),  # as many as 4096 characters hold
    "must-1024": " ".join(f"+{w}" for w in WORDS),
    "implicit-1024": " ".join(WORDS),
    "must-not-1024": " ".join(f"-{w}" for w in WORDS[:600]) + " " + " ".join(WORDS[600:]),
    "pairs-300": " OR ".join(f"({a} AND {b})" for a, b in zip(WORDS[:300], WORDS[300:600],
                                                             strict=True)),
    "not-250": "NOT " * 250 + WORDS[0],
    "not-251": "NOT " * 251 + WORDS[0],
    "nested-64": nested(MAX_NESTING),
    "not-groups-64": "(NOT " * MAX_NESTING + WORDS[1] + ")" * MAX_NESTING,
}

DOCS = [
    {"message": WORDS[0]},
    {"message": WORDS[799]},
    {"message": " ".join(WORDS[:800])},
    {"message": " ".join(WORDS)},
    {"message": f"{WORDS[5]} {WORDS[305]}"},
    {"message": " ".join(WORDS[:MAX_NESTING]) + " z"},
    {"message": f"{WORDS[1]} z"},
    {"message": "nothing here"},
    {},
]


def test_queries_at_the_limits_evaluate_like_the_reference():
    compiled = {name: parse_query(q) for name, q in QUERIES.items()}
    plan = ParsePlan.merge([u for c in compiled.values() for u in c.fields])
    start = time.perf_counter()
    matcher = Matcher(parse_lines([json.dumps(d) for d in DOCS], plan), plan)
    got = {name: matcher.mask(c.root).to_pylist() for name, c in compiled.items()}
    print(f"\n{len(QUERIES)} queries at the limits over {len(DOCS)} logs: "
          f"{time.perf_counter() - start:.1f} s")
    expected = {name: [reference.matches(c.root, d) for d in DOCS]
                for name, c in compiled.items()}
    assert got == expected
    # the reference agrees with what each query obviously means
    assert expected["or-800"] == [True, True, True, True, True, True, True, False, False]
    assert expected["and-680"] == [False, False, True, True, False, False, False, False, False]
    assert expected["must-1024"] == [False, False, False, True, False, False, False, False, False]
    assert expected["not-250"] == [True, False, True, True, False, True, False, False, False]
    assert expected["not-251"] == [not m for m in expected["not-250"]]


RULES = """
rules:
  - id: many-terms
    name: many_terms_total
    kind: counter
    query: "{or_800}"
    aggregation: count
  - id: hostile-regex
    name: hostile_regex_total
    kind: counter
    query: "f:/((a+)+)+c/ OR message:/((a+)+)+c/"
    aggregation: count
  - id: hostile-wildcard
    name: hostile_wildcard_total
    kind: counter
    query: "f:*a*a*a*a*b OR message:*a*a*a*a*b"
    aggregation: count
  - id: java-syntax
    name: java_syntax_total
    kind: counter
    query: "f:/a{{,3}}/ OR f:/[[]/"
    aggregation: count
"""


def test_hostile_rules_route_through_the_whole_stage():
    rules, problems = load_text(RULES.format(or_800=QUERIES["or-800"]))
    assert problems == [] and len(rules) == 4
    routing = plan_for(rules)
    long_a = "a" * 100_000
    docs = [{"@timestamp": 1, "f": long_a, "message": long_a},
            {"@timestamp": 2, "f": long_a + "c", "message": "x " + "ab" * 50_000},
            {"@timestamp": 3, "f": "a{,3}", "message": WORDS[10]},
            {"@timestamp": 4, "f": "[", "message": "ab" * 50_000 + "b"}]
    start = time.perf_counter()
    rows = fan_out(parse_lines([json.dumps(d) for d in docs], routing.plan),
                   routing).to_pylist()
    print(f"\nhostile rules over 4 logs of up to 100k characters: "
          f"{time.perf_counter() - start:.1f} s")
    got = sorted((r["rule"], r["ts"]) for r in rows if r["rule"] != STATUS_RULE)
    expected = sorted((rule.id, d["@timestamp"]) for d in docs for rule in rules
                      if reference.rule_match(rule, d) is not None)
    assert got == expected == [("hostile-regex", 2), ("hostile-wildcard", 2),
                               ("hostile-wildcard", 4), ("java-syntax", 3),
                               ("java-syntax", 4), ("many-terms", 3)]
