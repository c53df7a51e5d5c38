"""run_local (backfill's stages in one process) against the reference evaluator
(tests/support/reference.py) for native histograms and quantile gauges (issue 56): random
logs with zeros, negative values, numeric strings, missing, null and non-numeric values over
several one-minute windows; native-only and classic+native histograms, counters and gauges,
bucket limits that lower the schema, quantiles 0 and 1."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import orjson
import pytest

from l2m.batch.local import RunSettings, run_local
from l2m.rules.loader import load_text
from l2m.rules.model import Aggregation, Rule
from tests.support import reference

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start

_BASE, _PROBLEMS = load_text("""\
rules:
  - {id: a-both, name: both_ms, kind: counter, query: 'svc:*', aggregation: histogram,
     field: ms, buckets: [0, 1, 25.5, 1000], group_by: [svc]}
  - {id: b-native, name: native_ms, kind: counter, query: '*', aggregation: histogram,
     field: ms, buckets: [1], group_by: [svc, region]}
  - {id: c-gauge, name: gauge_ms, kind: gauge, query: 'NOT svc:b', aggregation: histogram,
     field: ms, buckets: [1], group_by: [region]}
  - {id: d-gauge-both, name: gauge_both_ms, kind: gauge, query: '*', aggregation: histogram,
     field: ms, buckets: [-1, 0, 100], labels: {team: x}}
  - {id: e-quantiles, name: q_ms, kind: gauge, query: '*', aggregation: sum, field: ms,
     group_by: [svc]}
  - {id: f-coarse, name: coarse_ms, kind: gauge, query: '*', aggregation: sum, field: ms}
""")


def _rules(max_buckets: int) -> list[Rule]:
    assert _PROBLEMS == []
    both, native, gauge, gauge_both, quantiles, coarse = _BASE
    plain = {"buckets": (), "bucket_labels": ()}
    return [
        dataclasses.replace(both, native_schema=3, native_max_buckets=max_buckets),
        dataclasses.replace(native, **plain, native_schema=8, native_max_buckets=max_buckets),
        dataclasses.replace(gauge, **plain, native_schema=-2, native_max_buckets=max_buckets),
        dataclasses.replace(gauge_both, native_schema=0, native_max_buckets=max_buckets),
        dataclasses.replace(quantiles, aggregation=Aggregation.QUANTILES, native_schema=5,
                            native_max_buckets=max_buckets,
                            quantiles=(0.0, 0.25, 0.5, 0.9, 0.99, 1.0),
                            quantile_labels=("0", "0.25", "0.5", "0.90", "0.99", "1")),
        dataclasses.replace(coarse, aggregation=Aggregation.QUANTILES, native_schema=-4,
                            native_max_buckets=max_buckets, quantiles=(0.5,),
                            quantile_labels=("0.5",)),
    ]


def _value(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.05:
        return 0
    if roll < 0.08:
        return -0.0
    if roll < 0.18:
        return -round(rng.lognormvariate(1, 2), 3)
    if roll < 0.22:
        return str(round(rng.lognormvariate(2, 1), 2))  # a numeric string counts
    if roll < 0.25:
        return rng.choice(["slow", "", None, True, [1], {"x": 1}])
    if roll < 0.27:
        return rng.choice([1e-9, 123456789.5, 2 ** -20, 1024])
    return round(rng.lognormvariate(3, 1.5), 3)


def _logs(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        doc: dict[str, Any] = {"@timestamp": T0 + rng.randrange(5 * 60_000)}
        if rng.random() < 0.9:
            doc["svc"] = rng.choice("abc")
        if rng.random() < 0.7:
            doc["region"] = rng.choice(["eu", "us"])
        if rng.random() < 0.93:
            doc["ms"] = _value(rng)
        lines.append(orjson.dumps(doc).decode())
    lines += ["not json", "{}", '{"ms": 3}']  # malformed, no timestamp
    return lines


@pytest.mark.parametrize(("seed", "max_buckets"), [(1, 160), (2, 20), (3, 3), (4, 10_000)])
def test_run_local_equals_the_reference(seed: int, max_buckets: int) -> None:
    rules = _rules(max_buckets)
    lines = _logs(seed, 1500)
    run = run_local(RunSettings(limits=None).routing(rules), lines)
    got = [orjson.loads(line) for line in run.lines]
    expected = reference.backfill(rules, lines)
    assert len(got) == len(expected) > 200
    assert got == expected
    schemas = {s["histogram"]["schema"] for s in got if "histogram" in s}
    # The rules' schemas 3, 8, -2 and 0, lowered where the limit asks.
    assert schemas == {160: {3, 8, -2, 0}, 20: {1, -1, -2, 0}, 3: {-4},
                       10_000: {3, 8, -2, 0}}[max_buckets]
    assert {s["rule"] for s in got} == {r.id for r in rules}
