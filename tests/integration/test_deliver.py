"""``l2m deliver`` against a real Prometheus (Debian's 2.42, remote-write receiver and an
out-of-order window on, 127.0.0.1) fed by the streaming job on the embedded broker: what
PromQL reads equals ``l2m backfill`` on the same logs, and a receiver's outage or refusals
lose nothing else (issue 22)."""

from __future__ import annotations

import http.server
import random
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

import orjson
import pytest

from l2m.config.job import RemoteWriteConfig, RemoteWriteEndpoint
from l2m.config.loader import load_config
from l2m.remotewrite.outbox import NOT_FINAL, Tally
from l2m.rules.loader import load_text
from l2m.runtime.deliver import deliver
from tests.integration.test_prometheus import promql, wait_for
from tests.integration.test_streaming import backfill_samples, generated, run_once
from tests.support.kafka_helpers import fresh_topics, job_config, job_yaml, produce
from tests.support.rulesets import COUNTER_RULES
from tests.support.web import serving

MIN = 60_000


# Prometheus's own counts of samples its TSDB refused, and of refused remote-write requests.
REJECTED = ("prometheus_tsdb_out_of_order_samples_total",
            "prometheus_tsdb_out_of_bound_samples_total",
            'prometheus_http_requests_total{handler="/api/v1/write",code=~"4.."}')


def _rejected(base: str) -> float:
    """What Prometheus itself counted as refused, once a scrape after now has landed."""
    scrapes = promql(base, 'prometheus_http_requests_total{handler="/metrics"}')
    seen = sum(float(r["value"][1]) for r in scrapes)
    wait_for(lambda: sum(float(r["value"][1]) for r in promql(
        base, 'prometheus_http_requests_total{handler="/metrics"}')) >= seen + 2, 30,
             "two more self-scrapes")
    assert promql(base, REJECTED[0]) and promql(base, REJECTED[1])  # scraped: not vacuous
    return sum(float(r["value"][1]) for q in REJECTED for r in promql(base, q))


def _selector(sample: dict[str, Any]) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample["labels"].items()))
    return f'{{__name__="{sample["name"]}"{"," + labels if labels else ""}}}'


def _exactly(sample: dict[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results for the sample's series itself (a selector also matches series with more
    labels: a log without a group-by field makes a series without its label)."""
    labels = {**sample["labels"], "__name__": sample["name"]}
    return [r for r in results if r["metric"] == labels]


def _stored(base: str, sample: dict[str, Any]) -> list[tuple[int, float]]:
    """Every point Prometheus holds for the sample's series (the last hour)."""
    found = _exactly(sample, promql(base, f"{_selector(sample)}[1h]"))
    assert len(found) <= 1, found
    return [(round(float(t) * 1000), float(v)) for t, v in found[0]["values"]] if found else []


def _stored_whole(base: str, sample: dict[str, Any]) -> list[tuple[int, float]]:
    """The sample's stored points, asserted whole: present, strictly increasing in time, the
    first the 0 just before its first value (PromQL counts it), the last backfill's value."""
    points = _stored(base, sample)
    assert points, sample
    times = [at for at, _ in points]
    assert times == sorted(set(times)), (sample, points)
    assert points[0][1] == 0.0 and points[-1][1] == sample["value"], (sample, points)
    return points


def _increase(base: str, sample: dict[str, Any], at: float) -> list[float]:
    """increase() over the sample's series in the hour before ``at`` (s)."""
    labels = {**sample["labels"], "__name__": sample["name"]}
    found = promql(base, f"increase({_selector(sample)}[1h] @ {at})")
    # increase() drops the metric name: match the other labels exactly.
    return [float(r["value"][1]) for r in found
            if r["metric"] == {k: v for k, v in labels.items() if k != "__name__"}]


def _run_and_deliver(spark: Any, t: Any, cfg: Any, rules: Any, lines: list[bytes],
                     name: str = "prom") -> Tally:
    """Produce ``lines``, run the job once over the topic, deliver what the metrics topic
    holds to endpoint ``name``: its tally."""
    produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    run_once(spark, cfg, rules)
    return deliver(cfg, once=True, once_idle_s=1.0)[name]


def _endpoint(url: str, **options: Any) -> RemoteWriteConfig:
    # Prometheus is one tenant: no tenant header, and samples without an account are taken.
    return RemoteWriteConfig(endpoints=(RemoteWriteEndpoint(
        url=url, name="prom", tenant_header=None, **options),), poll_ms=200)


def test_counters_land_in_prometheus_with_backfill_s_values_and_ordered_timestamps(
        spark, broker, prometheus, tmp_path):
    rules, errors = load_text(COUNTER_RULES)
    assert not errors
    t = fresh_topics(broker.bootstrap, partitions=2)
    cfg = replace(job_config(t, tmp_path), remote_write=_endpoint(f"{prometheus}/api/v1/write"))
    lines = generated(1200, seed=31)
    # Two micro-batches a delivery apart: every series gets a point per batch, stamped with
    # its batch's time, and the second delivery starts where the first committed.
    first = _run_and_deliver(spark, t, cfg, rules, lines[:600])
    # The second run brings late logs too (dated before the first run's newest): counters
    # whose value grows while their event time stands still — written at the new batch's
    # time, never at a timestamp already written.
    late = generated(100, seed=37)
    lines += late
    second = _run_and_deliver(spark, t, cfg, rules, lines[600:])
    assert first.refused == second.refused == {}
    assert first.sent > 0 and second.sent > 0

    expected = backfill_samples(spark, rules, lines, tmp_path)
    assert expected
    last = 0
    for sample in expected:
        last = max(last, _stored_whole(prometheus, sample)[-1][0])
    # increase() over each counter — across the restart between the runs, without a false
    # reset — is backfill's total; histogram_quantile over the histogram rule equals the
    # quantile of backfill's buckets.
    for sample in expected:
        # At the series' own last point: increase() extrapolates past a range's last sample.
        own = _stored(prometheus, sample)[-1][0] / 1000
        assert _increase(prometheus, sample, own) == [sample["value"]], sample
    at = last / 1000
    buckets = {s["labels"]["le"]: s["value"] for s in expected if s["name"] == "latency_bucket"}
    for q in (0.1, 0.5, 0.9, 0.99):
        got = promql(prometheus,
                     f"histogram_quantile({q}, increase(latency_bucket[1h] @ {at}))")
        assert float(got[0]["value"][1]) == pytest.approx(_quantile(q, buckets), rel=1e-12)
    # Every sample the topic held was delivered once: nothing skipped, nothing refused; and
    # Prometheus's own counters agree.
    assert first.skipped == second.skipped == {}
    assert _rejected(prometheus) == 0


def _quantile(q: float, cumulative: dict[str, float]) -> float:
    """Prometheus's histogram_quantile over cumulative buckets (upper bound → count)."""
    bounds = sorted(cumulative, key=lambda le: float(le))
    total = cumulative["+Inf"]
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = cumulative[le]
        if count >= rank:
            if le == "+Inf":
                return lower  # the highest finite bound
            return lower + (float(le) - lower) * (rank - below) / (count - below)
        lower, below = float(le), count
    raise AssertionError("no +Inf bucket")


class _Flaky(http.server.BaseHTTPRequestHandler):
    """A receiver in front of Prometheus: answers 500 to the first ``failures`` requests, then
    passes every request on."""

    failures = 0
    seen = 0
    target = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen += 1
        if type(self).seen <= type(self).failures:
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"down for a while")
            return
        request = urllib.request.Request(self.target, data=body, method="POST",
                                         headers={k: v for k, v in self.headers.items()
                                                  if k.lower() != "host"})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                status, text = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            status, text = refused.code, refused.read()
        try:
            self.send_response(status)
            self.end_headers()
            self.wfile.write(text)
        except BrokenPipeError:  # the client was killed meanwhile
            pass

    def log_message(self, *_: Any) -> None:
        pass


def test_a_receiver_down_for_a_while_loses_nothing(spark, broker, prometheus, tmp_path):
    rules, _ = load_text(COUNTER_RULES)
    t = fresh_topics(broker.bootstrap, partitions=2)
    handler = type("Flaky", (_Flaky,), {"failures": 6, "seen": 0,
                                        "target": f"{prometheus}/api/v1/write"})
    lines = generated(500, seed=32)
    with serving(handler) as base:
        url = f"{base}/api/v1/write"
        cfg = replace(job_config(t, tmp_path), remote_write=_endpoint(url))
        tally = _run_and_deliver(spark, t, cfg, rules, lines)
    assert handler.seen > 6 and tally.refused == {} and tally.sent > 0
    for sample in backfill_samples(spark, rules, lines, tmp_path):
        assert _stored(prometheus, sample)[-1][1] == sample["value"], sample


def test_gauge_windows_land_when_published_with_backfill_s_values(spark, broker, prometheus,
                                                                   tmp_path):
    """A window is sent once the newest event time has passed its end by the publish delay
    (2 minutes), with the value backfill gives it; the windows after that are not sent yet
    (skipped as not final), and the topic keeps every update."""
    rules, _ = load_text(
        "rules:\n  - {id: g, name: worst_ms, kind: gauge, query: \"*\", aggregation: max, "
        "field: ms, group_by: [svc]}\n")
    t = fresh_topics(broker.bootstrap, partitions=1)
    cfg = replace(job_config(t, tmp_path), remote_write=_endpoint(f"{prometheus}/api/v1/write"))
    rng = random.Random(34)
    start = (int(time.time() * 1000) - 30 * MIN) // MIN * MIN
    first = [_log(start + i * 2_000, rng.choice("ab"), rng.randint(1, 999)) for i in range(300)]
    produce(t.bootstrap, t.topics.logs, first, t.partitions)
    run_once(spark, cfg, rules)  # 10 minutes of logs: the watermark ends 20 minutes back
    # One more log in each of those minutes: its key is looked at again in a batch whose
    # watermark makes every window final that ends 2 minutes before the newest event time.
    second = [_log(start + m * MIN + 59_000, "a", 1) for m in range(10)]
    tally = _run_and_deliver(spark, t, cfg, rules, second)
    assert tally.refused == {}

    expected = backfill_samples(spark, rules, first + second, tmp_path)
    newest = start + 299 * 2_000
    published = [s for s in expected if s["timestamp"] + MIN + 2 * MIN <= newest]
    held = [s for s in expected if s not in published]
    assert published and held
    for svc in "ab":
        stored = dict(_stored(prometheus, {"name": "worst_ms", "labels": {"svc": svc}}))
        assert stored == {s["timestamp"]: s["value"] for s in published
                          if s["labels"]["svc"] == svc}
    assert tally.skipped.get(NOT_FINAL, 0) >= len(held)

    # A late log into a published window (still open: within the grace) corrects it on the
    # topic; remote write keeps the published value and counts the correction.
    after = _run_and_deliver(spark, t, cfg, rules, [_log(start + 5_000, "b", 5_000)])
    assert (after.corrections, after.refused) == ({"g": 1}, {})  # l2m's own counters sent
    stored = dict(_stored(prometheus, {"name": "worst_ms", "labels": {"svc": "b"}}))
    assert stored[start] == next(s["value"] for s in published if s["timestamp"] == start
                                 and s["labels"]["svc"] == "b")


def _log(ts: int, svc: str, ms: int) -> bytes:
    return orjson.dumps({"@timestamp": ts, "svc": svc, "ms": ms})


class _Slow(_Flaky):
    """Passes every request on, each after ``delay`` seconds (so a kill lands mid-way)."""

    delay = 0.0

    def do_POST(self) -> None:
        time.sleep(type(self).delay)
        super().do_POST()


def test_a_kill_9_of_delivery_loses_nothing_and_re_sends_identical_samples(
        spark, broker, prometheus, tmp_path):
    """``l2m deliver`` (a process) killed with SIGKILL after some requests: the next run
    re-reads from the last commit and re-sends; every re-sent sample is identical (Prometheus
    refuses none as a duplicate with another value) and every value lands."""
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(COUNTER_RULES)
    rules, _ = load_text(COUNTER_RULES)
    t = fresh_topics(broker.bootstrap, partitions=2)
    handler = type("Slow", (_Slow,), {"failures": 0, "seen": 0, "delay": 0.3,
                                      "target": f"{prometheus}/api/v1/write"})
    lines = generated(600, seed=35)
    produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    with serving(handler) as base:
        url = f"{base}/api/v1/write"
        config = job_yaml(t, tmp_path, f"rules: [{rules_file}]",
                          f'remote_write: {{poll: 200 ms, endpoints: [{{url: "{url}", name: '
                          "prom, tenant_header: null, max_samples_per_send: 4}]}")
        cfg = load_config(config)
        run_once(spark, cfg, rules)
        process = subprocess.Popen([sys.executable, "-m", "l2m.cli", "deliver", "--config",
                                    str(config)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        wait_for(lambda: handler.seen >= 3, 60, "three requests delivered")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        killed_after = handler.seen
        tally = deliver(cfg, once=True, once_idle_s=1.0)["prom"]
    assert tally.refused == {} and tally.sent > 0
    assert handler.seen > killed_after
    for sample in backfill_samples(spark, rules, lines, tmp_path):
        assert _stored(prometheus, sample)[-1][1] == sample["value"], sample
    assert _rejected(prometheus) == 0  # Prometheus refused nothing either


class _RefusesTenant(_Flaky):
    """Answers 400 to every request of tenant ``refused``; passes the others on."""

    refused = ""

    def do_POST(self) -> None:
        if self.headers.get("X-Scope-OrgID") == type(self).refused:
            self.rfile.read(int(self.headers["Content-Length"]))
            type(self).seen += 1
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b"err-mimir-max-series-per-user: per-user series limit reached")
            return
        super().do_POST()


def test_a_tenant_refused_with_400_does_not_stop_the_others(spark, broker, prometheus,
                                                            tmp_path):
    rules, errors = load_text(
        "rules:\n"
        "  - {id: a, name: a_total, kind: counter, query: '*', aggregation: count,\n"
        "     group_by: [service], target_account: acme}\n"
        "  - {id: b, name: b_total, kind: counter, query: '*', aggregation: count,\n"
        "     group_by: [service], target_account: globex}\n")
    assert not errors
    t = fresh_topics(broker.bootstrap, partitions=1)
    handler = type("Refuses", (_RefusesTenant,), {"failures": 0, "seen": 0, "refused": "globex",
                                                  "target": f"{prometheus}/api/v1/write"})
    lines = generated(300, seed=36)
    with serving(handler) as base:
        url = f"{base}/api/v1/write"
        cfg = replace(job_config(t, tmp_path), remote_write=RemoteWriteConfig(
            endpoints=(RemoteWriteEndpoint(url=url, name="mimir", max_samples_per_send=3),),
            poll_ms=200))
        tally = _run_and_deliver(spark, t, cfg, rules, lines, "mimir")
    expected = backfill_samples(spark, rules, lines, tmp_path)
    refused = [s for s in expected if s["account"] == "globex"]
    # Each of globex's series: its value and the 0 before it (a new series), all refused.
    assert tally.refused == {("http_400", "globex"): 2 * len(refused)}
    for sample in expected:
        stored = _stored(prometheus, sample)
        if sample["account"] == "globex":
            assert stored == []
        else:
            assert stored[-1][1] == sample["value"], sample


BEFORE_CHANGE = """\
rules:
  - {id: errors, name: errors_total, kind: counter, query: "level:error", aggregation: count,
     group_by: [service]}
  - {id: bytes, name: bytes_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
  - {id: gone, name: gone_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
"""
# errors: its query changed (the same metric: it continues); bytes: its aggregation changed
# (it restarts at 0, a reset PromQL reads); gone: removed; fresh: added.
AFTER_CHANGE = """\
rules:
  - {id: errors, name: errors_total, kind: counter, query: "level:(error OR warn)",
     aggregation: count, group_by: [service]}
  - {id: bytes, name: bytes_total, kind: counter, query: "*", aggregation: sum,
     field: http.bytes, group_by: [service]}
  - {id: fresh, name: fresh_total, kind: counter, query: "*", aggregation: count,
     group_by: [region]}
"""


def _key(sample: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return sample["name"], tuple(sorted(sample["labels"].items()))


def test_a_rule_change_between_runs_lands_as_backfill_segment_by_segment(
        spark, broker, prometheus, tmp_path):
    """Rules change between two runs on one checkpoint (docs/streaming.md "Rules and
    restarts"): what Prometheus holds equals ``l2m backfill`` run segment by segment with the
    rules of each — a continued counter's increase() is both segments' sum, a restarted one's
    is too (its reset read as one), its last point the new segment's own; a removed rule's
    series end with the first segment, an added one's hold the second's."""
    before, errors = load_text(BEFORE_CHANGE)
    after, errors_after = load_text(AFTER_CHANGE)
    assert not errors and not errors_after
    t = fresh_topics(broker.bootstrap, partitions=2)
    cfg = replace(job_config(t, tmp_path), remote_write=_endpoint(f"{prometheus}/api/v1/write"))
    first, second = generated(500, seed=41), generated(400, seed=42)  # the second: late too
    tallies = [_run_and_deliver(spark, t, cfg, before, first)]
    changed_at = time.time() * 1000  # the second run's batches are stamped after this
    tallies.append(_run_and_deliver(spark, t, cfg, after, second))
    assert [tally.refused for tally in tallies] == [{}, {}]

    segments = []
    for name, rules, lines in (("one", before, first), ("two", after, second)):
        (tmp_path / name).mkdir()
        segments.append({_key(s): s for s in backfill_samples(spark, rules, lines,
                                                               tmp_path / name)})
    one, two = segments
    assert {name for name, _ in one} == {"errors_total", "bytes_total", "gone_total"}
    assert {name for name, _ in two} == {"errors_total", "bytes_total", "fresh_total"}
    both = {name for name, _ in one.keys() & two.keys()}
    assert both == {"errors_total", "bytes_total"}  # continued and restarted series: not vacuous
    for key in one.keys() | two.keys():
        sample = two.get(key) or one[key]
        points = _stored(prometheus, sample)
        own = points[-1][0] / 1000
        total = sum(s[key]["value"] for s in (one, two) if key in s)
        assert _increase(prometheus, sample, own) == [total], (key, points)
        name = key[0]
        if name == "errors_total":  # continued: the sum
            assert points[-1][1] == total, (key, points)
        elif key in two:  # restarted or new: the second segment's alone
            assert points[-1][1] == two[key]["value"], (key, points)
        else:  # removed: the first segment's, written no more
            assert points[-1][1] == one[key]["value"] and points[-1][0] < changed_at, \
                (key, points)
    assert _rejected(prometheus) == 0
