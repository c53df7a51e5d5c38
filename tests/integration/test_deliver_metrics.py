"""``l2m deliver``'s ``/metrics``, ``/healthz`` and ``/readyz`` (docs/metrics.md, "Remote
write") against the embedded broker and a local receiver: samples produced straight to the
metrics topic, delivered to two endpoints — one that answers (204, a 503 once, 400 for two
tenants), one that is down (503 for ever) — and every value read by scraping the port of
``monitoring`` in the job configuration, as Prometheus would."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from l2m.config.job import MonitoringConfig, RemoteWriteConfig, RemoteWriteEndpoint
from l2m.engine.samples import CORRECTION, MARK_HEADER
from l2m.remotewrite.outbox import Tally
from l2m.runtime.deliver import deliver
from tests.integration.test_prometheus import free_port, wait_for
from tests.support.kafka_helpers import fresh_topics, job_config
from tests.support.web import get, serving

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class _Receiver(http.server.BaseHTTPRequestHandler):
    """``/ok``: 204, but 503 to acme's first request and 400 to tenants bad and worse (a
    sample out of order: split in halves down to each sample alone, each refused); ``/down``:
    503, always."""

    acme_seen = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        tenant = self.headers.get("X-Scope-OrgID")
        status, text = 204, b""
        if self.path.startswith("/down"):
            status, text = 503, b"down"
        elif tenant in ("bad", "worse"):
            status, text = 400, b"out of order sample"
        elif tenant == "acme":
            type(self).acme_seen += 1
            if type(self).acme_seen == 1:
                status, text = 503, b"busy"
        self.send_response(status)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    with serving(_Receiver) as base:
        yield base


def _sample(kind: str, account: str | None, rule: str, **labels: str) -> bytes:
    return orjson.dumps({"name": "x_total" if kind == "counter" else "g", "kind": kind,
                         "labels": labels, "value": 1.0, "timestamp": 1_795_341_600_000,
                         "account": account, "rule": rule})


# (value, mark) of each record, in order: 17 records.
RECORDS = [
    *[(_sample("counter", "acme", "a", i=str(i)), None) for i in range(6)],  # sent
    *[(_sample("counter", "bad", "b", i=str(i)), None) for i in range(3)],  # refused
    (_sample("counter", "worse", "w"), None),  # refused
    (_sample("counter", None, "l2m-input"), None),  # no account, no default tenant: skipped
    (_sample("gauge", "acme", "r1"), None), (_sample("gauge", "acme", "r1"), None),  # not final
    (_sample("gauge", "acme", "r1"), CORRECTION), (_sample("gauge", "acme", "r1"), CORRECTION),
    (_sample("gauge", "acme", "r2"), CORRECTION),
    (b"not a sample", None),  # malformed
]


def _scrape(base: str) -> Samples:
    status, text = get(f"{base}/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("l2m_remote_write_")}


def _endpoint(samples: Samples, name: str) -> Samples:
    return {(metric, tuple(kv for kv in labels if kv[0] != "endpoint")): value
            for (metric, labels), value in samples.items() if ("endpoint", name) in labels}


def test_deliver_serves_its_metrics_health_and_readiness(broker, receiver, tmp_path: Path):
    t = fresh_topics(broker.bootstrap)
    producer = Producer({"bootstrap.servers": t.bootstrap, "linger.ms": 50, "log_level": "3"})
    for value, mark in RECORDS:
        producer.produce(t.topics.metrics, value=value, partition=0,
                         headers=[(MARK_HEADER, mark.encode())] if mark else None)
    producer.flush(30)
    port = free_port()
    cfg = replace(
        job_config(t, tmp_path),
        remote_write=RemoteWriteConfig(endpoints=(
            RemoteWriteEndpoint(url=f"{receiver}/ok/api/v1/write", name="ok"),
            RemoteWriteEndpoint(url=f"{receiver}/down/api/v1/write", name="down")),
            poll_ms=200),
        # One tenant and one rule named: the others are __other__.
        monitoring=MonitoringConfig(port=port, host="127.0.0.1", top_accounts=1))
    stop = threading.Event()
    result: list[dict[str, Tally]] = []
    started = time.time()
    thread = threading.Thread(target=lambda: result.append(deliver(cfg, stop=stop)),
                              daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        def settled() -> Samples | None:
            try:
                got = _scrape(base)
            except urllib.error.URLError:  # not listening yet
                return None
            ok, down = _endpoint(got, "ok"), _endpoint(got, "down")
            done = ok.get(("l2m_remote_write_requests_total", (("outcome", "refused"),))) == 6 \
                and ok.get(("l2m_remote_write_lag_records", ())) == 0 \
                and down.get(("l2m_remote_write_lag_records", ())) == len(RECORDS)
            return got if done else None

        got = wait_for(settled, 60, "both endpoints settled")
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (200, "ready\n")
        ok = _endpoint(got, "ok")
        last = ok.pop(("l2m_remote_write_last_success_timestamp_seconds", ()))
        assert started <= last <= time.time()
        assert ok == {
            ("l2m_remote_write_samples_sent_total", ()): 6.0,
            # bad's request of 3 is refused, then its halves (1, 2), then the 2's halves:
            # 5 requests, 3 samples refused alone; worse's request of 1: 1 and 1.
            ("l2m_remote_write_samples_refused_total",
             (("reason", "out_of_order"), ("tenant", "bad"))): 3.0,
            ("l2m_remote_write_samples_refused_total",
             (("reason", "out_of_order"), ("tenant", "__other__"))): 1.0,
            ("l2m_remote_write_samples_skipped_total", (("reason", "correction"),)): 3.0,
            ("l2m_remote_write_samples_skipped_total", (("reason", "malformed"),)): 1.0,
            ("l2m_remote_write_samples_skipped_total", (("reason", "no_tenant"),)): 1.0,
            ("l2m_remote_write_samples_skipped_total", (("reason", "not_final"),)): 2.0,
            ("l2m_remote_write_corrections_dropped_total", (("rule", "r1"),)): 2.0,
            ("l2m_remote_write_corrections_dropped_total", (("rule", "__other__"),)): 1.0,
            # acme's one request: a 503 (retried), then a 204.
            ("l2m_remote_write_requests_total", (("outcome", "sent"),)): 1.0,
            ("l2m_remote_write_requests_total", (("outcome", "refused"),)): 6.0,
            ("l2m_remote_write_requests_total", (("outcome", "retried"),)): 1.0,
            ("l2m_remote_write_requests_total", (("outcome", "auth_failed"),)): 0.0,
            ("l2m_remote_write_lag_records", ()): 0.0,
        }
        # The endpoint that is down holds every record, retries, and has sent nothing; the
        # other one was not held back by it.
        down = _endpoint(got, "down")
        assert down[("l2m_remote_write_samples_sent_total", ())] == 0.0
        assert down[("l2m_remote_write_last_success_timestamp_seconds", ())] == 0.0
        assert down[("l2m_remote_write_requests_total", (("outcome", "sent"),))] == 0.0
        assert down[("l2m_remote_write_requests_total", (("outcome", "refused"),))] == 0.0
        assert down[("l2m_remote_write_requests_total", (("outcome", "retried"),))] >= 1.0
        assert down[("l2m_remote_write_lag_records", ())] == len(RECORDS)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    # What deliver() returns is what /metrics said; the port is closed with it.
    tallies = result[0]
    assert (tallies["ok"].sent, tallies["ok"].lag, tallies["down"].lag) == (6, 0, len(RECORDS))
    with pytest.raises(urllib.error.URLError):
        get(f"{base}/metrics")
