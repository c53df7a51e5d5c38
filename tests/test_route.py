"""Series keys: the streaming route's length-prefixed group-by values decode to exactly the
labels the batch route builds, whatever the values contain."""

from __future__ import annotations

import orjson
import pytest

from l2m.backfill import parse_frame
from l2m.route import plan_for, route
from l2m.rules import load_text
from l2m.samples import series_labels

pytestmark = pytest.mark.spark

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


def test_series_keys_decode_to_the_batch_labels(spark):
    routing = plan_for(RULES)
    lines = [orjson.dumps({"@timestamp": 1_795_341_600_000, **x}).decode() for x in LOGS]
    raw = spark.createDataFrame([(line,) for line in lines], "value string")
    parsed = parse_frame(raw, routing.plan)
    batch = route(parsed, routing, with_status=False).collect()
    stream = route(parsed, routing, with_status=False, series=True).collect()
    rules = {r.id: r for r in RULES}
    expected = sorted((r["rule"], tuple((e["name"], e["value"]) for e in r["labels"]))
                      for r in batch)
    got = sorted((r["rule"], tuple(series_labels(rules[r["rule"]], r["series"])))
                 for r in stream)
    assert got == expected and len(got) == 2 * len(LOGS)
    assert ("g", (("a", "1:2-"), ("n", "1.5"), ("team", "core"), ("z", "last"))) in got
    assert ("g", (("a", "-"), ("b_c", ""), ("team", "core"), ("z", "last"))) in got
    assert ("g", (("team", "core"), ("z", "last"))) in got


def test_series_labels_without_group_by():
    assert series_labels(RULES[1], "") == []
