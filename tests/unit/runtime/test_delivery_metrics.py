"""``l2m deliver``'s own metrics (l2m.runtime.delivermetrics, no JVM, no broker): every
family rendered from recorded tallies with exact values, the tenant and rule labels bounded to
the top N with the rest as ``__other__`` (monotonic, sticky), consistent snapshots while an
endpoint's thread counts, and the HTTP endpoint shared with ``l2m run``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from l2m.config.job import JobConfig, RemoteWriteEndpoint, Topics
from l2m.remotewrite.outbox import CORRECTED, NOT_FINAL, Tally
from l2m.runtime.deliver import EndpointDelivery
from l2m.runtime.delivermetrics import DeliveryTelemetry, TopLabels
from l2m.runtime.endpoint import Endpoint
from l2m.version import __version__
from tests.support.web import get


@dataclass
class Loop:
    """An endpoint's delivery as the metrics see it."""

    name: str
    tally: Tally = field(default_factory=Tally)
    ready: bool = True
    alive: bool = True

    def healthy(self) -> bool:
        return self.alive


def scrape(t: DeliveryTelemetry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition: (name, sorted labels) → value."""
    text = generate_latest(t.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def of(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str
       ) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def test_every_family_from_the_tallies_with_its_endpoint_label():
    mimir = Loop("mimir")
    m = mimir.tally
    m.accept(120)
    m.refuse("out_of_order", "acme", 3)
    m.refuse("http_400", "acme", 1)
    m.refuse("too_old", None, 2)  # no tenant header
    m.skip(NOT_FINAL, 5)
    m.correct("cpu")
    m.correct("cpu")
    for outcome_status in (204, 204, 400):
        m.answered(outcome_status, 1_700_000_000.5 if outcome_status == 204 else 9e9)
    m.retried()
    m.set_lag(42)
    quiet = Loop("prom")
    t = DeliveryTelemetry([mimir, quiet], top=20)
    got = scrape(t)
    assert of(got, "l2m_remote_write_samples_sent_total") == {
        (("endpoint", "mimir"),): 120.0, (("endpoint", "prom"),): 0.0}
    assert of(got, "l2m_remote_write_samples_refused_total") == {
        (("endpoint", "mimir"), ("reason", "http_400"), ("tenant", "acme")): 1.0,
        (("endpoint", "mimir"), ("reason", "out_of_order"), ("tenant", "acme")): 3.0,
        (("endpoint", "mimir"), ("reason", "too_old"), ("tenant", "")): 2.0}
    assert of(got, "l2m_remote_write_samples_skipped_total") == {
        (("endpoint", "mimir"), ("reason", CORRECTED)): 2.0,
        (("endpoint", "mimir"), ("reason", NOT_FINAL)): 5.0}
    assert of(got, "l2m_remote_write_corrections_dropped_total") == {
        (("endpoint", "mimir"), ("rule", "cpu")): 2.0}
    assert of(got, "l2m_remote_write_requests_total") == {
        (("endpoint", "mimir"), ("outcome", "sent")): 2.0,
        (("endpoint", "mimir"), ("outcome", "refused")): 1.0,
        (("endpoint", "mimir"), ("outcome", "retried")): 1.0,
        (("endpoint", "prom"), ("outcome", "sent")): 0.0,
        (("endpoint", "prom"), ("outcome", "refused")): 0.0,
        (("endpoint", "prom"), ("outcome", "retried")): 0.0,
        (("endpoint", "mimir"), ("outcome", "auth_failed")): 0.0,
        (("endpoint", "prom"), ("outcome", "auth_failed")): 0.0}
    # The refused answer does not move the last success.
    assert of(got, "l2m_remote_write_last_success_timestamp_seconds") == {
        (("endpoint", "mimir"),): 1_700_000_000.5, (("endpoint", "prom"),): 0.0}
    assert of(got, "l2m_remote_write_lag_records") == {
        (("endpoint", "mimir"),): 42.0, (("endpoint", "prom"),): 0.0}
    assert of(got, "l2m_build_info") == {(("version", __version__),): 1.0}
    text = generate_latest(t.registry).decode()
    assert "# TYPE l2m_remote_write_samples_sent_total counter" in text
    assert "# TYPE l2m_remote_write_lag_records gauge" in text


def test_refusing_tenants_are_bounded_to_the_top_n_and_the_rest_summed():
    loop = Loop("mimir")
    for tenant, n in (("a", 50), ("b", 40), ("c", 3), ("d", 2)):
        loop.tally.refuse("too_old", tenant, n)
    loop.tally.refuse("out_of_order", "d", 1)
    for rule, n in (("r1", 9), ("r2", 1), ("r3", 1)):
        for _ in range(n):
            loop.tally.correct(rule)
    t = DeliveryTelemetry([loop], top=2)
    got = scrape(t)
    assert of(got, "l2m_remote_write_samples_refused_total") == {
        (("endpoint", "mimir"), ("reason", "too_old"), ("tenant", "a")): 50.0,
        (("endpoint", "mimir"), ("reason", "too_old"), ("tenant", "b")): 40.0,
        (("endpoint", "mimir"), ("reason", "too_old"), ("tenant", "__other__")): 5.0,
        (("endpoint", "mimir"), ("reason", "out_of_order"), ("tenant", "__other__")): 1.0}
    # Ties by name: r2 before r3.
    assert of(got, "l2m_remote_write_corrections_dropped_total") == {
        (("endpoint", "mimir"), ("rule", "r1")): 9.0, (("endpoint", "mimir"), ("rule", "r2")): 1.0,
        (("endpoint", "mimir"), ("rule", "__other__")): 1.0}


def test_the_bound_is_sticky_and_every_counter_monotonic():
    book = TopLabels(top=1)
    assert book.view({("x", "a"): 5}) == {("x", "a"): 5}
    # b overtakes a: both named now (a stays while at most 2 × top are named); b's own
    # series starts with its total; nothing was counted outside the named ones.
    assert book.view({("x", "a"): 5, ("x", "b"): 9}) == {("x", "a"): 5, ("x", "b"): 9}
    # c comes in below: summed into __other__, and only what it counts from now on.
    assert book.view({("x", "a"): 5, ("x", "b"): 9, ("x", "c"): 2}) == {
        ("x", "a"): 5, ("x", "b"): 9, ("x", "__other__"): 2}
    # c overtakes them all: more than 2 × top named, so only the top stays named; what a
    # counts from the moment it leaves goes to __other__, which never goes down.
    view = book.view({("x", "a"): 6, ("x", "b"): 9, ("x", "c"): 20})
    assert view == {("x", "c"): 20, ("x", "__other__"): 3}
    assert book.view({("x", "a"): 8, ("x", "b"): 9, ("x", "c"): 20}) == {
        ("x", "c"): 20, ("x", "__other__"): 5}
    # With no room at all, everything is __other__.
    assert TopLabels(top=0).view({("x", "a"): 1, ("y", "b"): 2}) == {
        ("x", "__other__"): 1, ("y", "__other__"): 2}


def test_snapshots_stay_consistent_while_the_endpoint_thread_counts():
    tally = Tally()
    done = threading.Event()

    def count() -> None:
        i = 0
        while not done.is_set():
            i += 1
            # New keys while the readers copy: dicts that grow.
            tally.refuse("too_old", f"t{i % 2000}", 1)
            tally.correct(f"r{i % 2000}")
            tally.accept(1)

    writer = threading.Thread(target=count)
    writer.start()
    try:
        t = DeliveryTelemetry([Loop("e", tally)], top=5)
        sent = 0
        for _ in range(50):
            snap = tally.snapshot()
            # A correction is counted twice (skipped, and per rule) under one lock: a
            # snapshot never sees one without the other.
            assert sum(snap.corrections.values()) == snap.skipped.get(CORRECTED, 0)
            assert snap.sent >= sent
            sent = snap.sent
            scrape(t)  # never "dictionary changed size during iteration"
        assert sent > 0
    finally:
        done.set()
        writer.join()


def test_the_endpoint_serves_delivery_metrics_health_and_readiness():
    loop = Loop("mimir", ready=False)
    loop.tally.accept(7)
    t = DeliveryTelemetry([loop], top=20)
    with Endpoint(t, "127.0.0.1", 0) as endpoint:
        base = f"http://127.0.0.1:{endpoint.port}"
        assert get(f"{base}/readyz") == (503, "not ready\n")
        loop.ready = True
        assert get(f"{base}/readyz") == (200, "ready\n")
        assert get(f"{base}/healthz") == (200, "ok\n")
        status, body = get(f"{base}/metrics")
        assert status == 200
        assert 'l2m_remote_write_samples_sent_total{endpoint="mimir"} 7.0' in body
        loop.alive = False
        assert get(f"{base}/healthz") == (503, "unhealthy\n")
        t.stopping = True
        assert get(f"{base}/readyz") == (503, "not ready\n")


class Consumer:
    """What the lag reads of a consumer: librdkafka's cached high watermarks (-1001 before
    the first fetch) and the broker's answer."""

    def __init__(self, cached: dict[int, int], asked: dict[int, int]) -> None:
        self.cached, self.asked = cached, asked

    def get_watermark_offsets(self, tp: Any, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        return (0, (self.cached if cached else self.asked)[tp.partition])


def test_the_lag_is_the_ends_minus_what_the_endpoint_committed():
    loop = EndpointDelivery(JobConfig(topics=Topics(metrics="metrics")),
                            RemoteWriteEndpoint(url="http://127.0.0.1:9/w", name="e"),
                            threading.Event())
    loop._partitions = [0, 1, 2]
    loop._committed = {0: 10, 1: 5, 2: 0}
    # Partition 2 has not been fetched yet: its end is asked of the broker.
    loop._live = Consumer(cached={0: 25, 1: 5, 2: -1001}, asked={0: 99, 1: 99, 2: 7})
    loop._refresh_lag()
    assert loop.tally.lag == 15 + 0 + 7
    # A partition whose end cannot be had keeps the last seen.
    loop._live = Consumer(cached={0: 30, 1: 5, 2: -1001}, asked={0: 99, 1: 99, 2: -1})
    loop._refresh_lag()
    assert loop.tally.lag == 20 + 0 + 7
