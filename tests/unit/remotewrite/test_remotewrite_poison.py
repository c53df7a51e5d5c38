"""Nothing on the metrics topic stops delivery (issue 53): every record becomes a valid sample
or is skipped and counted by reason, before any request is built from it (l2m.remotewrite
.outbox), and whatever a record holds the requests encode. Checked by cases and by a property
test over arbitrary bytes, JSON values and headers."""

from __future__ import annotations

import cramjam
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.engine.samples import FINAL, NEW, sample_value
from l2m.remotewrite.outbox import (
    INVALID_LABEL,
    INVALID_TENANT,
    LOG_APPEND_TIME,
    MALFORMED,
    Outbox,
    Route,
    Tally,
)
from l2m.semantics import exphist
from tests.unit.remotewrite.test_encode_histograms import decode
from tests.unit.remotewrite.test_remotewrite_outbox import W, sample, sent

GOOD = {"name": "x_total", "kind": "counter", "labels": {"a": "1"}, "value": 2.0,
        "timestamp": W, "account": "acme", "rule": "r"}


def _with(**change: object) -> bytes:
    return orjson.dumps({**GOOD, **change})


def _without(key: str) -> bytes:
    return orjson.dumps({k: v for k, v in GOOD.items() if k != key})


@pytest.mark.parametrize(("record", "reason"), [
    (b"\xff\xfe", MALFORMED),  # not JSON
    (b"[1, 2]", MALFORMED),  # not an object
    (b'"x"', MALFORMED),
    (_with(name=""), MALFORMED),  # an empty name
    (_with(name="1x"), MALFORMED),  # no metric name
    (_with(name="a b"), MALFORMED),
    (_with(name=5), MALFORMED),
    (_without("name"), MALFORMED),
    (_with(labels=[]), MALFORMED),  # labels not an object
    (_with(labels={"a": 1}), MALFORMED),  # a label value not a string
    (_with(labels={"a": None}), MALFORMED),
    (_with(value="12"), MALFORMED),  # a value that is no number
    (_with(value=True), MALFORMED),
    (_with(value=None), MALFORMED),
    (_with(value=[1]), MALFORMED),  # unhashable: found by the property test
    (_with(timestamp="1"), MALFORMED),  # a timestamp that is no integer
    (_with(timestamp=1.5), MALFORMED),
    (_with(timestamp=2**63), MALFORMED),  # past any real time
    (_with(kind="summary"), MALFORMED),  # an unknown kind
    (_with(kind=["counter"]), MALFORMED),
    (_with(account=["acme"]), MALFORMED),  # an account neither a string nor null
    (_with(account=7), MALFORMED),
    (_with(account=""), MALFORMED),
    (_with(labels={"a-b": "1"}), INVALID_LABEL),  # a label name Prometheus refuses
    (_with(labels={"__name__": "y"}), INVALID_LABEL),  # the name given twice
    (_with(labels={"0a": ""}), INVALID_LABEL),
    (_with(account="東京"), INVALID_TENANT),  # a tenant no header carries as it is
    (_with(account="a\nb"), INVALID_TENANT),
    (_with(account="a b"), INVALID_TENANT),
])
def test_a_record_that_cannot_be_sent_is_skipped_by_reason_and_its_poll_goes_on(record,
                                                                                 reason):
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    box.add(record, record_ms=W, mark=None)
    box.add(sample(), record_ms=W, mark=None)
    assert tally.skipped == {reason: 1}
    assert sent(box) == [("acme", [({"__name__": "x_total"}, [(W, 1.0)])])]


def test_a_mark_that_is_not_utf8_is_malformed_and_numbers_as_accounts_sort_with_strings():
    tally = Tally()
    box = Outbox(Route(tenant_header=False, default_tenant=None), 100, tally)
    box.add(sample(), record_ms=W, mark=b"\xff")
    box.add(_with(account=3), record_ms=W, mark=None)  # failed in sorted() beside strings
    box.add(sample(name="y_total", account=None), record_ms=W, mark=b"new")
    box.add(sample(name="z_total", account="b"), record_ms=W, mark=None)
    assert tally.skipped == {MALFORMED: 2}
    assert [t for t, _ in sent(box)] == [None]


def test_an_invalid_tenant_from_the_tenants_map_is_skipped_too():
    tally = Tally()
    box = Outbox(Route(tenants={"acme": "ü"}), 100, tally)
    box.add(sample(), record_ms=W, mark=None)
    assert (tally.skipped, box.requests()) == ({INVALID_TENANT: 1}, [])


def test_the_batch_time_header_stamps_counters_and_log_append_time_without_it_is_skipped():
    tally = Tally()
    box = Outbox(Route(), 100, tally)
    # The header wins over the record's time, whichever its type.
    box.add(sample(value=1.0), record_ms=W + 99, mark=NEW, time=str(W).encode(), appended=True)
    box.add(sample(value=2.0), record_ms=W + 50, mark=None, time=b"12x")  # not a number
    box.add(sample(value=3.0), record_ms=W + 70, mark=None, appended=True)  # no header
    box.add(sample("g", "gauge", 4.0), record_ms=W + 80, mark=FINAL, appended=True)
    assert tally.skipped == {LOG_APPEND_TIME: 1}
    assert sent(box) == [("acme", [
        ({"__name__": "g"}, [(W, 4.0)]),  # a gauge is stamped with its window
        ({"__name__": "x_total"}, [(W - 1, 0.0), (W, 1.0), (W + 50, 2.0)])])]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["+Inf", "-Inf", "NaN", "counter", "gauge", "x_total", "acme", "東京"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8)
_LABELS = st.dictionaries(st.text(max_size=6) | st.sampled_from(["a", "__name__", "l2m_account"]),
                          st.text(max_size=6) | _JSON, max_size=3)
_SAMPLE = st.fixed_dictionaries(
    {}, optional={"name": st.text(max_size=8) | st.sampled_from(["x_total", "y", ""]) | _JSON,
                  "kind": st.sampled_from(["counter", "gauge", "histogram"]) | _JSON,
                  "labels": _LABELS | _JSON,
                  "value": st.floats() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
                  | _JSON,
                  "timestamp": st.integers(min_value=-(2**63), max_value=2**64 - 1) | _JSON,
                  "account": st.text(max_size=6) | st.none() | _JSON,
                  "rule": _JSON})
_COUNT = st.integers(min_value=-2, max_value=6) | st.sampled_from([2**63 - 1, 2**63, 2**64 - 1])
_INDEX = st.integers(min_value=-3, max_value=3) | st.sampled_from([-274945, -8592, 8193, 8194,
                                                                   2**31, -(2**31) - 1])


def shown_histogram(histogram: exphist.NativeHistogram) -> dict:
    """A histogram's object as native_sample writes it."""
    return {"schema": histogram.schema, "zero_threshold": histogram.zero_threshold,
            "zero_count": histogram.zero_count, "count": histogram.count,
            "sum": sample_value(histogram.sum),
            "positive": sorted([i, c] for i, c in histogram.positive.items()),
            "negative": sorted([i, c] for i, c in histogram.negative.items())}


# A native histogram's object (docs/spec.md §4): one of observed values, as written, or with
# one field replaced by what a hostile record may hold there (or left out).
_OBSERVED = st.builds(lambda values, schema: shown_histogram(exphist.from_values(values, schema)),
                      st.lists(st.floats() | st.sampled_from([0.0, 1.0, -1.0, 1e-300]),
                               max_size=6),
                      st.integers(min_value=exphist.SCHEMA_MIN, max_value=exphist.SCHEMA_MAX))
_FIELD_VALUES = {
    "schema": st.integers(min_value=-5, max_value=9),
    "zero_threshold": st.floats() | st.sampled_from([0, -1.0]),
    "zero_count": _COUNT, "count": _COUNT | st.integers(min_value=0, max_value=40),
    "sum": st.floats() | st.sampled_from(["+Inf", "-Inf", "NaN", "inf"]),
    "positive": st.lists(st.lists(_INDEX | _COUNT, min_size=1, max_size=3), max_size=4),
    "negative": st.lists(st.lists(_INDEX | _COUNT, min_size=2, max_size=2), max_size=3)}
_HISTOGRAM = _OBSERVED | st.builds(
    lambda shown, key, value: {k: v for k, v in {**shown, key: value}.items() if v is not ...},
    _OBSERVED, st.sampled_from(sorted(_FIELD_VALUES)),
    st.one_of(*_FIELD_VALUES.values()) | _JSON | st.just(...))
_HISTOGRAM_SAMPLE = st.builds(
    lambda h, kind, fmt, account, name: {**{k: v for k, v in GOOD.items() if k != "value"},
                                         "kind": kind, "histogram": h, "format": fmt,
                                         "account": account, "name": name},
    _HISTOGRAM | _JSON, st.sampled_from(["counter", "gauge"]),
    st.just(2) | st.sampled_from([1, 3, "2", 2.0, None]),
    st.sampled_from(["acme", None]), st.sampled_from(["x_total", "lat"]))
# A valid sample with one field replaced by any JSON value (or left out): each check alone.
_ONE_WRONG = st.tuples(st.sampled_from(sorted(GOOD)), _JSON | st.just(...)).map(
    lambda kv: {k: v for k, v in {**GOOD, kv[0]: kv[1]}.items() if v is not ...})
_HEADER = st.none() | st.binary(max_size=8) | st.sampled_from(
    [b"new", b"final", b"correction", b"\xff", b"1795341600000", b"99999999999999999999"])
_ROUTE = st.builds(Route, tenant_header=st.booleans(),
                   default_tenant=st.none() | st.sampled_from(["ops", "bad tenant"]),
                   account_label=st.none() | st.just("l2m_account"),
                   shared=st.none() | st.just(frozenset({"ops", "acme"})))


def _value(s: dict) -> bytes:
    try:
        return orjson.dumps(s)
    except TypeError:  # an integer orjson cannot write
        return b"{}"


@settings(max_examples=400, deadline=None)
@given(route=_ROUTE,
       records=st.lists(st.tuples(
           st.binary(max_size=40) | _JSON.map(_value) | _SAMPLE.map(_value)
           | _ONE_WRONG.map(_value) | _HISTOGRAM_SAMPLE.map(_value),
           st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
           _HEADER, _HEADER, st.booleans()), max_size=12),
       max_samples=st.integers(min_value=1, max_value=4))
def test_whatever_the_topic_holds_add_never_raises_and_requests_always_encode(
        route, records, max_samples):
    tally = Tally()
    box = Outbox(route, max_samples, tally)
    for value, record_ms, mark, time, appended in records:
        box.add(value, record_ms, mark, time, appended)
    for request in box.requests():
        decoded = decode(bytes(cramjam.snappy.decompress_raw(request.body)))
        assert request.samples == sum(len(ts.samples) + len(ts.histograms)
                                      for ts in decoded.timeseries)
        assert 0 < request.samples <= max_samples
        assert request.tenant is None or request.tenant.isascii()
        for ts in decoded.timeseries:
            names = [label.name for label in ts.labels]
            assert names == sorted(set(names)) and "__name__" in names
        for _, half in (request.halves(), request.by_time()):  # parts encode as well
            assert half.samples >= 1
