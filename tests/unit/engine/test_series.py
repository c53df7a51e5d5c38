"""Series keys: the fan-out's length-prefixed group-by values decode to exactly the labels
the reference evaluator gives a log, whatever the values contain."""

from __future__ import annotations

import orjson

from l2m.engine.fanout import fan_out
from l2m.engine.parse import parse_lines
from l2m.engine.routing import plan_for
from l2m.engine.samples import series_labels
from l2m.rules.loader import load_text
from tests.support import reference

RULES, _ = load_text("""\
rules:
  - {id: g, name: g_total, kind: counter, query: "*", aggregation: count,
     group_by: [a, b.c, n], labels: {team: core, z: last}}
  - {id: none, name: none_total, kind: counter, query: "*", aggregation: count}
""")
LOGS = [
    {"a": "x", "b": {"c": "y"}, "n": 5},
    {"a": "1:2-", "n": 1.5},                      # separators inside a value
    {"b": {"c": ""}, "a": "-"},                   # empty value, a value that is the marker
    {"a": "ünïcødé ✓", "b": {"c": "x" * 12}},     # non-ASCII, two-digit length
    {"other": 1},                                 # no group-by field at all
]


def test_series_keys_decode_to_the_reference_labels():
    routing = plan_for(RULES)
    docs = [{"@timestamp": 1_795_341_600_000, **x} for x in LOGS]
    rows = fan_out(parse_lines([orjson.dumps(d) for d in docs], routing.plan), routing,
                   with_status=False).to_pylist()
    rules = {r.id: r for r in RULES}
    got = sorted((r["rule"], tuple(series_labels(rules[r["rule"]], r["series"])))
                 for r in rows)
    expected = sorted((rule.id, tuple(sorted(match[0].items()))) for d in docs for rule in RULES
                      if (match := reference.rule_match(rule, d)) is not None)
    assert got == expected and len(got) == 2 * len(LOGS)
    assert ("g", (("a", "1:2-"), ("n", "1.5"), ("team", "core"), ("z", "last"))) in got
    # an empty value is no label (SPEC §3): b.c is "" here
    assert ("g", (("a", "-"), ("team", "core"), ("z", "last"))) in got
    assert ("g", (("team", "core"), ("z", "last"))) in got


def test_an_empty_value_has_the_key_of_a_missing_one_and_other_keys_do_not_change():
    """The stored key (the state's, pinned by tests/golden) of a present value is as it was;
    an empty value's part is the missing value's ``-``, so both count into one series."""
    routing = plan_for(RULES)
    docs = [{"a": "x", "b": {"c": "y"}, "n": 5}, {"a": "", "b": {"c": ""}, "n": ""},
            {"other": 1}, {"a": "", "b": {"c": "y"}}, {"a": "x", "n": 0}, {"a": "", "n": None}]
    lines = [orjson.dumps({"@timestamp": 1_795_341_600_000, **d}) for d in docs]
    rows = fan_out(parse_lines(lines, routing.plan), routing, with_status=False).to_pylist()
    assert [r["series"] for r in rows if r["rule"] == "g"] == [
        "1:x1:y1:5", "---", "---", "-1:y-", "1:x-1:0", "---"]
    assert series_labels(RULES[0], "---") == [("team", "core"), ("z", "last")]


def test_series_labels_without_group_by():
    assert series_labels(RULES[1], "") == []
