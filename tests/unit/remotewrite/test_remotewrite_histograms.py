"""Native histogram samples (format 2, docs/spec.md §4) read back from the metrics topic and
sent by remote write (issue 56): every field of a hostile record checked, the histogram in
``TimeSeries.histograms`` with the time-stamping policy of floats (counters by record time
and a NEW mark's empty histogram a millisecond before; gauges by window, only when final),
reset hints, metadata types, replays deduplicated, and a histogram a receiver would refuse
(Prometheus 2.42: 500, retried forever) left out and counted. Requests decoded with
protobuf's runtime."""

from __future__ import annotations

import math
from typing import Any

import cramjam
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.engine.nativebuckets import bucket_key
from l2m.engine.partials import Partial
from l2m.engine.samples import (
    CORRECTION,
    FINAL,
    MALFORMED,
    NEW,
    SampleRecord,
    native_sample,
    read_sample,
    sample_problem,
)
from l2m.query.compiler import parse_query
from l2m.remotewrite.encode import RESET_HINTS, WireHistogram, check_histogram
from l2m.remotewrite.outbox import (
    CORRECTED,
    INVALID_HISTOGRAM,
    NOT_FINAL,
    Outbox,
    Route,
    Tally,
    metadata,
)
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics import exphist
from tests.unit.remotewrite.test_encode_histograms import decode, spans
from tests.unit.remotewrite.test_remotewrite_poison import shown_histogram

W = 1_795_341_600_000
THRESHOLD = exphist.DEFAULT_ZERO_THRESHOLD
HIST = {"schema": 3, "zero_threshold": THRESHOLD, "zero_count": 1, "count": 40, "sum": 39.0,
        "positive": [[-34, 1], [0, 2], [8, 3], [9, 30]], "negative": [[2, 3]]}


def record(histogram: Any = None, kind: str = "counter", ts: int = W,
           account: str | None = "acme", name: str = "lat_ms", **labels: str) -> bytes:
    return orjson.dumps({"name": name, "kind": kind, "labels": labels,
                         "histogram": HIST if histogram is None else histogram,
                         "timestamp": ts, "account": account, "rule": "r", "format": 2})


def _with(**change: Any) -> dict[str, Any]:
    return {**HIST, **change}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in HIST.items() if k != key}


# --- the record read back ------------------------------------------------------------------


def test_a_native_sample_reads_back_as_its_histogram_and_no_value():
    rule = Rule(id="r", name="lat_ms", kind=Kind.COUNTER, query="*",
                aggregation=Aggregation.HISTOGRAM, field="v", native_schema=3,
                compiled=parse_query("*"))
    values = [0.0, -3.0, 1.0, 2.5, 2.5, 1e300, math.inf]
    histogram = exphist.from_values(values, 3)
    parts: dict[str, Partial] = {}
    for v in values:  # the partials the engine keys by native bucket
        where = exphist.bucket_of(v, 3)
        assert where is not None
        key = bucket_key(*where, 3)
        parts[key] = parts.get(key, Partial()).merge(Partial(1, 1, v, None, v, v, W))
    (written,) = native_sample(rule, [("service", "cart")], None, parts)
    read = read_sample(orjson.dumps(written), b"new", b"1795341660000")
    assert isinstance(read, SampleRecord)
    assert math.isnan(read.value)
    assert (read.name, read.kind, read.labels, read.timestamp, read.account, read.rule,
            read.mark, read.batch_ms) == ("lat_ms", "counter", {"service": "cart"}, W, None,
                                          "r", NEW, 1_795_341_660_000)
    assert read.histogram == histogram  # sum +Inf: written "+Inf", read back as the double


def test_a_float_sample_has_no_histogram():
    read = read_sample(orjson.dumps({"name": "x", "kind": "gauge", "labels": {}, "value": 2,
                                     "timestamp": W, "account": None, "rule": "r"}))
    assert isinstance(read, SampleRecord)
    assert (read.value, read.histogram) == (2.0, None)


@pytest.mark.parametrize("histogram", [
    None,  # absent
    [],
    "h",
    _with(schema=9), _with(schema=-5), _with(schema=3.0), _with(schema=True),
    _without("schema"),
    _with(zero_threshold=-1e-9), _with(zero_threshold="NaN"), _with(zero_threshold=None),
    _with(zero_threshold=False), _with(zero_threshold=2**1024),
    _with(zero_count=-1), _with(zero_count=1.0), _with(zero_count=True),
    _with(zero_count=2**63), _without("zero_count"),
    _with(count=39),  # fewer than the zero bucket and the buckets hold
    _with(count=-40), _with(count=40.0), _with(count=None), _with(count=2**63),
    _with(sum="inf"), _with(sum=None), _with(sum=True), _with(sum=[1]), _without("sum"),
    _with(sum=-(2**1024)),  # no double (never from JSON)
    _with(positive=None), _with(positive={"0": 1}), _without("positive"),
    _with(positive=[[0, 1], [0, 1]]),  # an index twice
    _with(positive=[[1, 1], [0, 1]]),  # not in order
    _with(positive=[[0, 0]]),  # a zero count is never written
    _with(positive=[[0, -1]]), _with(positive=[[0, True]]), _with(positive=[[True, 1]]),
    _with(positive=[[0.0, 1]]), _with(positive=[[0, 1.0]]), _with(positive=[[0, 1, 2]]),
    _with(positive=[[0]]), _with(positive=[0, 1]),
    _with(positive=[[8194, 1]]),  # past the bucket of +Inf at schema 3
    _with(negative=[[-8593, 1]]),  # below the smallest subnormal's bucket at schema 3
    _with(negative=[[0, 2**63]]),
])
def test_a_histogram_that_is_not_one_is_malformed(histogram):
    data = orjson.loads(record())
    assert sample_problem({**data, "histogram": histogram}) == MALFORMED
    if histogram not in (_with(zero_threshold=2**1024), _with(sum=-(2**1024))):
        # not JSON: orjson writes no such integer
        assert read_sample(orjson.dumps({**data, "histogram": histogram})) == MALFORMED


@pytest.mark.parametrize("change", [
    {"format": 3}, {"format": 1}, {"format": "2"}, {"format": 2.0}, {"format": True},
    {"format": None},
    {"histogram": HIST, "value": 1.0, "format": 1},
])
def test_a_format_other_than_2_present_is_malformed(change):
    data = orjson.loads(record())
    assert sample_problem({**data, **change}) == MALFORMED


def test_a_histogram_without_format_is_a_float_sample_without_a_value():
    data = orjson.loads(record())
    del data["format"]
    assert sample_problem(data) == MALFORMED
    assert sample_problem({**data, "value": 3}) is None  # the histogram ignored, as any key


@pytest.mark.parametrize("histogram", [
    _with(count=41, sum="NaN"),  # a NaN observed: counted, in no bucket
    _with(count=2**63 - 1, sum="NaN"),
    _with(positive=[], negative=[], count=1),
    _with(zero_threshold=0, sum=1),  # integers for the doubles
    _with(positive=[[-8592, 1], [8193, 1]], negative=[], count=3, sum="+Inf"),
    _with(extra={"a": 1}),  # other keys ignored
])
def test_what_a_histogram_may_hold_is_read(histogram):
    read = read_sample(record(histogram))
    assert isinstance(read, SampleRecord)
    assert read.histogram is not None
    assert read.histogram.count == histogram["count"]


# --- remote write --------------------------------------------------------------------------


def sent(outbox: Outbox) -> list[tuple[str | None, int, list[tuple[dict, list, list]]]]:
    """(tenant, samples, [(labels, [(ts, value)], [histogram fields])]) of every request."""
    out = []
    for request in outbox.requests():
        decoded = decode(bytes(cramjam.snappy.decompress_raw(request.body)))
        out.append((request.tenant, request.samples, [
            ({lb.name: lb.value for lb in ts.labels},
             [(s.timestamp, s.value) for s in ts.samples],
             [fields(h) for h in ts.histograms]) for ts in decoded.timeseries]))
    return out


def fields(h: Any) -> dict[str, Any]:
    return {"timestamp": h.timestamp, "count": h.count_int, "sum": h.sum, "schema": h.schema,
            "zero_threshold": h.zero_threshold, "zero_count": h.zero_count_int,
            "positive": (spans(h.positive_spans), list(h.positive_deltas)),
            "negative": (spans(h.negative_spans), list(h.negative_deltas)),
            "reset_hint": h.reset_hint}


SENT = {"count": 40, "sum": 39.0, "schema": 3, "zero_threshold": THRESHOLD, "zero_count": 1,
        # [-34,1] alone; [0,2] then a gap of 7 (> 2): a span; [8,3],[9,30] together
        "positive": ([(-34, 1), (33, 1), (7, 2)], [1, 1, 1, 27]),
        "negative": ([(2, 1)], [3])}


def test_a_counter_histogram_takes_its_record_time_and_a_new_one_an_empty_one_before():
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    box.add(record(ts=W - 5), record_ms=W + 10_000, mark=NEW)
    box.add(record(_with(count=41, zero_count=2), ts=W - 5), record_ms=W + 20_000, mark=None)
    assert sent(box) == [("acme", 3, [({"__name__": "lat_ms"}, [], [
        {"timestamp": W + 9_999, "count": 0, "sum": 0.0, "schema": 3,
         "zero_threshold": THRESHOLD, "zero_count": 0, "positive": ([], []),
         "negative": ([], []), "reset_hint": RESET_HINTS["unknown"]},
        {**SENT, "timestamp": W + 10_000, "reset_hint": RESET_HINTS["unknown"]},
        {**SENT, "timestamp": W + 20_000, "count": 41, "zero_count": 2,
         "reset_hint": RESET_HINTS["unknown"]},
    ])])]
    assert tally.skipped == {}


def test_the_batch_time_header_stamps_a_counter_histogram_as_it_stamps_floats():
    box = Outbox(Route(), 100, Tally())
    box.add(record(), record_ms=W + 99, mark=NEW, time=str(W).encode(), appended=True)
    ((_, _, [(_, _, histograms)]),) = sent(box)
    assert [h["timestamp"] for h in histograms] == [W - 1, W]


def test_a_gauge_histogram_is_sent_at_its_window_when_final_with_the_gauge_hint():
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    box.add(record(kind="gauge", ts=W), record_ms=W + 30_000, mark=None)
    box.add(record(kind="gauge", ts=W), record_ms=W + 40_000, mark=FINAL)
    box.add(record(_with(count=41, zero_count=2), kind="gauge", ts=W), record_ms=W + 50_000,
            mark=CORRECTION)
    box.add(record(kind="gauge", ts=W + 60_000), record_ms=W + 70_000, mark=NEW)  # not final
    assert sent(box) == [("acme", 1, [({"__name__": "lat_ms"}, [], [
        {**SENT, "timestamp": W, "reset_hint": RESET_HINTS["gauge"]}])])]
    assert tally.skipped == {NOT_FINAL: 2, CORRECTED: 1}
    assert tally.corrections == {"r": 1}


def test_a_replayed_histogram_is_one_and_the_later_of_two_at_one_time_stands():
    box = Outbox(Route(), 100, Tally())
    for _ in range(2):
        box.add(record(), record_ms=W, mark=None)
    box.add(record(), record_ms=W + 1, mark=None)
    box.add(record(_with(count=41, zero_count=2)), record_ms=W + 1, mark=None)
    ((_, n, [(_, _, histograms)]),) = sent(box)
    assert n == 2
    assert [(h["timestamp"], h["count"]) for h in histograms] == [(W, 40), (W + 1, 41)]


def test_the_account_label_is_added_and_empty_labels_dropped_as_for_floats():
    box = Outbox(Route(tenant_header=False, account_label="l2m_account", shared=None), 100, Tally())
    box.add(record(service="cart", user=""), record_ms=W, mark=None)
    ((tenant, _, [(labels, _, [histogram])]),) = sent(box)
    assert tenant is None
    assert labels == {"__name__": "lat_ms", "l2m_account": "acme", "service": "cart"}
    assert histogram == {**SENT, "timestamp": W, "reset_hint": RESET_HINTS["unknown"]}


def test_a_histogram_a_receiver_would_refuse_is_skipped_and_counted():
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    # Read back as a histogram (more counted than the buckets hold), but only a NaN observed
    # explains that, and its sum is not NaN: Prometheus's validation refuses it.
    box.add(record(_with(count=41)), record_ms=W, mark=NEW)
    box.add(record(_with(count=41, sum="NaN"), name="nan_ms"), record_ms=W, mark=None)
    assert tally.skipped == {INVALID_HISTOGRAM: 1}
    ((_, n, [(labels, _, [histogram])]),) = sent(box)
    assert (labels, n, histogram["count"], math.isnan(histogram["sum"])) == (
        {"__name__": "nan_ms"}, 1, 41, True)


def test_a_float_and_a_histogram_of_one_series_go_in_one_time_series():
    box = Outbox(Route(), 100, Tally())
    box.add(record(), record_ms=W, mark=None)
    box.add(orjson.dumps({"name": "lat_ms", "kind": "counter", "labels": {}, "value": 2.0,
                          "timestamp": W, "account": "acme", "rule": "r"}),
            record_ms=W + 1, mark=None)
    ((_, n, [(_, samples, histograms)]),) = sent(box)
    assert (n, samples, [h["timestamp"] for h in histograms]) == (2, [(W + 1, 2.0)], [W])


def test_histograms_count_as_samples_in_requests_and_in_their_halves():
    box = Outbox(Route(), 3, Tally())
    for n in range(4):
        box.add(record(), record_ms=W + n, mark=NEW if n == 0 else None)
    box.add(orjson.dumps({"name": "x_total", "kind": "counter", "labels": {}, "value": 1.0,
                          "timestamp": W, "account": "acme", "rule": "r"}),
            record_ms=W, mark=None)
    requests = box.requests()
    assert [r.samples for r in requests] == [3, 3]
    first, second = requests
    assert [len(s.histograms) for s in first.series] == [3]
    assert [(len(s.samples), len(s.histograms)) for s in second.series] == [(0, 2), (1, 0)]
    older, newer = second.by_time()
    assert (older.samples, newer.samples) == (1, 2)
    halves = second.halves()
    assert [h.samples for h in halves] == [1, 2]
    decoded = decode(bytes(cramjam.snappy.decompress_raw(halves[0].body)))
    assert [h.timestamp for ts in decoded.timeseries for h in ts.histograms] == [W + 2]


def _rule(kind: Kind, aggregation: Aggregation, **native: Any) -> Rule:
    return Rule(id=f"{kind.value}-{aggregation.value}-{len(native)}", name="lat_ms", kind=kind,
                query="*", aggregation=aggregation, field="v", **native)


@pytest.mark.parametrize(("rule", "family_type"), [
    (_rule(Kind.COUNTER, Aggregation.HISTOGRAM, native_schema=3), "histogram"),
    (_rule(Kind.COUNTER, Aggregation.HISTOGRAM, native_schema=3, buckets=(1.0,),
           bucket_labels=("1",)), "histogram"),
    (_rule(Kind.COUNTER, Aggregation.HISTOGRAM, buckets=(1.0,), bucket_labels=("1",)),
     "histogram"),
    (_rule(Kind.GAUGE, Aggregation.HISTOGRAM, native_schema=3), "gaugehistogram"),
    (_rule(Kind.GAUGE, Aggregation.HISTOGRAM, native_schema=3, buckets=(1.0,),
           bucket_labels=("1",)), "gaugehistogram"),
    (_rule(Kind.GAUGE, Aggregation.HISTOGRAM, buckets=(1.0,), bucket_labels=("1",)),
     "histogram"),  # classic alone: as before native histograms
    (_rule(Kind.GAUGE, Aggregation.QUANTILES, native_schema=5, quantiles=(0.5,),
           quantile_labels=("0.5",)), "gauge"),
])
def test_family_types(rule, family_type):
    assert metadata([rule])[rule.id].kind == family_type


def test_check_histogram_refuses_what_the_encoder_refuses():
    check_histogram("x", WireHistogram(W, 1, 1.0, 0, zero_count=1))
    with pytest.raises(Exception, match="count is 2 but the zero bucket and the buckets hold 1"):
        check_histogram("x", WireHistogram(W, 2, 1.0, 0, zero_count=1))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats() | st.sampled_from([0.0, -0.0, 1.0, -1.0, 5e-324]),
                       max_size=8),
       schema=st.integers(min_value=exphist.SCHEMA_MIN, max_value=exphist.SCHEMA_MAX),
       kind=st.sampled_from(["counter", "gauge"]))
def test_any_observed_histogram_is_read_back_and_sent_bucket_for_bucket(values, schema, kind):
    histogram = exphist.from_values(values, schema)
    shown = shown_histogram(histogram)
    read = read_sample(record(shown, kind=kind), FINAL)
    assert isinstance(read, SampleRecord) and read.histogram is not None
    assert shown_histogram(read.histogram) == shown
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    box.add(record(shown, kind=kind), record_ms=W, mark=FINAL)
    ((_, _, [(_, _, [h])]),) = sent(box)
    assert tally.skipped == {}
    assert (h["count"], h["zero_count"], h["schema"]) == (histogram.count, histogram.zero_count,
                                                           schema)
    assert exphist.decode_buckets(*h["positive"]) == histogram.positive
    assert exphist.decode_buckets(*h["negative"]) == histogram.negative
    assert h["sum"] == histogram.sum or (math.isnan(h["sum"]) and math.isnan(histogram.sum))
