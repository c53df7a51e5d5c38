"""Quantile gauges and native histograms from logs to samples, against the exact answer
(issue 56), without a JVM.

Generated values — uniform, lognormal, a spike (most values equal, a few outliers far on both
sides) and one with negative values, zeros and values inside the zero bucket — go as logs
through backfill's stages in this process (:func:`l2m.batch.local.run_local`), grouped by
distribution, over several one-minute windows (one of them a single value). Then, for every
window:

* each quantile gauge is within :func:`~l2m.semantics.exphist.relative_error_bound` of its
  schema of the exact nearest-rank quantile of the window's values (the k-th smallest,
  k = max(1, ceil(q·n))), and exactly 0 when that value is in the zero bucket;
* each native histogram sample (a gauge's per window, a counter's over every window) is
  :func:`~l2m.semantics.exphist.from_values` of its values, the definition: count, zero
  count and every bucket count equal, the sum the exact decimal sum (each value's shortest
  digits rounded to 18 places, as :mod:`l2m.engine.preaggregate` states);
* with the default bucket limit — a quantiles rule's 320, a histogram's 160 — both are those
  of :func:`~l2m.semantics.exphist.limit_buckets` of it: resolution lowered, nothing lost;
  at the most a rule may ask for (MAX_NATIVE_BUCKETS) likewise, which leaves these values at
  the rule's schema (at most 925 buckets: a counter's 1,218 values at schema 8).

The largest error measured per distribution and schema is printed beside its bound
(``pytest -s``); benchmarks/README.md records a run ("Native histograms and quantiles")."""

from __future__ import annotations

import decimal
import math
import random
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction
from typing import Any

import orjson
import pytest

from l2m.batch.local import routing_for, run_local
from l2m.query.compiler import parse_query
from l2m.rules.model import (
    MAX_NATIVE_BUCKETS,
    NATIVE_MAX_BUCKETS,
    QUANTILES_MAX_BUCKETS,
    Aggregation,
    Kind,
    Rule,
)
from l2m.semantics import exphist

SEEDS = (56, 2026)
SCHEMAS = (0, 3, 5, 8)
QS = (0.0, 0.01, 0.5, 0.9, 0.99, 0.999, 1.0)
Q_LABELS = ("0", "0.01", "0.5", "0.9", "0.99", "0.999", "1")
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window start
WINDOW_MS = 60_000
# Values per window: a full one, a single value, a small one, a middling one.
WINDOW_SIZES = (900, 1, 17, 300)
QUERY = "_exists_:dist"
_PLACES = Decimal(1).scaleb(-18)


def _window(rng: random.Random, name: str, n: int) -> list[float]:
    if name == "uniform":
        return [rng.uniform(0.0, 1000.0) for _ in range(n)]
    if name == "lognormal":
        return [rng.lognormvariate(3.0, 1.5) for _ in range(n)]
    if name == "spike":
        values = [250.0] * n
        # outliers on both sides, far apart: at most 2% of the window
        for i in rng.sample(range(n), n // 50):
            values[i] = rng.choice((1e-6, 0.003, 1e6, 7.5e11, 2.5))
        return values
    assert name == "signed"
    out = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.1:
            out.append(rng.choice((0.0, -0.0, 1e-40, -2e-39)))  # the zero bucket
        elif roll < 0.45:
            out.append(-rng.lognormvariate(1.0, 2.0))
        else:
            out.append(round(rng.lognormvariate(1.0, 2.0), rng.randint(0, 6)))
    return out


DISTRIBUTIONS = ("uniform", "lognormal", "spike", "signed")


def _data(seed: int) -> dict[tuple[str, int], list[float]]:
    """(distribution, window start) → the window's values."""
    rng = random.Random(seed)
    return {(name, START_MS + w * WINDOW_MS): _window(rng, name, n)
            for name in DISTRIBUTIONS for w, n in enumerate(WINDOW_SIZES)}


def _lines(rng: random.Random, data: dict[tuple[str, int], list[float]]) -> list[bytes]:
    lines = []
    for (name, start), values in data.items():
        for value in values:
            lines.append(orjson.dumps({"@timestamp": start + rng.randrange(WINDOW_MS),
                                       "dist": name, "v": value}))
        # matched, but no value: counted in no histogram and no quantile
        for log in ({}, {"v": None}, {"v": "slow"}, {"v": {"ms": 3}}):
            lines.append(orjson.dumps({"@timestamp": start + 1, "dist": name, **log}))
    rng.shuffle(lines)
    return lines


def _rule(rule_id: str, aggregation: str, schema: int, max_buckets: int,
          kind: Kind = Kind.GAUGE) -> Rule:
    quantiles = aggregation == "quantiles"
    return Rule(id=rule_id, name=f"latency_{rule_id.replace('-', '_')}", kind=kind,
                query=QUERY, aggregation=Aggregation(aggregation), field="v", native_schema=schema,
                native_max_buckets=max_buckets, quantiles=QS if quantiles else (),
                quantile_labels=Q_LABELS if quantiles else (), group_by=("dist",),
                compiled=parse_query(QUERY))


def _rules() -> list[Rule]:
    rules = []
    for schema in SCHEMAS:
        for aggregation, tag in (("quantiles", "q"), ("histogram", "h")):
            # as unlimited as a rule may be: a window's at most 900 values populate at most
            # 900 buckets, so the error bound is the rule's schema's
            rules.append(_rule(f"{tag}{schema}", aggregation, schema, MAX_NATIVE_BUCKETS))
            # the default limit (a rule's without max_buckets): resolution lowered where a
            # window populates more buckets
            rules.append(_rule(f"{tag}{schema}-limited", aggregation, schema,
                               DEFAULT_LIMIT[aggregation]))
        # a counter: one cumulative histogram per series, over every window
        rules.append(_rule(f"c{schema}", "histogram", schema, MAX_NATIVE_BUCKETS, Kind.COUNTER))
        rules.append(_rule(f"c{schema}-limited", "histogram", schema, NATIVE_MAX_BUCKETS,
                           Kind.COUNTER))
    return rules


DEFAULT_LIMIT = {"quantiles": QUANTILES_MAX_BUCKETS, "histogram": NATIVE_MAX_BUCKETS}


def exact_quantile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile: the k-th smallest value, k = max(1, ceil(q·n)), q·n exact
    for q as written (its decimal, not the double: Fraction of its text)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(Fraction(repr(q)) * len(ordered))) - 1]


def exact_sum(values: list[float]) -> float:
    """The sum a sample shows: each value's shortest digits rounded half away from zero to 18
    places, added exactly (every value here is below 1e20)."""
    context = decimal.Context(prec=100)
    total = sum((Decimal(repr(v)).quantize(_PLACES, rounding=decimal.ROUND_HALF_UP,
                                           context=context) for v in values), Decimal(0))
    return float(total)


def _samples(seed: int) -> tuple[dict[tuple[str, int], list[float]], list[dict[str, Any]]]:
    print(f"seed {seed}")
    data = _data(seed)
    run = run_local(routing_for(_rules()), _lines(random.Random(seed + 1), data))
    return data, [orjson.loads(line) for line in run.lines]


def _histogram(sample: dict[str, Any]) -> exphist.NativeHistogram:
    h = sample["histogram"]
    return exphist.NativeHistogram(h["schema"], h["zero_threshold"], h["zero_count"],
                                   h["count"], h["sum"], dict(map(tuple, h["positive"])),
                                   dict(map(tuple, h["negative"])))


@pytest.mark.parametrize("seed", SEEDS)
def test_quantile_gauges_are_within_the_bound_of_the_exact_quantile(seed: int) -> None:
    data, samples = _samples(seed)
    got: dict[tuple[str, str, int, str], float] = {}
    for s in samples:
        if "quantile" in s["labels"]:
            key = (s["rule"], s["labels"]["dist"], s["timestamp"], s["labels"]["quantile"])
            assert key not in got
            got[key] = s["value"]
    worst: dict[tuple[str, int], float] = defaultdict(float)
    lowered = 0
    for schema in SCHEMAS:
        bound = exphist.relative_error_bound(schema)
        for (name, start), values in data.items():
            limited = exphist.limit_buckets(exphist.from_values(values, schema),
                                            QUANTILES_MAX_BUCKETS)
            lowered += limited.schema < schema
            for q, label in zip(QS, Q_LABELS, strict=True):
                exact = exact_quantile(values, q)
                estimate = got.pop((f"q{schema}", name, start, label))
                where = (name, start, schema, q, exact, estimate)
                if abs(exact) <= exphist.DEFAULT_ZERO_THRESHOLD:
                    assert estimate == 0.0, where
                else:
                    error = abs(estimate - exact) / abs(exact)
                    assert error <= bound + 1e-15, (*where, error, bound)
                    worst[name, schema] = max(worst[name, schema], error)
                # the default limit: the estimate of the lowered histogram, exactly
                assert got.pop((f"q{schema}-limited", name, start, label)) \
                    == exphist.quantile(limited, q), where
    assert got == {}  # no other quantile sample
    assert lowered  # the default limit was reached somewhere: lowering is exercised
    print(f"{'distribution':<12} {'schema':>6} {'max error':>11} {'bound':>11}")
    for (name, schema), error in sorted(worst.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{name:<12} {schema:>6} {error:>11.6%} "
              f"{exphist.relative_error_bound(schema):>11.6%}")


@pytest.mark.parametrize("seed", SEEDS)
def test_native_histogram_samples_are_the_histograms_of_the_values(seed: int) -> None:
    data, samples = _samples(seed)
    got: dict[tuple[str, str, int], dict[str, Any]] = {}
    counters: dict[tuple[str, str], dict[str, Any]] = {}
    for s in samples:
        if "histogram" in s:
            assert s["format"] == 2
            if s["kind"] == "counter":
                assert (s["rule"], s["labels"]["dist"]) not in counters
                counters[s["rule"], s["labels"]["dist"]] = s
                continue
            assert s["kind"] == "gauge"
            key = (s["rule"], s["labels"]["dist"], s["timestamp"])
            assert key not in got
            got[key] = s
    lowered = 0
    for schema in SCHEMAS:
        for (name, start), values in data.items():
            expected = exphist.from_values(values, schema)
            expected.sum = exact_sum(values)
            for rule_id, want in ((f"h{schema}",
                                   exphist.limit_buckets(expected, MAX_NATIVE_BUCKETS)),
                                  (f"h{schema}-limited",
                                   exphist.limit_buckets(expected, NATIVE_MAX_BUCKETS))):
                sample = got.pop((rule_id, name, start))
                assert sample["labels"] == {"dist": name}
                assert _histogram(sample) == want, (rule_id, name, start)
                lowered += want.schema < schema
    assert got == {}  # no other gauge histogram sample
    assert lowered  # the limit was reached somewhere: lowering is exercised
    for schema in SCHEMAS:
        for name in DISTRIBUTIONS:
            values = [v for (dist, _start), vs in data.items() if dist == name for v in vs]
            expected = exphist.from_values(values, schema)
            expected.sum = exact_sum(values)
            for rule_id, want in ((f"c{schema}",
                                   exphist.limit_buckets(expected, MAX_NATIVE_BUCKETS)),
                                  (f"c{schema}-limited",
                                   exphist.limit_buckets(expected, NATIVE_MAX_BUCKETS))):
                assert _histogram(counters.pop((rule_id, name))) == want, (rule_id, name)
    assert counters == {}


def test_the_zero_bucket_and_the_signs_are_ranked_in_order() -> None:
    """Negative buckets (largest magnitude first), the zero bucket, then positive ones."""
    values = [-8.0, -8.0, -0.5, 0.0, 1e-40, -0.0, 3.0, 3.0, 3.0, 1000.0]
    lines = [orjson.dumps({"@timestamp": START_MS + i, "dist": "x", "v": v})
             for i, v in enumerate(values)]
    rule = _rule("q5", "quantiles", 5, QUANTILES_MAX_BUCKETS)
    run = run_local(routing_for([rule]), lines)
    got = {orjson.loads(line)["labels"]["quantile"]: orjson.loads(line)["value"]
           for line in run.lines}
    rep = exphist.representative
    assert got == {"0": -rep(exphist.magnitude_index(8.0, 5), 5),
                   "0.01": -rep(exphist.magnitude_index(8.0, 5), 5),
                   "0.5": 0.0,  # the 5th smallest: 1e-40, in the zero bucket
                   "0.9": rep(exphist.magnitude_index(3.0, 5), 5),
                   "0.99": rep(exphist.magnitude_index(1000.0, 5), 5),
                   "0.999": rep(exphist.magnitude_index(1000.0, 5), 5),
                   "1": rep(exphist.magnitude_index(1000.0, 5), 5)}
