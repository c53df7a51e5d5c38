"""A receiver that takes no native histograms stalls nothing (review 56 F4): a real Prometheus
(Debian's 2.42, its remote-write receiver on, 127.0.0.1) started WITHOUT
``--enable-feature=native-histograms`` answers a request holding a histogram 500 "native
histograms are disabled"; ``l2m deliver`` (an endpoint's loop, records produced straight to
the metrics topic of the embedded broker) sends the floats of that request without them, so
every float sample is stored (PromQL), every histogram is counted as skipped
(``histograms_refused``), the poll is committed and the endpoint stays healthy. Prometheus
then restarted with the flag (same data, same port), the next poll after the pause sends the
histograms again: turning the flag on resumes delivery without restarting l2m."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import orjson
from confluent_kafka import Producer

from l2m.config.job import RemoteWriteConfig, RemoteWriteEndpoint
from l2m.remotewrite.encode import Series, WireHistogram, body
from l2m.remotewrite.outbox import HISTOGRAMS_REFUSED
from l2m.runtime import deliver as deliver_module
from l2m.runtime.deliver import EndpointDelivery
from l2m.semantics.exphist import DEFAULT_ZERO_THRESHOLD
from tests.integration.prometheus_server import PrometheusServer, post_write
from tests.integration.test_prometheus import promql, value
from tests.support.kafka_helpers import fresh_topics, job_config

HIST = {"schema": 3, "zero_threshold": DEFAULT_ZERO_THRESHOLD, "zero_count": 1, "count": 6,
        "sum": 21.5, "positive": [[0, 2], [8, 3]], "negative": []}


def _float(i: int, run: int) -> bytes:
    return orjson.dumps({"name": "l2m_refused_f_total", "kind": "counter",
                         "labels": {"i": str(i)}, "value": float(10 * run + i),
                         "timestamp": 0, "account": None, "rule": "f"})


def _histogram(i: int, run: int) -> bytes:
    return orjson.dumps({"name": "l2m_refused_h_ms", "kind": "counter",
                         "labels": {"i": str(i)},
                         "histogram": {**HIST, "count": 6 + run, "zero_count": 1 + run},
                         "timestamp": 0, "account": None, "rule": "h", "format": 2})


def _produce(bootstrap: str, topic: str, run: int) -> None:
    """Three floats and three histograms, interleaved, stamped now (CreateTime)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": "3"})
    for i in range(3):
        producer.produce(topic, value=_float(i, run), partition=0)
        producer.produce(topic, value=_histogram(i, run), partition=0)
    assert producer.flush(30) == 0


def test_floats_get_in_histograms_are_skipped_and_taken_again_once_the_flag_is_on(
        broker, tmp_path):
    prometheus = PrometheusServer(tmp_path)
    try:
        prometheus.start()  # no --enable-feature=native-histograms
        base = prometheus.base
        # The receiver's exact answer, the one deliver matches.
        at = int(time.time() * 1000)
        one = WireHistogram(at, 1, 1.0, 0, zero_count=1)
        probe = body([Series({"__name__": "l2m_probe"}, histograms=[one])])
        assert post_write(base, probe) == (500, "native histograms are disabled\n")

        t = fresh_topics(broker.bootstrap)
        endpoint = RemoteWriteEndpoint(url=f"{base}/api/v1/write", name="prom",
                                       tenant_header=None)
        job = replace(job_config(t, tmp_path),
                      remote_write=RemoteWriteConfig(endpoints=(endpoint,), poll_ms=200))
        lines: list[str] = []
        now = [1000.0]
        loop = EndpointDelivery(job, endpoint, threading.Event(), once_idle_s=1.0,
                                log=lines.append, clock=lambda: now[0])

        _produce(t.bootstrap, t.topics.metrics, 0)
        loop.run()
        assert loop.error is None and loop.healthy()
        tally = loop.tally.snapshot()
        assert (tally.sent, tally.skipped, tally.refused) == (3, {HISTOGRAMS_REFUSED: 3}, {})
        assert tally.requests["sent"] == 1 and tally.requests["refused"] == 1
        assert tally.lag == 0  # committed: 6 records
        assert sorted(float(r["value"][1]) for r in promql(base, "l2m_refused_f_total")) \
            == [0.0, 1.0, 2.0]
        assert promql(base, "l2m_refused_h_ms") == []
        assert lines[0] == (
            "l2m deliver: prom: the receiver does not take native histograms (HTTP 500: native "
            "histograms are disabled); they are skipped (histograms_refused) and the other "
            "samples sent, tried again every 10 minutes: start Prometheus with "
            "--enable-feature=native-histograms (Mimir: native_histograms_ingestion_enabled: "
            "true)")

        # The flag turned on (a restart of Prometheus, not of l2m); the pause over.
        prometheus.stop()
        prometheus.start("--enable-feature=native-histograms")
        _produce(t.bootstrap, t.topics.metrics, 1)
        now[0] += deliver_module.HISTOGRAMS_PAUSE_S
        loop.run()
        assert loop.error is None and loop.healthy()
        tally = loop.tally.snapshot()
        assert (tally.sent, tally.skipped) == (3 + 6, {HISTOGRAMS_REFUSED: 3})
        assert tally.lag == 0
        assert sorted(float(r["value"][1]) for r in promql(base, "l2m_refused_f_total")) \
            == [10.0, 11.0, 12.0]
        for i in range(3):
            assert value(base, f'histogram_count(l2m_refused_h_ms{{i="{i}"}})') == 7.0
        assert lines[1:] == ["l2m deliver: prom: the receiver takes native histograms again"]
    finally:
        prometheus.stop()
