"""`l2m backfill` (issue 53): a log whose group-by value is empty and a log without the field
count into one series, whose sample carries no such label."""

from __future__ import annotations

import json
from pathlib import Path

from l2m.batch.backfill import run_backfill
from l2m.rules.loader import load_text

T0 = 1795341600000


def test_backfill_merges_an_empty_value_with_a_missing_one(spark, tmp_path: Path):
    rules, _ = load_text("""\
rules:
  - {id: logins, name: logins_total, kind: counter, query: "*", aggregation: count,
     group_by: [user]}
  - {id: peak, name: peak_ms, kind: gauge, query: "*", aggregation: max, field: ms,
     group_by: [user, region]}
""")
    rows = [{"@timestamp": T0 + 1, "user": "", "region": "eu", "ms": 4},
            {"@timestamp": T0 + 2, "region": "eu", "ms": 9},
            {"@timestamp": T0 + 3, "user": "bob", "region": "", "ms": 1},
            {"@timestamp": T0 + 4, "user": "", "ms": 2},
            {"@timestamp": T0 + 5, "user": "bob", "ms": 3}]
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    run_backfill(spark, rules, [str(logs)], out, progress=False)
    got = [(s["rule"], s["labels"], s["value"], s["timestamp"])
           for s in map(json.loads, out.read_text().splitlines())]
    assert got == [
        ("logins", {}, 3.0, T0 + 4),
        ("logins", {"user": "bob"}, 2.0, T0 + 5),
        ("peak", {}, 2.0, T0),
        ("peak", {"region": "eu"}, 9.0, T0),
        ("peak", {"user": "bob"}, 3.0, T0),
    ]
