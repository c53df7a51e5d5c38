"""``l2m deliver`` as it fails (issue 53, "Tested as it fails"): a real Prometheus behind a
receiver that misbehaves on cue (tests/support/receiver.py) — slow answers, 5xx for a while,
401 for a while, 400 for any request holding marked samples — poison records interleaved with
the streaming job's good ones on the metrics topic, and a kill -9 of ``l2m deliver`` in the
middle of a poll, then a restart. What PromQL reads of every good series equals
``l2m backfill``; every poison record is skipped and counted once, by its reason, by the
process that delivered past it (on ``/metrics`` and in the summary line); no (series,
timestamp) is ever sent with two values; the 401 phase (until l2m reads its rotated token)
commits nothing while it lasts, then everything is delivered."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from l2m.engine.samples import MARK_HEADER, NEW
from l2m.rules.loader import load_text
from tests.integration.test_deliver import _increase, _rejected, _stored_whole
from tests.integration.test_deliver_metrics import Samples, _endpoint, _scrape
from tests.integration.test_prometheus import free_port, promql
from tests.integration.test_streaming import backfill_samples, generated, run_once
from tests.support.kafka_helpers import fresh_topics, job_config, job_yaml, produce
from tests.support.receiver import Labels, Received, Receiver
from tests.support.web import get

SEEDS = (53, 54)  # the two runs' logs (tests/support: LogGenerator)
ACCOUNT = "acme"
# The good rules: every kind of counter state, all for one account (Prometheus is one tenant:
# the tenant header keeps l2m's own metrics apart only at a multi-tenant receiver).
RULES = f"""\
rules:
  - {{id: all, name: logs_total, kind: counter, query: "*", aggregation: count,
     group_by: [service], target_account: {ACCOUNT}}}
  - {{id: bytes, name: bytes_total, kind: counter, query: "_exists_:http.bytes",
     aggregation: sum, field: http.bytes, group_by: [service], target_account: {ACCOUNT}}}
  - {{id: lat, name: latency, kind: counter, query: "_exists_:http.duration_ms",
     aggregation: histogram, field: http.duration_ms, buckets: [10, 50, 250],
     target_account: {ACCOUNT}}}
"""

# Skip reasons (docs/prometheus.md, "Delivery guarantees and what is counted").
MALFORMED, INVALID_LABEL, INVALID_TENANT = "malformed", "invalid_label", "invalid_tenant"
REFUSE = "refuse-me"  # the label value the receiver answers 400 for
OLD_TOKEN, NEW_TOKEN = "s3cr3t-old-2c9f", "s3cr3t-new-7a41"  # l2m's bearer token, rotated
T0 = 1_795_341_600_000


def _sample(**fields: Any) -> dict[str, Any]:
    """A sample as l2m writes it, but for what ``fields`` change."""
    return {"name": "poison_total", "kind": "counter", "labels": {"poison": "1"},
            "value": 1.0, "timestamp": T0, "account": ACCOUNT, "rule": "poison", **fields}


# (value, headers, reason): records delivery cannot send, each skipped and counted.
POISON: list[tuple[bytes, list[tuple[str, bytes]] | None, str]] = [
    (b'{"name": "not JSON', None, MALFORMED),
    (b"[1, 2, 3]", None, MALFORMED),  # JSON, not an object
    (orjson.dumps(_sample(account=42)), None, MALFORMED),  # beside strings, sorted() raised
    (orjson.dumps(_sample(account=[ACCOUNT])), None, MALFORMED),
    (orjson.dumps(_sample(account="")), None, MALFORMED),
    (orjson.dumps(_sample(name="")), None, MALFORMED),
    (orjson.dumps(_sample(labels={"poison": 1})), None, MALFORMED),  # not a string
    (orjson.dumps(_sample(value="many")), None, MALFORMED),
    (orjson.dumps(_sample(value=[1.0])), None, MALFORMED),
    (orjson.dumps(_sample(timestamp="soon")), None, MALFORMED),
    (orjson.dumps(_sample(kind="summary")), None, MALFORMED),
    (orjson.dumps(_sample(labels={"poison": "1", "bad-name": "x"})), None, INVALID_LABEL),
    (orjson.dumps(_sample(labels={"poison": "1", "__name__": "x"})), None, INVALID_LABEL),
    (orjson.dumps(_sample()), [(MARK_HEADER, b"\xff\xfe")], MALFORMED),  # a mark not UTF-8
    (orjson.dumps(_sample(account="東京")), None, INVALID_TENANT),  # no latin-1 header
    (orjson.dumps(_sample(account=f"{ACCOUNT}\nX-Injected: 1")), None, INVALID_TENANT),
]


def _refused(i: int) -> tuple[bytes, list[tuple[str, bytes]] | None, int]:
    """A good sample the receiver refuses (its series holds :data:`REFUSE`), and how many
    samples it is sent as: a new counter's is preceded by its 0."""
    new = i % 2 == 0
    value = orjson.dumps(_sample(name="refused_total", labels={"case": REFUSE, "i": str(i)},
                                 value=float(i + 1), rule="refused"))
    return value, [(MARK_HEADER, NEW.encode())] if new else None, 2 if new else 1


def _produce(bootstrap: str, topic: str,
             records: list[tuple[bytes, list[tuple[str, bytes]] | None]]) -> list[int]:
    """Produce ``records`` to partition 0 of the metrics topic: their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": "3"})
    offsets: list[int] = [-1] * len(records)

    def delivered(error: Any, message: Any, i: int) -> None:
        assert error is None, error
        offsets[i] = message.offset()

    for i, (value, headers) in enumerate(records):
        producer.produce(topic, value=value, partition=0, headers=headers,
                         on_delivery=lambda e, m, i=i: delivered(e, m, i))
    assert producer.flush(30) == 0
    assert min(offsets) >= 0
    return offsets


def _committed(bootstrap: str, group: str, topic: str) -> int:
    """The delivery group's committed offset on the metrics topic (0: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "log_level": "3"})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return max(tp.offset, 0)
    finally:
        consumer.close()


def _start(command: list[str], err: Path) -> subprocess.Popen[bytes]:
    """``l2m deliver`` as a process of its own, its stderr in ``err``."""
    with err.open("w") as stream:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stream)


def _await(process: subprocess.Popen[bytes], err: Path, condition: Any, timeout: float,
           what: str) -> None:
    """Until ``condition()`` holds, at most ``timeout`` s; failing at once, with the
    process's stderr (``err``), if it ended meanwhile."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"l2m deliver ended with {process.returncode} before {what}:"
                                 f"\n{err.read_text()[-2000:]}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _metrics(base: str) -> Samples | None:
    """Endpoint prom's ``l2m_remote_write_*`` samples from l2m deliver's /metrics (None: not
    served yet)."""
    try:
        return _endpoint(_scrape(base), "prom")
    except (urllib.error.URLError, ConnectionError):
        return None


def _lag(base: str) -> float | None:
    got = _metrics(base)
    return None if got is None else got.get(("l2m_remote_write_lag_records", ()))


def _labelled(got: Samples, metric: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (name, labels), value in got.items() if name == metric and value}


def _expected(got: Samples, poison: list[tuple[int, str]], refused: list[tuple[int, int]],
              accepted: list[Received]) -> None:
    """What one ``l2m deliver`` process counted on /metrics (``got``) is exactly what it read:
    ``poison`` (offset, reason) skipped by reason, ``refused`` (offset, samples) refused as
    http_400, and the samples of its ``accepted`` requests sent; no unexpected error."""
    assert _labelled(got, "l2m_remote_write_samples_skipped_total") == {
        (("reason", reason),): float(n) for reason, n in Counter(r for _, r in poison).items()}
    assert _labelled(got, "l2m_remote_write_samples_refused_total") == {
        (("reason", "http_400"), ("tenant", ACCOUNT)): float(sum(n for _, n in refused))}
    assert got[("l2m_remote_write_samples_sent_total", ())] == sum(r.samples for r in accepted)
    assert _labelled(got, "l2m_remote_write_errors_total") == {}


def _points(requests: list[Received]) -> set[tuple[Labels, int]]:
    return {(labels, at) for r in requests for labels, points in r.series for at, _ in points}


def test_delivery_through_faults_poison_and_a_kill_9_lands_as_backfill(
        spark, broker, prometheus, tmp_path: Path):
    print(f"seeds {SEEDS}")  # fixed: the logs, the poison and the script are deterministic
    started = time.monotonic()
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(RULES)
    rules, errors = load_text(RULES)
    assert not errors
    t = fresh_topics(broker.bootstrap, partitions=2)
    metrics_topic, group = t.topics.metrics, "faults-prom"
    run_cfg = job_config(t, tmp_path)
    lines = [generated(300, seed=seed) for seed in SEEDS]
    poison: list[tuple[int, str]] = []  # (offset, reason)
    refused: list[tuple[int, int]] = []  # (offset, samples sent for it)

    def chunk(k: int) -> int:
        """The k-th set of poison records and refused samples, produced: the topic's end
        after it (tansu's ListOffsets may report less)."""
        made = [_refused(2 * k + i) for i in range(2)]
        offsets = _produce(t.bootstrap, metrics_topic,
                           [(value, headers) for value, headers, _ in POISON + made])
        poison.extend((at, reason) for at, (_, _, reason) in zip(offsets, POISON, strict=False))
        refused.extend((at, n) for at, (_, _, n) in zip(offsets[len(POISON):], made,
                                                        strict=True))
        return offsets[-1] + 1

    def run(k: int) -> None:
        produce(t.bootstrap, t.topics.logs, lines[k], t.partitions)
        run_once(spark, run_cfg, rules)

    # The metrics topic, interleaved: poison and refused samples, the first run's samples,
    # more of both; later (below) the same again with the second run.
    chunk(0)
    run(0)
    delivered_first = chunk(1)

    port = free_port()
    (tmp_path / "deliver").mkdir()
    token = tmp_path / "token"
    token.write_text(f"{OLD_TOKEN}\n")
    with Receiver(f"{prometheus}/api/v1/write") as receiver:
        config = job_yaml(
            t, tmp_path / "deliver", f"rules: [{rules_file}]",
            f"remote_write: {{group_id: faults, poll: 200 ms, endpoints: [{{url: "
            f'"{receiver.url}", name: prom, tenant_header: X-Scope-OrgID, default_tenant: l2m, '
            f"max_samples_per_send: 3, timeout: 5 seconds, bearer_token_file: {token}}}]}}",
            f"monitoring: {{port: {port}, host: 127.0.0.1}}")
        command = [sys.executable, "-m", "l2m", "deliver", "--config", str(config)]
        base = f"http://127.0.0.1:{port}"

        # The first process (eras 1 and 2): 5xx for its first two requests, 400 for what holds
        # REFUSE; it delivers and commits what the topic holds, counted exactly once.
        receiver.era, receiver.refuse_value = 1, REFUSE
        receiver.next.extend([503, 500])
        first_err = tmp_path / "first.err"
        first = _start(command, first_err)
        try:
            _await(first, first_err,
                   lambda: _committed(t.bootstrap, group, metrics_topic) == delivered_first,
                   60, "the first part delivered and committed")
            _await(first, first_err, lambda: _lag(base) == 0, 30, "lag 0 on /metrics")
            got = _metrics(base)
            assert got is not None
            assert [r.status for r in receiver.requests(1)][:2] == [503, 500]
            _expected(got, poison, refused, [r for r in receiver.requests(1)
                                             if r.forwarded and 200 <= r.status < 300])

            # Then the receiver is down (503) while the rest is written; it comes back slow
            # (0.3 s an answer, within the 5 s timeout), and the process is killed once three
            # requests got through: in the middle of a poll.
            receiver.era, receiver.hold = 2, 503
            chunk(2)
            run(1)
            end = chunk(3)
            receiver.delay_s, receiver.hold = 0.3, None
            _await(first, first_err,
                   lambda: sum(r.forwarded for r in receiver.requests(2)) >= 3, 60,
                   "three requests forwarded after the outage")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        receiver.delay_s = 0.0
        resumed = _committed(t.bootstrap, group, metrics_topic)
        assert delivered_first <= resumed < end  # killed after a commit, before the last
        assert any(r.status == 503 for r in receiver.requests(2))

        # The restart (era 3), under a 401 for a while: the receiver takes a new token, l2m
        # still has the old one. Retried, nothing committed, nothing forwarded, the lag stays;
        # then the token file is rotated, and l2m's next retry carries the new one; 5xx for
        # three requests, then the receiver answers.
        receiver.era, receiver.token = 3, NEW_TOKEN
        err = tmp_path / "second.err"
        second = _start(command, err)
        try:
            _await(second, err, lambda: len(receiver.requests(3)) >= 4, 60,
                   "four requests answered 401")
            _await(second, err, lambda: (_lag(base) or 0) > 0, 30, "the lag on /metrics")
            time.sleep(1.0)  # the 401 phase goes on: still nothing may be committed
            assert _committed(t.bootstrap, group, metrics_topic) == resumed
            assert (_lag(base) or 0) > 0
            during = receiver.requests(3)
            assert {r.status for r in during} == {401} and not any(r.forwarded for r in during)
            # Retried as it was, never split: a 401 is about the credentials, not the samples.
            assert len({r.series for r in during}) == 1
            # A Retry-After that is no delay ("²": str.isdigit takes it, float does not) is
            # ignored, never an error of the endpoint.
            receiver.next.extend([503, (503, {"Retry-After": "\u00b2"}), 500])
            rotated = token.with_suffix(".new")
            rotated.write_text(f"{NEW_TOKEN}\n")
            rotated.replace(token)  # atomically, as a Secret volume is updated

            _await(second, err, lambda: _committed(t.bootstrap, group, metrics_topic) == end, 60,
                   "every record delivered and committed")
            _await(second, err, lambda: _lag(base) == 0, 30, "lag 0 on /metrics")
            got = _metrics(base)
            assert got is not None
            assert get(f"{base}/healthz") == (200, "ok\n")
            shown_metrics = get(f"{base}/metrics")[1]
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=60)
    assert second.returncode == 0, err.read_text()
    for secret in (OLD_TOKEN, NEW_TOKEN):  # no credential in any output
        assert secret not in err.read_text() + first_err.read_text() + shown_metrics

    # Counted once by the process that read it: every poison record and every refused sample
    # from the restart's offset on (those before it: the first process's, checked above).
    answers = receiver.requests(3)
    accepted = [r for r in answers if r.forwarded and 200 <= r.status < 300]
    again = [(at, reason) for at, reason in poison if at >= resumed]
    assert {reason for _, reason in again} == {MALFORMED, INVALID_LABEL, INVALID_TENANT}
    turned_down = [(at, n) for at, n in refused if at >= resumed]
    _expected(got, again, turned_down, accepted)
    # Every answer counted once, as the receiver gave it: 401s as credentials refused (each
    # attempt), 5xx as retried, 400s (the halves of REFUSE's requests) as refused.
    unauthorized = sum(r.status == 401 for r in answers)
    assert _labelled(got, "l2m_remote_write_requests_total") == {
        (("outcome", outcome),): float(n) for outcome, n in (
            ("sent", len(accepted)), ("refused", sum(r.status == 400 for r in answers)),
            ("retried", sum(r.status >= 500 for r in answers)),
            ("auth_failed", unauthorized)) if n}
    summary = [line for line in err.read_text().splitlines()
               if line.startswith("l2m deliver: prom: sent ")][-1]
    shown = re.search(r"skipped [\d,]+ \(([^)]*)\)", summary)
    assert shown is not None, summary
    assert dict(part.split(": ") for part in shown.group(1).split(", ")) == {
        reason: f"{n:,}" for reason, n in Counter(r for _, r in again).items()}, summary
    refused_n = sum(n for _, n in turned_down)
    assert f"refused {refused_n:,} (http_400 for {ACCOUNT}: {refused_n:,})" in summary
    assert f"credentials refused {unauthorized:,} times" in summary

    # Nothing sent twice with two values, though much was sent twice: the killed process's
    # uncommitted requests again by the restart, the refused requests' halves.
    assert receiver.conflicts() == {}
    assert _points([r for r in receiver.requests(2) if r.forwarded]) & _points(accepted)
    assert unauthorized >= 4

    # What Prometheus holds of every good series is backfill's, whole: its first point the 0
    # before its first value, its timestamps increasing, increase() over its life its total.
    expected = backfill_samples(spark, rules, lines[0] + lines[1], tmp_path)
    assert len(expected) > 10
    for sample in expected:
        points = _stored_whole(prometheus, sample)
        assert _increase(prometheus, sample, points[-1][0] / 1000) == [sample["value"]], sample
    # Neither the refused series nor any poison got in; Prometheus refused nothing itself.
    assert promql(prometheus, "refused_total") == []
    assert promql(prometheus, '{poison="1"}') == []
    assert _rejected(prometheus) == 0
    print(f"took {time.monotonic() - started:.1f} s; the first process committed "
          f"{delivered_first} records, was killed at {resumed} of {end} after forwarding "
          f"{sum(r.forwarded for r in receiver.requests(2))} requests of its second part; the "
          f"restart had {unauthorized} answered 401, {len(accepted)} accepted")
