"""The Arrow fan-out (l2m/fanout.py) produces exactly the rows of the Spark route stage
(l2m/route.py, ``series=True``): the example and benchmark rules over generated logs, with
malformed and undated ones, and rules scoped to accounts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from l2m.backfill import parse_frame
from l2m.fanout import MATCH_SCHEMA, fan_out
from l2m.generator import GeneratorConfig, LogGenerator
from l2m.parse import parse_lines
from l2m.route import plan_for, route
from l2m.rules import load_rules, load_text

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent

SCOPED = """\
rules:
  - {id: acct-web, name: acct_web_total, kind: counter, query: "service:payments", account: globex,
     aggregation: count, group_by: [service, http.status]}
  - {id: acct-lat, name: acct_lat, kind: gauge, query: "*", account: platform,
     aggregation: max, field: http.duration_ms, group_by: [region]}
  - {id: none, name: none_total, kind: counter, query: "service:nothing-has-this",
     aggregation: count}
"""


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    v = row["v"]
    return (row["rule"], row["series"], row["le"] or "", row["window"] or 0, row["ts"] or 0,
            "nan" if v is None or (isinstance(v, float) and math.isnan(v)) else v)


def test_fan_out_equals_the_spark_route_stage(spark: Any) -> None:
    gen = LogGenerator(GeneratorConfig(seed=3, malformed_ratio=0.02, no_timestamp_ratio=0.02,
                                       late_ratio=0.05))
    lines = [line.decode() for line in gen.lines(3000)]
    rules = [*load_rules([ROOT / "rules", ROOT / "benchmarks" / "rules.yaml"]).rules,
             *load_text(SCOPED)[0]]
    routing = plan_for(rules)
    raw = spark.createDataFrame([(ln,) for ln in lines], "value string")
    expected = [r.asDict() for r in route(parse_frame(raw, routing.plan), routing,
                                          with_status=True, series=True).collect()]
    got_table = fan_out(parse_lines(lines, routing.plan), routing)
    assert got_table.schema == MATCH_SCHEMA
    got = got_table.to_pylist()
    assert len(got) == len(expected) > 10_000
    assert sorted(map(_key, got)) == sorted(map(_key, expected))
    scoped = {r["rule"] for r in got}
    assert {"acct-web", "acct-lat"} <= scoped and "none" not in scoped
