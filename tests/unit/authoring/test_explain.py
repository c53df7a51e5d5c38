"""``l2m explain`` (l2m/authoring/explain.py): the verdict of every clause is the engine's
(random queries over random logs), the labels, value and timestamp it states are those of the
sample ``run_local`` makes, and the exact text for each query form of docs/rules.md, each
reason a log does not count and each outcome the job would apply; ``--json``; the CLI."""

# ruff: noqa: E501 (the expected explanations are whole output lines)
from __future__ import annotations

import contextlib
import functools
import gzip
import io
import json
import math
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from l2m.authoring import explain as explain_module
from l2m.authoring.explain import explain_command, explain_log, input_line, render_text
from l2m.batch.local import RunSettings, run_local
from l2m.cli import main
from l2m.config.job import JobConfig
from l2m.engine.match import Matcher
from l2m.engine.parse import ParsePlan, parse_lines
from l2m.errors import ConfigError, InputError, QueryError
from l2m.query.clauses import clause_tree
from l2m.query.compiler import collect_fields, parse_query
from l2m.rules.loader import load_text
from l2m.rules.model import Rule
from tests.support import reference
from tests.support.randomq import random_doc, random_query

T0 = 1_795_341_605_500  # 2026-11-22T10:00:05.500Z
LOG = {"@timestamp": T0, "service": "web", "status": 404, "latency": "1.5",
       "message": "Connection REFUSED by db-1", "http": {"path": "/api"}, "user": None,
       "tags": ["a"], "ratio": 1.0, "a.b": "top", "a": {"b": "nested"}}


def rules_of(*lines: str) -> list[Rule]:
    rules, problems = load_text("rules:\n" + "".join(f"  - {{{line}}}\n" for line in lines))
    assert problems == []
    return rules


def rule_text(query: str, log: dict[str, Any] | str = LOG, extra: str = "",
              cfg: JobConfig | None = None) -> list[str]:
    """The lines explaining one counter rule with ``query`` (after its header line)."""
    rules = rules_of(f"id: r, name: r_total, kind: counter, query: {json.dumps(query)}, "
                     f"aggregation: count{extra}")
    line = log if isinstance(log, str) else json.dumps(log)
    text = render_text(explain_log(rules, line, cfg or JobConfig()))
    block = text.split("\n\n", 1)[1].splitlines()
    return block[1:]


# --- the engine's truth ---------------------------------------------------------------------


def test_every_clause_s_verdict_is_the_engine_s_on_random_queries_and_logs(monkeypatch):
    # explain_log parses its rules' queries on each call (one log per `l2m explain`): here
    # 40 logs share 150 queries, each parsed once (clause_tree is a function of the query and
    # settings alone) — over half of this test's time was parsing the same queries again.
    monkeypatch.setattr(explain_module, "clause_tree", functools.cache(clause_tree))
    rng = random.Random(55)
    docs = [random_doc(rng) for _ in range(40)]
    queries: list[str] = []
    while len(queries) < 150:
        query = random_query(rng)
        with contextlib.suppress(QueryError):
            parse_query(query)
            queries.append(query)
    rules = [Rule(id=f"q{i}", name=f"q{i}_total", kind="counter", query=q, aggregation="count",
                  compiled=parse_query(q)) for i, q in enumerate(queries)]
    trees = [clause_tree(q) for q in queries]
    # The engine over all the logs at once, with its own plan: each clause's mask.
    plan = ParsePlan.merge([u for t in trees for u in collect_fields(t.node)])
    matcher = Matcher(parse_lines([json.dumps(d) for d in docs], plan), plan)
    checked = 0
    for row, doc in enumerate(docs):
        report = explain_log(rules, json.dumps(doc), JobConfig())
        for rule, tree, explained in zip(rules, trees, report["rules"], strict=True):
            assert rule.compiled is not None
            root_hit = matcher.mask(rule.compiled.root)[row].as_py()
            assert explained["matches"] == root_hit == reference.matches(rule.compiled.root, doc)
            stack = [(tree, explained["clauses"])]
            while stack:
                clause, said = stack.pop()
                hit = matcher.mask(clause.node)[row].as_py()
                assert said["matched"] == hit == reference.matches(clause.node, doc), \
                    (rule.query, said["text"], doc)
                assert said["text"] == rule.query[clause.start:clause.end]
                stack += zip(clause.children, said["children"], strict=True)
                checked += 1
            assert (explained["failed"] is None) == root_hit
    assert checked > 3000


CROSS_RULES = rules_of(
    "id: errors, name: errors_total, kind: counter, query: 'status:>=400', aggregation: count, "
    "group_by: [service, http.status, user], labels: {severity: page}",
    "id: bytes, name: bytes_total, kind: counter, query: '*', aggregation: sum, field: bytes, "
    "target_account: metrics",
    "id: latency, name: latency_avg, kind: gauge, query: 'service:web', aggregation: avg, "
    "field: latency, group_by: [path]",
    "id: hist, name: lat, kind: gauge, query: '*', aggregation: histogram, field: latency, "
    "buckets: [0.5, 1, 2.5, 10], group_by: [service]",
    "id: top, name: top_max, kind: gauge, query: '*', aggregation: max, field: latency",
)
CROSS_LOGS = [
    {"@timestamp": "2026-11-22T10:00:05.5Z", "status": 503, "service": "web", "latency": 1.5,
     "bytes": "2048", "user": "", "http": {"status": 503}, "path": "p" * 40},
    {"@timestamp": T0 + 61_000, "status": "404", "service": "日本", "latency": "0.5",
     "bytes": 1e3, "path": None},
    {"@timestamp": T0, "status": 200, "service": "web", "latency": 12, "bytes": 7},
]


@pytest.mark.parametrize("log", CROSS_LOGS)
@pytest.mark.parametrize("rule", CROSS_RULES, ids=lambda r: r.id)
def test_labels_value_and_time_are_those_of_the_sample_backfill_makes(rule, log):
    limit = 16
    cfg = JobConfig()
    cfg = replace(cfg, limits=replace(cfg.limits, max_label_value_length=limit))
    line = json.dumps(log, ensure_ascii=False)
    (said,) = explain_log([rule], line, cfg)["rules"]
    samples = [json.loads(s) for s in run_local(RunSettings(max_label_value_length=limit)
                                                .routing([rule]), [line]).lines]
    if not said["matches"]:
        assert samples == []
        return
    result = said["result"]
    assert {s["name"] for s in samples} == set(result["metrics"])
    for sample in samples:
        labels = dict(sample["labels"])
        le = labels.pop("le", None)
        assert labels == result["sample_labels"]
        assert sample["timestamp"] == result["time"]["sample_timestamp"]
        assert sample["account"] == result["target_account"]
        if sample["name"].endswith("_bucket"):
            assert sample["value"] == (1.0 if le in result["value"]["buckets"] else 0.0)
        elif sample["name"].endswith("_count") or rule.aggregation == "count":
            assert sample["value"] == 1.0
        else:
            assert sample["value"] == result["value"]["value"]


# --- each query form of docs/rules.md, each reason a log does not count -----------------------

CASES = [
    ('status:404', LOG, [
        '  query: status:404',
        '  clauses:',
        '    ✓ status:404 [0:10] keyword term "404": status = 404 (top-level key "status"), string form "404" = "404"',
    ]),
    ('service:"web"', LOG, [
        '  query: service:"web"',
        '  clauses:',
        '    ✓ service:"web" [0:13] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
    ]),
    ('service:we*', LOG, [
        '  query: service:we*',
        '  clauses:',
        '    ✓ service:we* [0:11] wildcard we*, anchored to the whole string form (case-sensitive): service = "web" (top-level key "service"), string form "web": matches',
    ]),
    ('service:w?b', LOG, [
        '  query: service:w?b',
        '  clauses:',
        '    ✓ service:w?b [0:11] wildcard w?b, anchored to the whole string form (case-sensitive): service = "web" (top-level key "service"), string form "web": matches',
    ]),
    ('service:/w.b/', LOG, [
        '  query: service:/w.b/',
        '  clauses:',
        '    ✓ service:/w.b/ [0:13] regex /w.b/, anchored to the whole string form (case-sensitive): service = "web" (top-level key "service"), string form "web": matches',
    ]),
    ('latency:[0.1 TO 2]', LOG, [
        '  query: latency:[0.1 TO 2]',
        '  clauses:',
        '    ✓ latency:[0.1 TO 2] [0:18] numeric range [0.1 TO 2]: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 >= 0.1, 1.5 <= 2',
    ]),
    ('latency:{1.5 TO 2]', LOG, [
        '  query: latency:{1.5 TO 2]',
        '         ^^^^^^^^^^^^^^^^^^',
        '  why: latency:{1.5 TO 2] [0:18]: numeric range {1.5 TO 2]: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 <= 1.5, 1.5 <= 2',
        '  clauses:',
        '    ✗ latency:{1.5 TO 2] [0:18] numeric range {1.5 TO 2]: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 <= 1.5, 1.5 <= 2',
    ]),
    ('status:[400 TO *]', LOG, [
        '  query: status:[400 TO *]',
        '  clauses:',
        '    ✓ status:[400 TO *] [0:17] numeric range [400 TO *]: status = 404 (top-level key "status"), the number 404: 404 >= 400',
    ]),
    ('latency:>=2', LOG, [
        '  query: latency:>=2',
        '         ^^^^^^^^^^^',
        '  why: latency:>=2 [0:11]: numeric range [2 TO *}: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 < 2',
        '  clauses:',
        '    ✗ latency:>=2 [0:11] numeric range [2 TO *}: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 < 2',
    ]),
    ('latency:<2', LOG, [
        '  query: latency:<2',
        '  clauses:',
        '    ✓ latency:<2 [0:10] numeric range {* TO 2}: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 < 2',
    ]),
    ('service:[a TO m]', LOG, [
        '  query: service:[a TO m]',
        '         ^^^^^^^^^^^^^^^^',
        '  why: service:[a TO m] [0:16]: lexicographic range [a TO m]: service = "web" (top-level key "service"), compared by code point: "web" >= "a", "web" > "m"',
        '  clauses:',
        '    ✗ service:[a TO m] [0:16] lexicographic range [a TO m]: service = "web" (top-level key "service"), compared by code point: "web" >= "a", "web" > "m"',
    ]),
    ('service:web AND status:500', LOG, [
        '  query: service:web AND status:500',
        '                         ^^^^^^^^^^',
        '  why: status:500 [16:26]: keyword term "500": status = 404 (top-level key "status"), string form "404" ≠ "500"',
        '  clauses:',
        '    ✗ service:web AND status:500 [0:26] AND: all 2 must match; 1 did not',
        '      ✓ service:web [0:11] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
        '      ✗ status:500 [16:26] keyword term "500": status = 404 (top-level key "status"), string form "404" ≠ "500"',
    ]),
    ('service:api OR status:500', LOG, [
        '  query: service:api OR status:500',
        '         ^^^^^^^^^^^^^^^^^^^^^^^^^',
        '  why: service:api OR status:500 [0:25]: OR: one of 2 must match; none did',
        '  clauses:',
        '    ✗ service:api OR status:500 [0:25] OR: one of 2 must match; none did',
        '      ✗ service:api [0:11] keyword term "api": service = "web" (top-level key "service"), string form "web" ≠ "api"',
        '      ✗ status:500 [15:25] keyword term "500": status = 404 (top-level key "status"), string form "404" ≠ "500"',
    ]),
    ('NOT service:web', LOG, [
        '  query: NOT service:web',
        '         ^^^^^^^^^^^^^^^',
        '  why: NOT service:web [0:15]: NOT: the clause inside matched: service:web: keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
        '  clauses:',
        '    ✗ NOT service:web [0:15] NOT: the clause inside matched',
        '      ✓ service:web [4:15] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
    ]),
    ('+service:web -status:404', LOG, [
        '  query: +service:web -status:404',
        '                      ^^^^^^^^^^^',
        '  why: -status:404 [13:24]: a prohibited clause matched: keyword term "404": status = 404 (top-level key "status"), string form "404" = "404"',
        '  clauses:',
        "    ✗ +service:web -status:404 [0:24] group without operators (Lucene's default OR; + 1 of 1 matched, - 1 of 1 matched): a prohibited clause (-/NOT) matched",
        '      ✓ must +service:web [0:12] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
        '      ✓ must_not -status:404 [13:24] keyword term "404": status = 404 (top-level key "status"), string form "404" = "404"',
    ]),
    ('+service:web status:500', LOG, [
        '  query: +service:web status:500',
        '  clauses:',
        "    ✓ +service:web status:500 [0:23] group without operators (Lucene's default OR; + 1 of 1 matched, plain 0 of 1 matched): every + clause matched (plain clauses only rank when a + clause is there)",
        '      ✓ must +service:web [0:12] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
        '      ✗ should status:500 [13:23] keyword term "500": status = 404 (top-level key "status"), string form "404" ≠ "500"',
    ]),
    ('service:(api OR web)', LOG, [
        '  query: service:(api OR web)',
        '  clauses:',
        '    ✓ service:(api OR web) [0:20] OR: one of 2 must match; 1 did',
        '      ✗ api [9:12] keyword term "api": service = "web" (top-level key "service"), string form "web" ≠ "api"',
        '      ✓ web [16:19] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
    ]),
    ('_exists_:http.path', LOG, [
        '  query: _exists_:http.path',
        '  clauses:',
        '    ✓ _exists_:http.path [0:18] _exists_: http.path = "/api" (nested path http → path)',
    ]),
    ('user:*', LOG, [
        '  query: user:*',
        '         ^^^^^^',
        '  why: user:* [0:6]: _exists_: user is null (counts as missing) → no match',
        '  clauses:',
        '    ✗ user:* [0:6] _exists_: user is null (counts as missing) → no match',
    ]),
    ('refused', LOG, [
        '  query: refused',
        '  clauses:',
        '    ✓ refused [0:7] bare term on the default field message: text term "refused": message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]; "refused" is one of them',
    ]),
    ('"refused connection"', LOG, [
        '  query: "refused connection"',
        '         ^^^^^^^^^^^^^^^^^^^^',
        '  why: "refused connection" [0:20]: bare term on the default field message: text phrase "refused connection": message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]; "refused connection": all its tokens are there, but not next to each other in this order',
        '  clauses:',
        '    ✗ "refused connection" [0:20] bare term on the default field message: text phrase "refused connection": message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]; "refused connection": all its tokens are there, but not next to each other in this order',
    ]),
    ('service:web^3', LOG, [
        '  query: service:web^3',
        '  clauses:',
        '    ✓ service:web^3 [0:13] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web" (boost ^3 ignored: boosts only rank)',
    ]),
    ('message:REFUSED', LOG, [
        '  query: message:REFUSED',
        '  clauses:',
        '    ✓ message:REFUSED [0:15] text term "refused": message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]; "refused" is one of them',
    ]),
    ('a.b:top', LOG, [
        '  query: a.b:top',
        '  clauses:',
        '    ✓ a.b:top [0:7] keyword term "top": a.b = "top" (top-level key "a.b"), string form "top" = "top"',
    ]),
    ('a.b:nested', {'a': {'b': 'nested'}}, [
        '  query: a.b:nested',
        '  clauses:',
        '    ✓ a.b:nested [0:10] keyword term "nested": a.b = "nested" (nested path a → b), string form "nested" = "nested"',
    ]),
    ('message:db*', LOG, [
        '  query: message:db*',
        '  clauses:',
        '    ✓ message:db* [0:11] wildcard db*, anchored to one whole token: message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]: a token matches',
    ]),
    ('message:/ref.*d/', LOG, [
        '  query: message:/ref.*d/',
        '  clauses:',
        '    ✓ message:/ref.*d/ [0:16] regex /ref.*d/, anchored to one whole token: message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]: a token matches',
    ]),
    ('message:"!!"', LOG, [
        '  query: message:"!!"',
        '         ^^^^^^^^^^^^',
        '  why: message:"!!" [0:12]: matches nothing: on a text field a term needs a token and a wildcard a single token (letters, digits, _), as in Lucene',
        '  clauses:',
        '    ✗ message:"!!" [0:12] matches nothing: on a text field a term needs a token and a wildcard a single token (letters, digits, _), as in Lucene',
    ]),
    ('*', LOG, [
        '  query: *',
        '  clauses:',
        '    ✓ * [0:1] * matches every log',
    ]),
    ('host:web', LOG, [
        '  query: host:web',
        '         ^^^^^^^^',
        '  why: host:web [0:8]: keyword term "web": host is missing (no key "host") → no match',
        '  clauses:',
        '    ✗ host:web [0:8] keyword term "web": host is missing (no key "host") → no match',
    ]),
    ('service:Web', LOG, [
        '  query: service:Web',
        '         ^^^^^^^^^^^',
        '  why: service:Web [0:11]: keyword term "Web": service = "web" (top-level key "service"), string form "web" ≠ "Web" (only the case differs: keyword fields are case-sensitive)',
        '  clauses:',
        '    ✗ service:Web [0:11] keyword term "Web": service = "web" (top-level key "service"), string form "web" ≠ "Web" (only the case differs: keyword fields are case-sensitive)',
    ]),
    ('ratio:1', LOG, [
        '  query: ratio:1',
        '         ^^^^^^^',
        '  why: ratio:1 [0:7]: keyword term "1": ratio = 1.0 (top-level key "ratio"), string form "1.0" ≠ "1" (the same number, another string form: write 1.0 to match it)',
        '  clauses:',
        '    ✗ ratio:1 [0:7] keyword term "1": ratio = 1.0 (top-level key "ratio"), string form "1.0" ≠ "1" (the same number, another string form: write 1.0 to match it)',
    ]),
    ('latency:[5 TO 10]', LOG, [
        '  query: latency:[5 TO 10]',
        '         ^^^^^^^^^^^^^^^^^',
        '  why: latency:[5 TO 10] [0:17]: numeric range [5 TO 10]: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 < 5, 1.5 <= 10',
        '  clauses:',
        '    ✗ latency:[5 TO 10] [0:17] numeric range [5 TO 10]: latency = "1.5" (top-level key "latency"), the number 1.5: 1.5 < 5, 1.5 <= 10',
    ]),
    ('service:[0 TO 9]', LOG, [
        '  query: service:[0 TO 9]',
        '         ^^^^^^^^^^^^^^^^',
        '  why: service:[0 TO 9] [0:16]: numeric range [0 TO 9]: service = "web" (top-level key "service"), not a number → no match',
        '  clauses:',
        '    ✗ service:[0 TO 9] [0:16] numeric range [0 TO 9]: service = "web" (top-level key "service"), not a number → no match',
    ]),
    ('service:w?x', LOG, [
        '  query: service:w?x',
        '         ^^^^^^^^^^^',
        '  why: service:w?x [0:11]: wildcard w?x, anchored to the whole string form (case-sensitive): service = "web" (top-level key "service"), string form "web": no match',
        '  clauses:',
        '    ✗ service:w?x [0:11] wildcard w?x, anchored to the whole string form (case-sensitive): service = "web" (top-level key "service"), string form "web": no match',
    ]),
    ('message:/conn/', LOG, [
        '  query: message:/conn/',
        '         ^^^^^^^^^^^^^^',
        '  why: message:/conn/ [0:14]: regex /conn/, anchored to one whole token: message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]: no token matches',
        '  clauses:',
        '    ✗ message:/conn/ [0:14] regex /conn/, anchored to one whole token: message = "Connection REFUSED by db-1" (top-level key "message"), tokens [connection refused by db 1]: no token matches',
    ]),
    ('tags:a', LOG, [
        '  query: tags:a',
        '         ^^^^^^',
        '  why: tags:a [0:6]: keyword term "a": tags = an array (top-level key "tags"), which has no string form → no match',
        '  clauses:',
        '    ✗ tags:a [0:6] keyword term "a": tags = an array (top-level key "tags"), which has no string form → no match',
    ]),
    ('http:x', LOG, [
        '  query: http:x',
        '         ^^^^^^',
        '  why: http:x [0:6]: keyword term "x": http = an object (top-level key "http"), which has no string form → no match',
        '  clauses:',
        '    ✗ http:x [0:6] keyword term "x": http = an object (top-level key "http"), which has no string form → no match',
    ]),
    ('http.path.x:1', LOG, [
        '  query: http.path.x:1',
        '         ^^^^^^^^^^^^^',
        '  why: http.path.x:1 [0:13]: keyword term "1": http.path.x is missing (no key "http.path.x"; nested path http → path → x: "http.path" is not an object) → no match',
        '  clauses:',
        '    ✗ http.path.x:1 [0:13] keyword term "1": http.path.x is missing (no key "http.path.x"; nested path http → path → x: "http.path" is not an object) → no match',
    ]),
    ('service:api service:db', LOG, [
        '  query: service:api service:db',
        '         ^^^^^^^^^^^^^^^^^^^^^^',
        "  why: service:api service:db [0:22]: group without operators (Lucene's default OR; plain 0 of 2 matched): no plain clause matched (with no + clause, one must)",
        '  clauses:',
        "    ✗ service:api service:db [0:22] group without operators (Lucene's default OR; plain 0 of 2 matched): no plain clause matched (with no + clause, one must)",
        '      ✗ should service:api [0:11] keyword term "api": service = "web" (top-level key "service"), string form "web" ≠ "api"',
        '      ✗ should service:db [12:22] keyword term "db": service = "web" (top-level key "service"), string form "web" ≠ "db"',
    ]),
    ('-service:web -status:200', LOG, [
        '  query: -service:web -status:200',
        '         ^^^^^^^^^^^^',
        '  why: -service:web [0:12]: a prohibited clause matched: keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
        '  clauses:',
        "    ✗ -service:web -status:200 [0:24] group without operators (Lucene's default OR; - 1 of 2 matched): a prohibited clause (-/NOT) matched",
        '      ✓ must_not -service:web [0:12] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"',
        '      ✗ must_not -status:200 [13:24] keyword term "200": status = 404 (top-level key "status"), string form "404" ≠ "200"',
    ]),
]


@pytest.mark.parametrize(("query", "log", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_explanation_of_each_query_form_and_each_reason(query, log, expected):
    said = [line for line in rule_text(query, log) if not line.startswith(
        ("  label", "  value", "  time", "  account", "  late"))]
    assert said == expected


# --- a match: labels, value, window, tenancy; the job's outcomes ------------------------------

OUTCOME_RULES = rules_of(
    "id: latency, name: http_latency_seconds, kind: gauge, query: 'service:web', "
    "aggregation: histogram, field: latency, buckets: [0.5, 1, 2.5], "
    "group_by: [service, http.path, user, trace], labels: {team: core}, account: acme, "
    "target_account: acme-metrics",
    "id: bytes, name: bytes_total, kind: counter, query: '*', aggregation: sum, field: bytes",
    "id: other, name: other_total, kind: counter, query: '*', aggregation: count, "
    "account: globex",
)


def outcome_config() -> JobConfig:
    cfg = JobConfig()
    return replace(cfg, grace_ms=600_000, max_future_ms=120_000,
                   limits=replace(cfg.limits, max_label_value_length=16))


def test_a_match_s_labels_value_window_tenancy_and_outcomes():
    log = {"@timestamp": "2026-11-22T10:00:05.5+01:00", "service": "web", "latency": "0.8",
           "bytes": "lots", "account": "acme", "http": {"path": "/api/v1/items/12345"},
           "user": ""}
    out = io.StringIO()
    assert explain_command(OUTCOME_RULES, json.dumps(log), outcome_config(), None, False,
                           out) == 0
    assert out.getvalue() == FULL

FULL = (
    'log: {"@timestamp": "2026-11-22T10:00:05.5+01:00", "service": "web", "latency": "0.8", "bytes": "lots", "account": "acme", "http": {"path": "/api/v1/items/12345"}, "user": ""}\n'
    'status: ok\n'
    'event time: @timestamp = "2026-11-22T10:00:05.5+01:00" (top-level key "@timestamp") → 1795338005500 ms = 2026-11-22T09:00:05.500Z\n'
    'account field: account = "acme" (top-level key "account")\n'
    'outcomes:\n'
    '  backfill: routed (no lateness in a backfill)\n'
    "  streaming: routed if its Kafka record's time is at or after 2026-11-22T08:58:05.500Z; an earlier record time puts the event time more than 2m (max_future_skew) ahead: status future, dead-lettered, never routed\n"
    '  streaming: late once the job has seen an event time of 2026-11-22T09:11:00Z (the watermark, that minus the grace, reaches 2026-11-22T09:01:00Z, the end of its minute): counted once in l2m_late_logs_total, ignored by the gauges, still counted by counters\n'
    'rules matching: 2 of 3: latency, bytes\n'
    '\n'
    'rule latency (<memory>:2, gauge histogram): matches\n'
    '  query: service:web\n'
    "  account: scoped to account 'acme': the log's account is 'acme'\n"
    '  clauses:\n'
    '    ✓ service:web [0:11] keyword term "web": service = "web" (top-level key "service"), string form "web" = "web"\n'
    '  label: team="core" (static)\n'
    '  label: group_by service: service="web"\n'
    '  label: group_by http.path → label http_path: http_path="/api/v1/it…(cut)" (cut: 19 characters, longer than 16; counted in l2m_label_values_cut_total)\n'
    '  label: group_by user: empty → no label\n'
    '  label: group_by trace: trace is missing (no key "trace"), no string form → no label\n'
    '  labels: {http_path="/api/v1/it…(cut)", service="web", team="core"}\n'
    '  value: histogram of latency: latency = "0.8" (top-level key "latency") → 0.8, counted in the buckets le=1, 2.5, +Inf\n'
    "  time: window [2026-11-22T09:00:00Z, 2026-11-22T09:01:00Z); the sample's timestamp is the window start 1795338000000\n"
    "  account: written to account 'acme-metrics' (target_account)\n"
    '  late: streaming: counted into its window while the watermark (newest event time seen − grace 10m) is before 2026-11-22T09:01:00Z, i.e. until the job has seen an event time of 2026-11-22T09:11:00Z; later it is late: the gauges ignore it (l2m_late_logs_total counts it)\n'
    '\n'
    'rule bytes (<memory>:3, counter sum): matches\n'
    '  query: *\n'
    '  clauses:\n'
    '    ✓ * [0:1] * matches every log\n'
    '  labels: {}\n'
    '  value: sum of bytes: bytes = "lots" (top-level key "bytes"), not a number → no value: the log counts as a match only, no sample from it alone\n'
    "  time: counter: the sample's timestamp is the newest event time counted into the series, at least 1795338005500 (2026-11-22T09:00:05.500Z)\n"
    '  account: written with account null (no target_account)\n'
    '\n'
    'rule other (<memory>:4, counter count): does not match\n'
    "  why: scoped to account 'globex': the log's account is 'acme', so the rule does not see it\n"
    '  query: *\n'
    '  clauses:\n'
    '    ✓ * [0:1] * matches every log\n'
)


GAUGE = rules_of("id: errors, name: errors_total, kind: gauge, query: 'level:error', "
                 "aggregation: count")

UNROUTED = [
    ('malformed', '{"level": "error", "n": NaN}', (
        'log: {"level": "error", "n": NaN}\n'
        'status: malformed\n'
        'outcomes:\n'
        '  malformed: invalid JSON: unexpected character, expected a JSON value: line 1 column 25 (char 24)\n'
        '  backfill: counted as malformed and skipped (summary: malformed lines)\n'
        '  streaming: sent to the dead-letter topic with this reason (header l2m.error), counted in l2m_input_logs_total{status="malformed"}\n'
        'rules: none sees it (1 rule not evaluated)\n'
    )),
    ('not_an_object', '["level", "error"]', (
        'log: ["level", "error"]\n'
        'status: malformed\n'
        'outcomes:\n'
        '  malformed: not a JSON object (a list)\n'
        '  backfill: counted as malformed and skipped (summary: malformed lines)\n'
        '  streaming: sent to the dead-letter topic with this reason (header l2m.error), counted in l2m_input_logs_total{status="malformed"}\n'
        'rules: none sees it (1 rule not evaluated)\n'
    )),
    ('blank', '', (
        'log: \n'
        'status: blank\n'
        'outcomes:\n'
        '  a blank line: not a log, counted as blank and skipped\n'
        'rules: none sees it (1 rule not evaluated)\n'
    )),
    ('no_timestamp', '{"level": "error"}', (
        'log: {"level": "error"}\n'
        'status: no_timestamp\n'
        'event time: @timestamp is missing (no key "@timestamp")\n'
        'outcomes:\n'
        '  no usable event time: backfill skips the log and counts it (summary: without timestamp)\n'
        '  streaming: dated by its Kafka record\'s time instead (l2m_input_logs_total{status="no_timestamp"}) and routed; dead-lettered as future if that time is more than 5m ahead of l2m\'s clock\n'
        'rules matching: 1 of 1: errors\n'
        '\n'
        'rule errors (<memory>:2, gauge count): matches\n'
        '  query: level:error\n'
        '  clauses:\n'
        '    ✓ level:error [0:11] keyword term "error": level = "error" (top-level key "level"), string form "error" = "error"\n'
        '  labels: {}\n'
        '  value: count: the log counts 1\n'
        "  time: no event time: backfill skips the log; streaming dates it by its Kafka record's time\n"
        '  account: written with account null (no target_account)\n'
    )),
    ('unusable_timestamp', '{"level": "error", "@timestamp": "2026-11-22 10:00:05"}', (
        'log: {"level": "error", "@timestamp": "2026-11-22 10:00:05"}\n'
        'status: no_timestamp\n'
        'event time: @timestamp = "2026-11-22 10:00:05" (top-level key "@timestamp"): not a usable time (epoch milliseconds, or ISO-8601 with Z or an offset, years 0001-9999)\n'
        'outcomes:\n'
        '  no usable event time: backfill skips the log and counts it (summary: without timestamp)\n'
        '  streaming: dated by its Kafka record\'s time instead (l2m_input_logs_total{status="no_timestamp"}) and routed; dead-lettered as future if that time is more than 5m ahead of l2m\'s clock\n'
        'rules matching: 1 of 1: errors\n'
        '\n'
        'rule errors (<memory>:2, gauge count): matches\n'
        '  query: level:error\n'
        '  clauses:\n'
        '    ✓ level:error [0:11] keyword term "error": level = "error" (top-level key "level"), string form "error" = "error"\n'
        '  labels: {}\n'
        '  value: count: the log counts 1\n'
        "  time: no event time: backfill skips the log; streaming dates it by its Kafka record's time\n"
        '  account: written with account null (no target_account)\n'
    )),
]


@pytest.mark.parametrize(("line", "expected"), [c[1:] for c in UNROUTED],
                         ids=[c[0] for c in UNROUTED])
def test_dead_letters_blank_lines_and_logs_without_a_usable_time(line, expected):
    out = io.StringIO()
    assert explain_command(GAUGE, line, JobConfig(), None, False, out) == 0
    assert out.getvalue() == "".join(expected)



def test_a_rule_named_is_explained_even_when_disabled_and_an_unknown_id_is_an_error():
    rules = rules_of(
        "id: http-errors, name: e_total, kind: counter, query: 'level:error', aggregation: count, "
        "enabled: false",
        "id: other, name: o_total, kind: counter, query: '*', aggregation: count")
    out = io.StringIO()
    assert explain_command(rules, '{"level": "error", "@timestamp": 0}', JobConfig(),
                           "http-errors", False, out) == 0
    assert out.getvalue().split("\n\n")[1].splitlines() == [
        "rule http-errors (<memory>:2, counter count): does not match",
        "  why: the rule is disabled (enabled: false): it produces nothing",
        "  query: level:error",
        "  clauses:",
        '    ✓ level:error [0:11] keyword term "error": level = "error" (top-level key "level"), string form "error" = "error"',
    ]
    with pytest.raises(ConfigError) as error:
        explain_command(rules, "{}", JobConfig(), "http-error", False, io.StringIO())
    assert error.value.render() == ("l2m: error [CONFIG]: --rule http-error: no rule with this "
                                    "id in the rules given (did you mean 'http-errors'?)")
    with pytest.raises(ConfigError) as error:
        explain_command(rules, "{}", JobConfig(), "zzz", False, io.StringIO())
    assert str(error.value) == ("--rule zzz: no rule with this id in the rules given (the "
                                "rules: http-errors, other)")


def test_the_json_document():
    rules = rules_of(
        "id: errs, name: errs_total, kind: gauge, query: 'status:>=500 AND NOT path:\"/healthz\"', "
        "aggregation: max, field: ms, group_by: [service], account: acme",
        "id: web, name: web_total, kind: counter, query: 'service:web', aggregation: count")
    log = {"@timestamp": T0, "status": "503", "path": "/x", "ms": 7.5, "service": "api",
           "account": "acme"}
    out = io.StringIO()
    assert explain_command(rules, json.dumps(log), JobConfig(), None, True, out) == 0
    doc = json.loads(out.getvalue())
    assert list(doc) == ["log", "status", "reason", "event_time", "account", "outcomes", "rules"]
    assert (doc["status"], doc["reason"]) == ("ok", None)
    assert doc["event_time"] == {
        "field": "@timestamp", "raw": T0, "ms": T0, "iso": "2026-11-22T10:00:05.500Z",
        "text": "@timestamp = 1795341605500 (top-level key \"@timestamp\") → 1795341605500 ms "
                "= 2026-11-22T10:00:05.500Z"}
    assert doc["account"]["found"] == "key" and doc["account"]["string_form"] == "acme"
    assert len(doc["outcomes"]) == 3
    errs, web = doc["rules"]
    assert list(errs) == ["id", "file", "line", "enabled", "kind", "aggregation", "query",
                          "matches", "query_matched", "scope", "clauses", "failed", "why",
                          "result"]
    assert (errs["matches"], errs["failed"], errs["why"]) == (True, None, None)
    assert errs["scope"] == {"account": "acme", "log_account": "acme", "sees": True,
                             "text": "scoped to account 'acme': the log's account is 'acme'"}
    root = errs["clauses"]
    assert {k: root[k] for k in ("kind", "text", "span", "role", "field", "matched")} == {
        "kind": "and", "text": 'status:>=500 AND NOT path:"/healthz"', "span": [0, 36],
        "role": None, "field": None, "matched": True}
    first = root["children"][0]
    assert first["lookup"] == {"path": "status", "found": "key", "value": "503",
                               "string_form": "503",
                               "text": 'status = "503" (top-level key "status")'}
    result = errs["result"]
    assert result["sample_labels"] == {"service": "api"}
    assert result["labels"] == [{"name": "service", "from": "service", "value": "api",
                                 "text": 'group_by service: service="api"'}]
    assert result["value"] == {"field": "ms", "value": 7.5,
                               "text": 'max of ms: ms = 7.5 (top-level key "ms") → 7.5'}
    assert result["time"]["window"] == [1_795_341_600_000, 1_795_341_660_000]
    assert result["time"]["sample_timestamp"] == 1_795_341_600_000
    assert result["late"]["watermark_before"] == 1_795_341_660_000
    assert result["late"]["newest_event_time_before"] == 1_795_342_860_000
    assert (result["target_account"], result["metrics"]) == (None, ["errs_total"])
    assert (web["matches"], web["result"]) == (False, None)
    assert web["failed"] == {
        "text": "service:web", "span": [0, 11],
        "detail": 'keyword term "web": service = "api" (top-level key "service"), string '
                  'form "api" ≠ "web"'}


RULE_FILE = """\
rules:
  - id: errors
    name: errors_total
    kind: counter
    query: 'level:error AND service:web'
    aggregation: count
"""


def test_the_command_line(tmp_path: Path, capsys):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE_FILE)
    logs = tmp_path / "logs.jsonl.gz"
    with gzip.open(logs, "wt") as f:
        f.write('{"level": "error", "service": "web", "@timestamp": 0}\n'
                '{"level": "error", "service": "api", "@timestamp": 0}\n')
    assert main(["explain", "--rules", str(rules), "--input", str(logs), "--line", "2"]) == 0
    said = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert said[:4] == [
        f"rule errors ({rules}:2, counter count): does not match",
        "  query: level:error AND service:web",
        "                         ^^^^^^^^^^^",
        '  why: service:web [16:27]: keyword term "web": service = "api" (top-level key '
        '"service"), string form "api" ≠ "web"',
    ]
    assert main(["explain", "--rules", str(rules), "--log", '{"level": "error", '
                 '"service": "web"}', "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["status"], doc["rules"][0]["matches"]) == ("no_timestamp", True)
    assert main(["explain", "--rules", str(rules), "--log", "{oops"]) == 0
    assert "status: malformed" in capsys.readouterr().out
    assert main(["explain", "--rules", str(rules), "--input", str(logs), "--line", "3"]) == 1
    assert capsys.readouterr().err == f"l2m: error [INPUT]: {logs}: no line 3 (it has 2 lines)\n"
    assert main(["explain", "--rules", str(rules), "--log", "{}", "--rule", "eror"]) == 1
    assert capsys.readouterr().err == ("l2m: error [CONFIG]: --rule eror: no rule with this id "
                                       "in the rules given (did you mean 'errors'?)\n")


def test_input_line(tmp_path: Path):
    plain = tmp_path / "logs.jsonl"
    plain.write_bytes(b'{"a": 1}\n\n{"a": "\xc3\xa9"}\n')
    assert [input_line(str(plain), n) for n in (1, 2, 3)] == [b'{"a": 1}', b"", b'{"a": "\xc3\xa9"}']
    with pytest.raises(InputError, match=r"no line 4 \(it has 3 lines\)"):
        input_line(str(plain), 4)
    with pytest.raises(InputError, match="numbered from 1"):
        input_line(str(plain), 0)
    with pytest.raises(InputError, match="no such file"):
        input_line(str(tmp_path / "missing.jsonl"), 1)


def test_the_caret_stays_under_its_span_with_wide_characters_and_a_newline_in_the_query():
    said = rule_text("東京:* AND\nservice:api", {"東京": 1, "service": "web"})
    assert said[:3] == [
        "  query: 東京:* AND service:api",
        "                    ^^^^^^^^^^^",
        '  why: service:api [9:20]: keyword term "api": service = "web" (top-level key '
        '"service"), string form "web" ≠ "api"',
    ]


def test_the_example_of_docs_rules_md_is_what_the_command_prints(capsys, monkeypatch):
    root = Path(__file__).resolve().parents[3]
    docs = (root / "docs" / "rules.md").read_text()
    section = docs[docs.index("## Why did my log not count?"):]
    command = section[section.index("l2m explain"):section.index("\nl2m explain --rules rules/ --input")]
    printed = section[section.index("The first prints:\n\n```text\n") + 27:]
    printed = printed[:printed.index("```")]
    log = command[command.index("--log '") + 7:command.rindex("'")]
    monkeypatch.chdir(root)
    assert main(["explain", "--rules", "rules/", "--rule", "http-client-errors", "--log", log]) == 0
    assert capsys.readouterr().out == printed


def test_a_bare_term_over_several_default_fields():
    cfg = JobConfig(text_fields=("message", "msg"), default_fields=("message", "msg"))
    rules, _ = load_text('rules:\n  - {id: r, name: r_total, kind: counter, query: "timeout", '
                         'aggregation: count}\n', config=cfg.query_config)
    report = explain_log(rules, json.dumps({"msg": "Timeout!", "message": 3}), cfg)
    (rule,) = report["rules"]
    assert rule["matches"] is True
    assert rule["clauses"]["detail"] == (
        'bare term on the default fields message, msg: text term "timeout": message = 3 '
        '(top-level key "message"), tokens [3]; "timeout" is not among them; text term '
        '"timeout": msg = "Timeout!" (top-level key "msg"), tokens [timeout]; "timeout" is one '
        'of them')
    assert [lookup["path"] for lookup in rule["clauses"]["lookup"]] == ["message", "msg"]


# --- any log: the engine's decoder, the engine's string forms and numbers ---------------------

DEEP_RULES = rules_of(
    "id: deep, name: deep_total, kind: counter, query: 'x:a OR _exists_:x.y', "
    "aggregation: count, group_by: [x], account: acme")
DEEP_LOG = '{"@timestamp": 0, "account": "acme", "x": ' + "[" * 1023 + "]" * 1023 + "}"


def test_a_log_nested_to_the_engine_s_limit_is_explained_and_one_level_more_is_malformed():
    out = io.StringIO()
    assert explain_command(DEEP_RULES, DEEP_LOG, JobConfig(), None, False, out) == 0
    assert out.getvalue() == (
        'log: {"@timestamp": 0, "account": "acme", "x": ' + "[" * 157 + "…\n"
        'status: ok\n'
        'event time: @timestamp = 0 (top-level key "@timestamp") → 0 ms = 1970-01-01T00:00:00Z\n'
        'account field: account = "acme" (top-level key "account")\n'
        'outcomes:\n'
        '  backfill: routed (no lateness in a backfill)\n'
        "  streaming: routed if its Kafka record's time is at or after 1969-12-31T23:55:00Z; an earlier record time puts the event time more than 5m (max_future_skew) ahead: status future, dead-lettered, never routed\n"
        '  streaming: late once the job has seen an event time of 1970-01-01T00:21:00Z (the watermark, that minus the grace, reaches 1970-01-01T00:01:00Z, the end of its minute): counted once in l2m_late_logs_total, ignored by the gauges, still counted by counters\n'
        'rules matching: 0 of 1\n'
        '\n'
        'rule deep (<memory>:2, counter count): does not match\n'
        '  query: x:a OR _exists_:x.y\n'
        '         ^^^^^^^^^^^^^^^^^^^\n'
        '  why: x:a OR _exists_:x.y [0:19]: OR: one of 2 must match; none did\n'
        "  account: scoped to account 'acme': the log's account is 'acme'\n"
        '  clauses:\n'
        '    ✗ x:a OR _exists_:x.y [0:19] OR: one of 2 must match; none did\n'
        '      ✗ x:a [0:3] keyword term "a": x = an array (top-level key "x"), which has no string form → no match\n'
        '      ✗ _exists_:x.y [7:19] _exists_: x.y is missing (no key "x.y"; nested path x → y: "x" is an array) → no match\n')
    # The JSON document leaves out what nests past JSON_DEPTH (Python's writer recurses).
    out = io.StringIO()
    assert explain_command(DEEP_RULES, DEEP_LOG, JobConfig(), None, True, out) == 0
    lookup = json.loads(out.getvalue())["rules"][0]["clauses"]["children"][0]["lookup"]
    assert lookup == {"path": "x", "found": "key", "value": None, "string_form": None,
                      "text": 'x = an array (top-level key "x")'}
    shallow = explain_log(DEEP_RULES, '{"x": [[[1]]]}', JobConfig())
    assert shallow["rules"][0]["clauses"]["children"][0]["lookup"]["value"] == [[[1]]]
    deeper = DEEP_LOG.replace("[", "[[", 1).replace("]", "]]", 1)
    report = explain_log(DEEP_RULES, deeper, JobConfig())
    assert (report["status"], report["reason"]) == (
        "malformed", "invalid JSON: depth limit exceeded: line 1 column 1067 (char 1066)")


def test_an_integer_past_64_bits_is_described_as_the_engine_reads_it():
    rules = rules_of(
        "id: big, name: big_total, kind: counter, query: 'v:18446744073709551616', "
        "aggregation: count, group_by: [v]",
        "id: bigf, name: bigf_total, kind: counter, query: 'v:1.8446744073709552e+19', "
        "aggregation: count, group_by: [v]",
        "id: rng, name: rng_total, kind: counter, "
        "query: 'v:[18446744073709551615 TO 18446744073709551617]', aggregation: count")
    out = io.StringIO()
    assert explain_command(rules, '{"v": 18446744073709551616, "@timestamp": 0}', JobConfig(),
                           None, False, out) == 0
    said = out.getvalue().split("\n\n")[1:]
    why = ('keyword term "18446744073709551616": v = 1.8446744073709552e+19 (top-level key '
           '"v"; an integer past 64 bits is read as a double), string form '
           '"1.8446744073709552e+19" ≠ "18446744073709551616" (the same number, another string '
           'form: write 1.8446744073709552e+19 to match it)')
    assert said[0].splitlines() == [
        'rule big (<memory>:2, counter count): does not match',
        '  query: v:18446744073709551616',
        '         ^^^^^^^^^^^^^^^^^^^^^^',
        f'  why: v:18446744073709551616 [0:22]: {why}',
        '  clauses:',
        f'    ✗ v:18446744073709551616 [0:22] {why}',
    ]
    assert said[1].splitlines()[:5] == [
        'rule bigf (<memory>:3, counter count): matches',
        '  query: v:1.8446744073709552e+19',
        '  clauses:',
        '    ✓ v:1.8446744073709552e+19 [0:24] keyword term "1.8446744073709552e+19": v = 1.8446744073709552e+19 (top-level key "v"; an integer past 64 bits is read as a double), string form "1.8446744073709552e+19" = "1.8446744073709552e+19"',
        '  label: group_by v: v="1.8446744073709552e+19"',
    ]
    assert said[2].splitlines()[3] == (
        '    ✓ v:[18446744073709551615 TO 18446744073709551617] [0:48] numeric range '
        '[18446744073709551615 TO 18446744073709551617]: v = 1.8446744073709552e+19 (top-level '
        'key "v"; an integer past 64 bits is read as a double), the number '
        '1.8446744073709552e+19: 1.8446744073709552e+19 >= 18446744073709551615, '
        '1.8446744073709552e+19 <= 18446744073709551617')
    # Below 2^64 an integer stays one (orjson: int64 and uint64), as its string form.
    assert rule_text("v:18446744073709551615", {"v": 18446744073709551615})[2] == (
        '    ✓ v:18446744073709551615 [0:22] keyword term "18446744073709551615": v = '
        '18446744073709551615 (top-level key "v"), string form "18446744073709551615" = '
        '"18446744073709551615"')


def test_an_account_that_is_an_object_or_an_array_is_there_without_a_string_form():
    rules = rules_of("id: a, name: a_total, kind: counter, query: '*', aggregation: count, "
                     "account: acme")
    for value, shown in ((["acme"], "an array"), ({"id": "acme"}, "an object")):
        (rule,) = explain_log(rules, json.dumps({"account": value}), JobConfig())["rules"]
        assert rule["why"] == (f"scoped to account 'acme': account = {shown} (top-level key "
                               '"account"), which has no string form, so the rule does not '
                               "see it")
    (rule,) = explain_log(rules, json.dumps({"account": None}), JobConfig())["rules"]
    assert rule["why"] == ("scoped to account 'acme': the log has no account (its `account` "
                           "field is missing), so the rule does not see it")


ODD_LINES = [
    DEEP_LOG,
    '{"x": ' + '{"y": ' * 1022 + '"a"' + "}" * 1023,  # x.y nested to the limit
    '{"x": ' + "[" * 1024 + "]" * 1024 + "}",
    "[" * 100_000,
    '{"v": 18446744073709551616, "x": -9223372036854775809, "y": 9223372036854775808}',
    '{"v": 1e308, "x": 5e-324, "y": -0.0, "z": 1' + "0" * 400 + "}",
    '{"v": 1e400}',
    '{"v": NaN, "x": Infinity}',
    '{"v": "\\ud800", "x": "\\udfff\\ud800"}',
    '{"v": "\ud800"}',  # a lone surrogate in the str itself (a --log argument)
    b'{"v": "\xff\xfe", "x": "\xed\xa0\x80"}',
    '{"v": "a", "v": "b", "x": {"y": 1}, "x": {"y": 2}, "x.y": 3, "x.y": null}',
    '{"v": "\\u0000\\u001b[31m", "x": "' + "é" * 10_000 + '"}',
    '{"v": [], "x": {}, "y": true, "z": false, "account": [["acme"]]}',
]
ODD_RULES = rules_of(
    "id: k, name: k_total, kind: counter, query: 'v:b OR x.y:[1 TO 3] OR y:[a TO z] OR z:1*', "
    "aggregation: count, group_by: [v, x.y]",
    "id: t, name: t_total, kind: gauge, query: 'v:(a OR /b.*/) OR message:error', "
    "aggregation: histogram, field: v, buckets: [0, 1]",
    "id: s, name: s_total, kind: counter, query: '*', aggregation: sum, field: x.y, "
    "account: acme")


@pytest.mark.parametrize("line", ODD_LINES, ids=range(len(ODD_LINES)))
def test_no_log_makes_explain_raise_and_its_verdicts_are_run_local_s(line):
    raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
    if raw.startswith(b"{"):  # dated, so that backfill counts it
        raw = b'{"@timestamp": 0, ' + raw[1:] if raw[1:].strip() != b"}" else raw
    for as_json in (False, True):
        out = io.StringIO()
        assert explain_command(ODD_RULES, raw, JobConfig(), None, as_json, out) == 0
        out.getvalue().encode("utf-8")  # printable as it is
        if as_json:
            json.loads(out.getvalue())
    report = explain_log(ODD_RULES, raw, JobConfig())
    counted = {r["id"] for r in report["rules"] if r["matches"] and (
        r["result"]["value"]["value"] is not None or r["aggregation"] == "count")}
    samples = run_local(RunSettings().routing(ODD_RULES), [raw]).samples
    assert set(samples.column("rule").to_pylist()) == counted


BUCKET_RULE = rules_of(
    "id: h, name: h, kind: gauge, query: '*', aggregation: histogram, field: v, "
    "buckets: [-1, 0, 1.0e-300, 0.5, 1, 1.0e+300]")[0]
BUCKET_VALUES = [-1, -1.0000000000000002, -0.0, 0, 0.0, 5e-324, 1e-300, math.nextafter(1e-300, 1),
                 0.49999999999999994, 0.5, "0.5", "5e-1", 1, "1", 1.0000000000000002, 1e300,
                 math.nextafter(1e300, math.inf), 1.7976931348623157e308, -1.7976931348623157e308,
                 18446744073709551616, "-0"]


@pytest.mark.parametrize("value", BUCKET_VALUES, ids=repr)
def test_the_buckets_stated_are_those_of_run_local_s_samples_on_the_bounds(value):
    line = json.dumps({"@timestamp": T0, "v": value})
    (said,) = explain_log([BUCKET_RULE], line, JobConfig())["rules"]
    samples = [json.loads(s) for s in run_local(RunSettings().routing([BUCKET_RULE]),
                                                [line]).lines]
    counted = [dict(s["labels"])["le"] for s in samples
               if s["name"] == "h_bucket" and s["value"] == 1.0]
    assert said["result"]["value"]["buckets"] == counted
    assert len(counted) >= 1 and counted[-1] == "+Inf"
