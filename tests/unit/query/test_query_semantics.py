"""Compiled queries evaluated by the Arrow matcher (l2m/engine/match.py) over the real parse stage:
every SPEC §2 construct on keyword and text fields, numeric strings, missing fields, literal
vs nested dotted keys."""

from __future__ import annotations

import json

import pytest

from l2m.engine.match import Matcher
from l2m.engine.parse import ParsePlan, parse_lines
from l2m.query.compiler import parse_query
from l2m.query.nodes import QueryConfig

LOGS = [
    {"id": 1, "status": 500, "service": "web", "message": "Connection refused by upstream",
     "a.b": "literal", "a": {"b": "nested"}, "latency": 0.25},
    {"id": 2, "status": "500", "service": "Web", "message": "connection REFUSED",
     "a": {"b": "nested"}, "latency": "1.5"},
    {"id": 3, "status": 404, "service": "api", "message": "not found: /api/items",
     "latency": "slow", "user": {"name": "alice"}},
    {"id": 4, "status": 200, "service": "web-frontend", "message": "OK request completed",
     "latency": 10, "flag": True, "k": None, "note": "end\n", "tag": "["},
    {"id": 5, "service": "db", "message": "timeout after 30s; retrying", "code": "abc",
     "ratio": 1.0},
    {"id": 6, "status": 503, "message": None, "service": "auth", "latency": -2},
]

ALL = {1, 2, 3, 4, 5, 6}
CASES: list[tuple[str, set[int]]] = [
    # keyword terms and phrases: exact string form, case-sensitive
    ("status:500", {1, 2}),
    ('status:"500"', {1, 2}),
    ("service:web", {1}),
    ("service:Web", {2}),
    ('service:"web-frontend"', {4}),
    ("flag:true", {4}),
    ("ratio:1.0", {5}),
    ("ratio:1", set()),
    ("status:500^2", {1, 2}),
    # keyword wildcards and regexes match the whole string form
    ("service:web*", {1, 4}),
    ("service:w?b", {1}),
    ("service:*end", {4}),
    ("code:*b*", {5}),
    ("service:/w.b/", {1}),
    ("service:/we/", set()),
    ("service:/[Ww]eb/", {1, 2}),
    # regexes are RE2's: `$` only at the very end, no backtracking, `[[]` is a class
    ("note:/end/", set()),
    ("note:/end$/", set()),
    ("note:/end\\n/", {4}),
    ("note:/end.$/", {4}),
    ("tag:/[[]/", {4}),
    ("service:/((a+)+)+c/", set()),
    ("code:/(a|ab)(c|bcd)/", {5}),
    ("code:/a{,3}/", set()),
    ("service:/web|db/", {1, 5}),
    ("service:*-*", {4}),
    ("service:*e*e*", {4}),
    # missing and null fields
    ("NOT status:500", {3, 4, 5, 6}),
    ("-status:500", {3, 4, 5, 6}),
    ("NOT status:*", {5}),
    ("_exists_:status", {1, 2, 3, 4, 6}),
    ("_exists_:k", set()),
    ("message:*", {1, 2, 3, 4, 5}),
    ("NOT message:refused", {3, 4, 5, 6}),
    # text fields: tokens, lower-cased, contiguous
    ("message:refused", {1, 2}),
    ("message:REFUSED", {1, 2}),
    ('message:"connection refused"', {1, 2}),
    ('message:"refused connection"', set()),
    ('message:"Connection refused by"', {1}),
    ('message:"not found"', {3}),
    ("message:api", {3}),
    ("message:30s", {5}),
    ('message:"..."', set()),
    ("refused", {1, 2}),
    ("connect*", {1, 2}),
    ("CONNECT*", {1, 2}),
    ("message:time?ut", {5}),
    ("message:/tim.*/", {5}),
    ("message:/connection refused/", set()),
    ("message:/(?i)TIM.*/", {5}),
    ("message:/TIM.*/", set()),
    ("message:/[0-9]+s/", {5}),
    ("message:/a?p?i/", {3}),
    ("message:/.*/", {1, 2, 3, 4, 5}),
    ("message:*?*?*?*?*?*?*", {1, 2, 4, 5}),
    ("message:re*?", {1, 2, 4, 5}),
    # dotted keys: literal top-level key first, then the nested path
    ("a.b:literal", {1}),
    ("a.b:nested", {2}),
    ("user.name:alice", {3}),
    # numeric ranges: numbers and numeric strings take part, others don't
    ("latency:[0 TO 2]", {1, 2}),
    ("latency:{0.25 TO 10]", {2, 4}),
    ("latency:[* TO 0]", {6}),
    ("latency:>=10", {4}),
    ("latency:<0", {6}),
    ("latency:[* TO *]", {1, 2, 4, 6}),
    ("status:[400 TO 500}", {3}),
    ("status:[200 TO 404]", {3, 4}),
    # lexicographic ranges when a bound is not a number
    ("service:[a TO c]", {3, 6}),
    ("service:{api TO db}", {6}),
    ("service:>=db", {1, 4, 5}),
    # boolean logic and Lucene's operator-less groups
    ("status:500 AND service:web OR service:db", {1, 5}),
    ("service:(web OR api)", {1, 3}),
    ("service:web* message:timeout", {1, 4, 5}),
    ("service:web* -status:500", {4}),
    ("+service:web* -status:500", {4}),
    ("+service:web* message:ok", {1, 4}),
    ("+service:web* +message:ok", {4}),
    ("-status:500 -service:db", {3, 4, 6}),
    ("(service:web OR service:db) AND NOT (status:500 OR code:abc)", set()),
    ("*", ALL),
]


@pytest.fixture(scope="module")
def matches():
    compiled = [parse_query(q, QueryConfig()) for q, _ in CASES]
    plan = ParsePlan.merge([u for c in compiled for u in c.fields] + [
        *parse_query("_exists_:id").fields])
    matcher = Matcher(parse_lines([json.dumps(d) for d in LOGS], plan), plan)
    return {
        q: {LOGS[n]["id"] for n, hit in enumerate(matcher.mask(c.root).to_pylist()) if hit}
        for (q, _), c in zip(CASES, compiled, strict=True)
    }


@pytest.mark.parametrize(("query", "expected"), CASES, ids=[q for q, _ in CASES])
def test_query_semantics(matches, query, expected):
    assert matches[query] == expected
