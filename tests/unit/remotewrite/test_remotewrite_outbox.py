"""The time-stamping policy and request building of remote write
(l2m.remotewrite.outbox): what is sent, with which timestamp, to which tenant, in which order,
and what is skipped or refused — decoded back with the protobuf runtime."""

from __future__ import annotations

import cramjam
import orjson
import pytest

from l2m.engine.samples import CORRECTION, FINAL
from l2m.remotewrite.encode import Metadata
from l2m.remotewrite.outbox import (
    CORRECTED,
    FUTURE,
    FUTURE_MS,
    MALFORMED,
    NO_TENANT,
    NOT_FINAL,
    OTHER_ACCOUNT,
    Outbox,
    Route,
    Tally,
    metadata,
    refusal_reason,
    settle,
    summary,
)
from l2m.rules.loader import load_text
from tests.unit.remotewrite.test_remotewrite import decode

W = 1_795_341_600_000


def sample(name: str = "x_total", kind: str = "counter", value: float | str = 1.0,
           ts: int = W, account: str | None = "acme", rule: str = "r", **labels: str) -> bytes:
    return orjson.dumps({"name": name, "kind": kind, "labels": labels, "value": value,
                         "timestamp": ts, "account": account, "rule": rule})


def sent(outbox: Outbox) -> list[tuple[str | None, list[tuple[dict, list[tuple[int, float]]]]]]:
    """(tenant, [(labels, [(ts, value)])]) of every request, decoded."""
    out = []
    for request in outbox.requests():
        decoded = decode(bytes(cramjam.snappy.decompress_raw(request.body)))
        out.append((request.tenant, [
            ({lb.name: lb.value for lb in ts.labels},
             [(s.timestamp, s.value) for s in ts.samples]) for ts in decoded.timeseries]))
        assert request.samples == sum(len(ts.samples) for ts in decoded.timeseries)
    return out


def test_counters_take_their_record_time_and_gauges_their_window_only_when_final():
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    box.add(sample(value=3.0, ts=W - 5), record_ms=W + 10_000, mark=None)
    box.add(sample(value=4.0, ts=W - 5), record_ms=W + 20_000, mark=None)  # a late log
    box.add(sample("g", "gauge", 7.0, ts=W), record_ms=W + 30_000, mark=None)
    box.add(sample("g", "gauge", 8.0, ts=W), record_ms=W + 40_000, mark=FINAL)
    box.add(sample("g", "gauge", 9.0, ts=W), record_ms=W + 50_000, mark=CORRECTION)
    assert sent(box) == [("acme", [
        ({"__name__": "g"}, [(W, 8.0)]),
        ({"__name__": "x_total"}, [(W + 10_000, 3.0), (W + 20_000, 4.0)]),
    ])]
    assert tally.skipped == {NOT_FINAL: 1, CORRECTED: 1}
    assert tally.corrections == {"r": 1}


def test_a_record_read_twice_is_one_sample_and_values_that_are_not_numbers_are_doubles():
    box = Outbox(Route(), 100, Tally())
    for _ in range(2):  # a replayed batch, or a poll re-read after a crash
        box.add(sample(value=5.0), record_ms=W, mark=None)
    box.add(sample(name="s_total", value="+Inf"), record_ms=W, mark=None)
    ((_, series),) = sent(box)
    assert series == [({"__name__": "s_total"}, [(W, float("inf"))]),
                      ({"__name__": "x_total"}, [(W, 5.0)])]


@pytest.mark.parametrize(("route", "expected", "skipped"), [
    (Route(), {"acme": 1, "globex": 1}, {NO_TENANT: 1}),
    (Route(tenants={"acme": "t-acme"}, default_tenant="ops"),
     {"t-acme": 1, "globex": 1, "ops": 1}, {}),
    (Route(accounts=frozenset({"globex"})), {"globex": 1}, {OTHER_ACCOUNT: 1, NO_TENANT: 1}),
    (Route(tenant_header=False), {None: 3}, {}),
])
def test_each_account_goes_to_its_tenant(route, expected, skipped):
    tally = Tally()
    box = Outbox(route, 100, tally)
    for account in ("acme", "globex", None):
        box.add(sample(account=account, a=str(account)), record_ms=W, mark=None)
    got = {tenant: sum(len(points) for _, points in series) for tenant, series in sent(box)}
    assert (got, tally.skipped) == (expected, skipped)


def test_requests_hold_at_most_max_samples_and_a_split_series_keeps_its_order():
    box = Outbox(Route(), 3, Tally())
    for i in range(5):
        box.add(sample(value=float(i)), record_ms=W + i, mark=None)
    box.add(sample(name="y_total"), record_ms=W, mark=None)
    requests = sent(box)
    points = [p for _, series in requests for _, ps in series for p in ps]
    assert [len([p for _, ps in series for p in ps]) for _, series in requests] == [3, 3]
    assert points[:5] == [(W + i, float(i)) for i in range(5)]


def test_metadata_goes_with_a_tenant_s_first_request():
    rules, errors = load_text(
        "rules:\n"
        "  - {id: r, name: x_total, kind: counter, query: '*', aggregation: count,\n"
        "     description: Things counted., unit: bytes}\n"
        "  - {id: h, name: lat, kind: counter, query: '*', aggregation: histogram, field: v,\n"
        "     buckets: [1]}\n")
    assert not errors
    families = metadata(rules)
    assert families == {"r": Metadata("x_total", "counter", "Things counted.", "bytes"),
                        "h": Metadata("lat", "histogram", "", "")}
    box = Outbox(Route(), 1, Tally(), families)
    box.add(sample(rule="r"), record_ms=W, mark=None)
    box.add(sample(name="lat_bucket", rule="h", le="1"), record_ms=W, mark=None)
    first, second = (decode(bytes(cramjam.snappy.decompress_raw(r.body)))
                     for r in box.requests())
    assert [(m.metric_family_name, m.type, m.help, m.unit) for m in first.metadata] == [
        ("lat", 3, "", ""), ("x_total", 1, "Things counted.", "bytes")]
    assert list(second.metadata) == []


def test_what_is_not_a_sample_is_skipped_and_refusals_are_counted_by_reason_and_tenant():
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    for junk in (b"", b"not json", b'{"name": "x"}', b"[1, 2]"):
        box.add(junk, record_ms=W, mark=None)
    assert tally.skipped == {MALFORMED: 4} and box.requests() == []
    box.add(sample(), record_ms=W, mark=None)
    (request,) = box.requests()
    settle(tally, request, 400, "out of order sample")
    settle(tally, request, 204, "")
    assert (tally.sent, tally.refused) == (1, {("out_of_order", "acme"): 1})
    assert summary(tally) == ("sent 1 samples; refused 1 (out_of_order for acme: 1); "
                              "skipped 4 (malformed: 4)")


@pytest.mark.parametrize(("status", "text", "reason"), [
    (400, "duplicate sample for timestamp", "duplicate_timestamp"),
    (400, "out of order sample", "out_of_order"),
    (400, "err-mimir-sample-out-of-order", "out_of_order"),
    (400, "too old sample", "too_old"),
    (400, "out of bounds", "too_old"),
    (400, "err-mimir-sample-timestamp-too-old", "too_old"),
    (413, "request too large", "http_413"),
])
def test_refusal_reasons_are_few_and_stable(status, text, reason):
    assert refusal_reason(status, text) == reason


def test_a_counter_series_first_sample_is_preceded_by_a_zero():
    """So that increase() counts the first value, and a series started again (its TTL past)
    reads as a reset."""
    from l2m.remotewrite.outbox import NEW

    box = Outbox(Route(), 100, Tally())
    box.add(sample(value=3.0), record_ms=W, mark=NEW)
    box.add(sample(value=5.0), record_ms=W + 10_000, mark=None)
    box.add(sample("g", "gauge", 2.0), record_ms=W, mark=FINAL)  # a gauge: no zero
    assert sent(box) == [("acme", [({"__name__": "g"}, [(W, 2.0)]),
                                   ({"__name__": "x_total"},
                                    [(W - 1, 0.0), (W, 3.0), (W + 10_000, 5.0)])])]


def test_a_refused_request_splits_into_halves_that_keep_each_series_order_and_metadata():
    from l2m.remotewrite.outbox import splittable

    families = {"r": Metadata("x_total", "counter", "Help.", "")}
    box = Outbox(Route(), 100, Tally(), families)
    for i in range(5):
        box.add(sample(value=float(i)), record_ms=W + i, mark=None)
    box.add(sample(name="y_total"), record_ms=W, mark=None)
    (request,) = box.requests()
    assert splittable(request, 400) and not splittable(request, 429)
    assert not splittable(request, 500)
    first, second = request.halves()
    assert (first.samples, second.samples) == (3, 3)
    points = [(dict(s.labels)["__name__"], p) for r in (first, second) for s in r.series
              for p in s.samples]
    assert points == [(n, p) for s in request.series for p in s.samples
                      for n in [dict(s.labels)["__name__"]]]
    assert first.metadata == request.metadata and second.metadata == ()
    one, _ = first.halves()
    assert one.samples == 1 and not splittable(one, 400)


def test_an_empty_label_value_is_no_label_so_one_series_in_a_request():
    """Prometheus has no empty label: {"user": ""} and {} are one series, so one sample at one
    time (the later record's value, as a replay), never two identical series in a request."""
    box = Outbox(Route(), 100, Tally())
    box.add(sample(value=1.0, user=""), record_ms=W, mark=None)
    box.add(sample(value=2.0), record_ms=W, mark=None)
    box.add(sample(value=3.0, user="", region="eu"), record_ms=W + 1, mark=None)
    assert sent(box) == [("acme", [({"__name__": "x_total"}, [(W, 2.0)]),
                                 ({"__name__": "x_total", "region": "eu"}, [(W + 1, 3.0)])])]
    # An empty account label is no label either: the account's is added, nothing skipped.
    tally = Tally()
    box = Outbox(Route(tenant_header=False, account_label="l2m_account", shared=None), 100, tally)
    box.add(sample(l2m_account=""), record_ms=W, mark=None)
    assert tally.skipped == {}
    assert sent(box) == [(None, [({"__name__": "x_total", "l2m_account": "acme"}, [(W, 1.0)])])]


def test_a_sample_stamped_past_the_future_bound_is_skipped_not_sent():
    """One sample a day ahead, taken by Prometheus, would make it refuse every later sample of
    every tenant as too old (measured on 2.42): skipped and counted, the others sent."""
    tally = Tally()
    box = Outbox(Route(), 100, tally, clock=lambda: W / 1000)
    box.add(sample("g", "gauge", 1.0, ts=W + 86_400_000), record_ms=W, mark=FINAL)
    box.add(sample(value=2.0), record_ms=W + FUTURE_MS + 1, mark=None)
    box.add(sample(value=3.0), record_ms=None, mark=None, time=str(W + FUTURE_MS + 1))
    box.add(sample("y_total", value=4.0), record_ms=W + FUTURE_MS, mark=None)  # at the bound
    box.add(sample("g", "gauge", 5.0, ts=W + 60_000), record_ms=W, mark=FINAL)
    assert sent(box) == [("acme", [
        ({"__name__": "g"}, [(W + 60_000, 5.0)]),
        ({"__name__": "y_total"}, [(W + FUTURE_MS, 4.0)]),
    ])]
    assert tally.skipped == {FUTURE: 3}
