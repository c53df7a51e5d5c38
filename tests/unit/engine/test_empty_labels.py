"""An empty group-by value is no label (SPEC §3, issue 53): a log whose field's string form
is empty counts into the same series as a log without the field — one series key (``-``),
one partial, one sample — in the read tasks that streaming and backfill share, as in the
reference evaluator. No JVM."""

from __future__ import annotations

import orjson
import pyarrow as pa

from l2m.engine.parse import parse_lines
from l2m.engine.partials import partial_rows
from l2m.engine.pipeline import TaskPipeline
from l2m.engine.routing import plan_for
from l2m.engine.samples import rule_samples, series_labels
from l2m.rules.loader import load_text
from tests.support import reference

T0 = 1_795_341_600_000
RULES, _ = load_text("""\
rules:
  - {id: logins, name: logins_total, kind: counter, query: "*", aggregation: count,
     group_by: [user]}
  - {id: pair, name: pair_total, kind: counter, query: "*", aggregation: sum, field: ms,
     group_by: [user, region], labels: {team: core}}
  - {id: peak, name: peak_ms, kind: gauge, query: "*", aggregation: max, field: ms,
     group_by: [user]}
  - {id: hist, name: lat, kind: counter, query: "*", aggregation: histogram, field: ms,
     buckets: [5], group_by: [user]}
""")
LOGS = [
    {"@timestamp": T0 + 1, "user": "", "region": "eu", "ms": 1},
    {"@timestamp": T0 + 2, "region": "eu", "ms": 7},
    {"@timestamp": T0 + 3, "user": "bob", "region": "", "ms": 2},
    {"@timestamp": T0 + 4, "user": None, "ms": 3},
    {"@timestamp": T0 + 5, "user": "", "region": "", "ms": 4},
    {"@timestamp": T0 + 6, "user": "bob", "ms": 5},
]


def _samples() -> list[dict]:
    """The samples a read task's partials give (what backfill's last stage and the state
    stage make of them), in the reference's order."""
    routing = plan_for(RULES)
    pipeline = TaskPipeline(routing)
    pipeline.add(parse_lines([orjson.dumps(d) for d in LOGS], routing.plan))
    table = pa.Table.from_batches(list(pipeline.finish()))
    by_id = {r.id: r for r in RULES}
    families: dict[tuple, dict] = {}
    for rule_id, series, le, window, part in partial_rows(table):
        if rule_id in by_id:
            families.setdefault((rule_id, series, window), {})[le or ""] = part
    out = []
    for (rule_id, series, window), parts in families.items():
        rule = by_id[rule_id]
        out += rule_samples(rule, series_labels(rule, series), window, parts)
    return out


def test_a_read_task_counts_empty_and_missing_values_into_one_series():
    routing = plan_for(RULES)
    pipeline = TaskPipeline(routing)
    pipeline.add(parse_lines([orjson.dumps(d) for d in LOGS], routing.plan))
    partials = pa.Table.from_batches(list(pipeline.finish())).to_pylist()
    keys = [(p["rule"], p["series"], p["le"], p["window"]) for p in partials]
    assert len(keys) == len(set(keys))
    assert {p["series"]: p["matches"] for p in partials if p["rule"] == "logins"} == {
        "-": 4, "3:bob": 2}
    assert {p["series"]: p["matches"] for p in partials if p["rule"] == "pair"} == {
        "-2:eu": 2, "3:bob-": 2, "--": 2}


def test_the_samples_are_the_reference_s_with_no_empty_label():
    got = _samples()
    expected = reference.backfill(RULES, [orjson.dumps(d).decode() for d in LOGS])
    key = lambda s: (s["rule"], s["name"], sorted(s["labels"].items()), s["timestamp"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)
    logins = {tuple(s["labels"].items()): (s["value"], s["timestamp"])
              for s in expected if s["rule"] == "logins"}
    assert logins == {(): (4.0, T0 + 5), (("user", "bob"),): (2.0, T0 + 6)}
    pair = {tuple(sorted(s["labels"].items())): s["value"] for s in expected
            if s["rule"] == "pair"}
    assert pair == {(("region", "eu"), ("team", "core")): 8.0,
                    (("team", "core"), ("user", "bob")): 7.0, (("team", "core"),): 7.0}
    peak = {tuple(s["labels"].items()): s["value"] for s in expected if s["rule"] == "peak"}
    assert peak == {(): 7.0, (("user", "bob"),): 5.0}
    hist = {(s["name"], tuple(sorted(s["labels"].items()))): s["value"]
            for s in expected if s["rule"] == "hist"}
    assert hist[("lat_count", ())] == 4.0 and hist[("lat_bucket", (("le", "5"),))] == 3.0
    assert all(v != "" for s in got for v in s["labels"].values())
