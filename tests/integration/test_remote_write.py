"""The remote-write encoder (issue 22) against a real Prometheus (Debian's 2.42, its
remote-write receiver on, 127.0.0.1): what l2m sends is stored as sent (metadata accepted with
it), and a new value at a timestamp already written is refused — why l2m's time-stamping
policy must never rewrite a timestamp."""

from __future__ import annotations

import subprocess
import time
import urllib.error

from l2m.remotewrite.client import Endpoint, Sender
from l2m.remotewrite.encode import Metadata, Series, body
from tests.integration.test_prometheus import free_port, promql, value, wait_for
from tests.support.tools import tool
from tests.support.web import get


def _ready(base: str) -> bool:
    try:
        return get(f"{base}/-/ready")[0] == 200
    except urllib.error.URLError:  # not listening yet
        return False


def test_prometheus_stores_what_the_encoder_sends_and_refuses_a_rewritten_timestamp(tmp_path):
    port = free_port()
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    prometheus = subprocess.Popen(
        [tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--web.enable-remote-write-receiver",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    sent = Sender(Endpoint(f"{base}/api/v1/write"))
    now = int(time.time() * 1000) // 1000 * 1000
    try:
        wait_for(lambda: _ready(base), 60, "Prometheus ready")
        series = [
            Series({"__name__": "l2m_test_errors_total", "service": "cart", "status": "502"},
                   [(now - 60_000, 17.0), (now - 30_000, 18.0)]),
            Series({"__name__": "l2m_test_latency_ms", "service": "cart", "empty": ""},
                   [(now - 60_000, 0.25)]),
        ]
        meta = [Metadata("l2m_test_errors_total", "counter", "Errors by service.", ""),
                Metadata("l2m_test_latency_ms", "gauge", "Worst latency.", "milliseconds")]
        got = sent.send(body(series, meta), tenant="acme")  # a tenant header Prometheus ignores
        assert (got.status, got.attempts) == (204, 1)
        at = (now - 30_000) / 1000
        assert value(base, f'l2m_test_errors_total{{service="cart",status="502"}} @ {at}') \
            == 18.0
        got = promql(base, f"l2m_test_latency_ms @ {(now - 60_000) / 1000}")
        assert [(r["metric"], float(r["value"][1])) for r in got] == [
            ({"__name__": "l2m_test_latency_ms", "service": "cart"}, 0.25)]
        # Metadata is accepted with the samples; Prometheus 2.42 does not keep what remote
        # write sends (its /api/v1/metadata shows scraped targets' only), so its encoding is
        # checked in tests/unit/remotewrite/test_remotewrite.py.
        # The same sample again is accepted; a new value at a written timestamp is not.
        again = [Series(series[0].labels, [(now - 30_000, 18.0)])]
        assert sent.send(body(again)).status == 204
        got = sent.send(body([Series(series[0].labels, [(now - 30_000, 19.0)])]))
        assert (got.status, got.attempts) == (400, 1) and "duplicate sample" in got.reason, got
        assert value(base, f'l2m_test_errors_total @ {at}') == 18.0
        # A request refused for one sample stores none of the others: Prometheus rolls back
        # what it appended (why l2m deliver splits a refused request, docs/prometheus.md).
        mixed = [Series({"__name__": "l2m_test_other_total"}, [(now - 30_000, 3.0)]),
                 Series(series[0].labels, [(now - 30_000, 20.0)])]
        assert sent.send(body(mixed)).status == 400
        assert value(base, f'l2m_test_other_total @ {at}') is None
        assert sent.send(body(mixed[:1])).status == 204
        assert value(base, f'l2m_test_other_total @ {at}') == 3.0
    finally:
        sent.close()
        prometheus.terminate()
        prometheus.wait(timeout=30)
