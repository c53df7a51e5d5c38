"""Native histograms and quantile gauges end to end (issue 56): logs on the embedded broker →
the streaming job → the metrics topic → ``l2m deliver`` → a real Prometheus (Debian's 2.42,
``--enable-feature=native-histograms``, its remote-write receiver on, 127.0.0.1) → PromQL.

Four rules over lognormal latencies of three services: a counter native histogram, a gauge
native histogram (one per one-minute window), per-minute quantile gauges and a classic+native
counter histogram. What PromQL reads back is checked against the same rules run over the
same logs by backfill's stages (:func:`l2m.batch.local.run_local`) and against the logs
themselves:

* ``histogram_count``/``histogram_sum`` of every native histogram series equal backfill's
  count and sum (the counters' at the latest batch; the gauge histogram's at every published
  window), and the classic family's ``_count``/``_sum`` the native one's;
* ``histogram_quantile(q, …)`` of a counter native histogram lies within the bound of its
  schema of the exact (nearest-rank) quantile of the logs' values: 2.42 interpolates
  linearly inside the bucket that holds rank q·count, which holds the exact quantile too, so
  the relative error is at most the bucket's width over its lower bound, base − 1;
* each published quantile gauge is backfill's value, within
  :func:`l2m.semantics.exphist.relative_error_bound` of the window's exact quantile;
* a counter series starts with the empty histogram a millisecond before its first one, its
  latest holds backfill's buckets bound for bound, and Prometheus refused nothing (its own
  counters say so).

The job and delivery run in this process (``run_once``, ``deliver(once=True)``: what
``l2m run`` and ``l2m deliver`` run), as tests/integration/test_deliver.py does."""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from l2m.batch.local import routing_for, run_local
from l2m.remotewrite.outbox import NOT_FINAL
from l2m.rules.loader import load_text
from l2m.semantics import exphist
from tests.integration.prometheus_server import NATIVE_HISTOGRAMS, running_prometheus
from tests.integration.test_deliver import _endpoint, _rejected, _run_and_deliver
from tests.integration.test_prometheus import promql
from tests.support.kafka_helpers import fresh_topics, job_config

MIN = 60_000
SERVICES = {"cart": 3.0, "search": 4.0, "auth": 2.0}  # ln of each service's median latency
QUANTILES = (0.5, 0.9, 0.99)
RULES = """
rules:
  - {id: native, name: lat_native_ms, kind: counter, query: "*", aggregation: histogram,
     field: ms, native: true, group_by: [service]}
  - {id: window, name: lat_window_ms, kind: gauge, query: "*", aggregation: histogram,
     field: ms, native: {schema: 4}, group_by: [service]}
  - {id: quantiles, name: lat_quantiles_ms, kind: gauge, query: "*", aggregation: quantiles,
     field: ms, quantiles: [0.5, 0.9, 0.99], group_by: [service]}
  - {id: both, name: lat_both_ms, kind: counter, query: "*", aggregation: histogram,
     field: ms, buckets: [10, 50, 100, 500], native: {schema: 2}, group_by: [service]}
"""


@pytest.fixture
def native_prometheus(tmp_path: Path) -> Iterator[str]:
    """A Prometheus with native histograms and the remote-write receiver on (and the
    30-minute out-of-order window docs/prometheus.md asks for, which 2.42 applies to floats
    only); it scrapes itself every second. Its base URL."""
    with running_prometheus(tmp_path, NATIVE_HISTOGRAMS, scrape_self=True) as base:
        yield base


def _log(ts: int, service: str, ms: float) -> bytes:
    return orjson.dumps({"@timestamp": ts, "service": service, "ms": ms})


def _logs(start: int, seed: int) -> tuple[list[bytes], list[bytes]]:
    """Ten minutes of logs (one a second, lognormal latencies to the microsecond), and a
    second batch of one log per service in the minute after them: the job publishes, in that
    batch, the windows its watermark (the first batch's newest event time less the publish
    delay, 2 minutes) has passed; the second batch's logs touch none of them."""
    rng = random.Random(seed)
    first = []
    for i in range(600):
        service = rng.choice(sorted(SERVICES))
        first.append(_log(start + i * 1_000, service,
                          round(rng.lognormvariate(SERVICES[service], 1.0), 3)))
    second = [_log(start + 10 * MIN + 30_000, service, round(rng.lognormvariate(mu, 1.0), 3))
              for service, mu in sorted(SERVICES.items())]
    return first, second


def exact_quantile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile: the k-th smallest value, k = max(1, ceil(q·n))."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _stored(base: str, name: str, service: str) -> list[tuple[int, Any]]:
    """Every point Prometheus holds for a series of the last hour: (ms, value) — a float, or
    a native histogram as the HTTP API shows it ({count, sum, buckets})."""
    found = [r for r in promql(base, f'{name}{{service="{service}"}}[1h]')
             if r["metric"] == {"__name__": name, "service": service}]
    assert len(found) <= 1, found
    if not found:
        return []
    points = found[0].get("values", []) + found[0].get("histograms", [])
    return sorted((round(float(t) * 1000), v) for t, v in points)


def _one(base: str, query: str) -> float:
    (result,) = promql(base, query)
    return float(result["value"][1])


def test_native_histograms_and_quantile_gauges_read_back_with_promql(
        spark, broker, native_prometheus, tmp_path):
    prometheus = native_prometheus
    rules, errors = load_text(RULES)
    assert not errors, errors
    t = fresh_topics(broker.bootstrap, partitions=2)
    cfg = replace(job_config(t, tmp_path), remote_write=_endpoint(f"{prometheus}/api/v1/write"))
    start = (int(time.time() * 1000) - 30 * MIN) // MIN * MIN
    first, second = _logs(start, seed=56)
    tallies = [_run_and_deliver(spark, t, cfg, rules, first),
               _run_and_deliver(spark, t, cfg, rules, second)]
    for tally in tallies:
        assert tally.refused == {} and set(tally.skipped) <= {NOT_FINAL}, tally
        assert tally.sent > 0
    logs = first + second
    expected = [orjson.loads(line) for line in run_local(routing_for(rules), logs).lines]
    values: dict[str, list[float]] = defaultdict(list)
    by_window: dict[tuple[str, int], list[float]] = defaultdict(list)
    for line in logs:
        log = orjson.loads(line)
        values[log["service"]].append(log["ms"])
        by_window[log["service"], log["@timestamp"] // MIN * MIN].append(log["ms"])

    def backfill(rule: str, service: str) -> list[dict[str, Any]]:
        return [s for s in expected if s["rule"] == rule and s["labels"]["service"] == service]

    # The largest relative error seen per check, and its bound (printed: docs/prometheus.md
    # quotes a run).
    errors_seen: dict[str, tuple[float, float]] = {}

    def seen(check: str, error: float, bound: float) -> None:
        assert error <= bound, (check, error, bound)
        errors_seen[check] = (max(error, errors_seen.get(check, (0.0, 0.0))[0]), bound)
    newest = max(orjson.loads(line)["@timestamp"] for line in logs)
    for service in SERVICES:
        # Counter native histograms: the latest point is backfill's histogram, the first the
        # empty one a millisecond before the first batch's.
        for rule, name in (("native", "lat_native_ms"), ("both", "lat_both_ms")):
            (sample,) = [s for s in backfill(rule, service) if "histogram" in s]
            h = sample["histogram"]
            assert h["count"] == len(values[service])
            stored = _stored(prometheus, name, service)
            assert [int(v["count"]) for _, v in stored][:1] == [0]
            assert len(stored) == 3, stored  # the empty one, then one per batch
            assert stored[1][0] == stored[0][0] + 1
            # Bucket for bucket (2.42's API: [boundary rule, lower, upper, count]).
            assert [(float(upper), int(count)) for _, _, upper, count in
                    stored[-1][1]["buckets"]] == [(exphist.upper_bound(i, h["schema"]), c)
                                                  for i, c in h["positive"]]
            selector = f'{name}{{service="{service}"}}'
            assert _one(prometheus, f"histogram_count({selector})") == h["count"]
            assert _one(prometheus, f"histogram_sum({selector})") == h["sum"]
            bound = exphist.growth_factor(h["schema"]) - 1.0
            for q in QUANTILES:
                got = _one(prometheus, f"histogram_quantile({q}, {selector})")
                exact = exact_quantile(values[service], q)
                seen(f"histogram_quantile, schema {h['schema']}", abs(got - exact) / exact,
                     bound)
        # The classic family of the classic+native rule counts the same logs.
        assert _one(prometheus, f'lat_both_ms_count{{service="{service}"}}') == \
            len(values[service])

        # Gauge native histograms: every published window (ended two minutes before the
        # newest log) as backfill has it, and no other.
        published = [s for s in backfill("window", service)
                     if s["timestamp"] + 3 * MIN <= newest]
        assert len(published) >= 6
        stored = _stored(prometheus, "lat_window_ms", service)
        assert [at for at, _ in stored] == [s["timestamp"] for s in published]
        for sample in published:
            at = sample["timestamp"] / 1000
            h = sample["histogram"]
            selector = f'lat_window_ms{{service="{service}"}} @ {at}'
            assert _one(prometheus, f"histogram_count({selector})") == h["count"] == len(
                by_window[service, sample["timestamp"]])
            assert _one(prometheus, f"histogram_sum({selector})") == h["sum"]

        # Quantile gauges: backfill's values, each within the schema's bound of the exact
        # quantile of its window.
        bound = exphist.relative_error_bound(5)
        for q in QUANTILES:
            name = "lat_quantiles_ms"
            published = [s for s in backfill("quantiles", service)
                         if s["labels"]["quantile"] == str(q)
                         and s["timestamp"] + 3 * MIN <= newest]
            found = [r for r in promql(prometheus, f'{name}{{service="{service}",'
                                                   f'quantile="{q}"}}[1h]')]
            assert len(found) == 1
            stored_values = [(round(float(at) * 1000), float(v))
                             for at, v in found[0]["values"]]
            assert stored_values == [(s["timestamp"], s["value"]) for s in published]
            for sample in published:
                exact = exact_quantile(by_window[service, sample["timestamp"]], q)
                seen("quantile gauges, schema 5", abs(sample["value"] - exact) / exact, bound)
    print("largest relative error (bound):", ", ".join(
        f"{check}: {error:.4%} ({bound:.4%})" for check, (error, bound) in errors_seen.items()))
    assert _rejected(prometheus) == 0
