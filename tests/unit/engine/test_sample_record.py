"""The sample record, defined once (l2m.engine.samples): what the engine writes — the JSON
fields, the key, the headers — reads back as the same sample through the one decoding remote
write uses, and the text form of non-finite numbers has one home both ways
(l2m.engine.partials.NONFINITE)."""

from __future__ import annotations

import math
from dataclasses import replace

import orjson
import pytest

from l2m.engine.partials import NONFINITE, Partial, dump_float, load_float, nonfinite_text
from l2m.engine.samples import (
    CORRECTION,
    FINAL,
    INVALID_LABEL,
    MALFORMED,
    MARK_HEADER,
    MAX_MS,
    NEW,
    SAMPLE_FIELDS,
    TIME_HEADER,
    SampleLines,
    SampleRecord,
    batch_time,
    read_headers,
    read_sample,
    record_headers,
    rule_samples,
    sample,
    sample_number,
    sample_value,
    series_key,
)
from l2m.rules.loader import load_text

W = 1_795_341_600_000
RULES, _ = load_text("""\
rules:
  - {id: c, name: c_total, kind: counter, query: "*", aggregation: sum, field: x,
     labels: {team: core}}
  - {id: h, name: h, kind: gauge, query: "*", aggregation: histogram, field: x,
     buckets: [1, 10]}
""")
COUNTER, HISTOGRAM = RULES
COUNTER = replace(COUNTER, target_account="acme")  # as tenancy sets it


def test_the_engine_writes_the_fields_in_their_one_order():
    written = sample(COUNTER, "c_total", {"a": "1"}, 2.0, W)
    assert tuple(written) == SAMPLE_FIELDS
    # SampleLines builds the same bytes by pieces, in that order too.
    lines = SampleLines(COUNTER)
    pieced = lines.prefix([("a", "1")]) + b"2.0" + b',"timestamp":' + str(W).encode() + \
        lines.suffix
    assert pieced == orjson.dumps(written)


def test_a_written_sample_reads_back_as_itself_with_its_headers():
    (written,) = rule_samples(COUNTER, [("a", "1"), ("team", "core")], W,
                              {"": Partial(matches=1, n=1, sum=-math.inf, exact=None, ts=W)})
    headers = record_headers(NEW, W + 5)
    assert headers == [(MARK_HEADER, b"new"), (TIME_HEADER, str(W + 5).encode())]
    mark, time = read_headers([("other", b"x"), *headers, (MARK_HEADER, b"final")])
    assert (mark, time) == (b"new", str(W + 5).encode())  # the first of each
    read = read_sample(orjson.dumps(written), mark, time)
    assert read == SampleRecord(name="c_total", kind="counter",
                                labels={"a": "1", "team": "core"}, value=-math.inf,
                                timestamp=W, account="acme", rule="c", mark=NEW,
                                batch_ms=W + 5)
    assert series_key(written) == series_key(orjson.loads(orjson.dumps(written)))


def test_a_histogram_family_reads_back_whole_without_headers():
    part = Partial(matches=2, n=2, sum=1.0, exact=None, ts=W)
    written = rule_samples(HISTOGRAM, [], W, {"1": part})
    read = [read_sample(orjson.dumps(s)) for s in written]
    assert [(r.name, r.labels, r.value, r.account, r.rule, r.mark, r.batch_ms)
            for r in read if isinstance(r, SampleRecord)] == [
        ("h_bucket", {"le": "1"}, 2.0, None, "h", None, None),
        ("h_bucket", {"le": "10"}, 2.0, None, "h", None, None),
        ("h_bucket", {"le": "+Inf"}, 2.0, None, "h", None, None),
        ("h_sum", {}, 1.0, None, "h", None, None),
        ("h_count", {}, 2.0, None, "h", None, None),
    ]


def test_no_headers_and_a_header_without_value_read_as_none():
    assert read_headers(None) == (None, None)
    assert read_headers([(MARK_HEADER, None), (TIME_HEADER, None)]) == (None, None)
    assert record_headers(None, None) == []
    assert record_headers(FINAL, None) == [(MARK_HEADER, b"final")]
    assert record_headers(CORRECTION, 0) == [(MARK_HEADER, b"correction"), (TIME_HEADER, b"0")]


@pytest.mark.parametrize(("header", "at"), [
    (b"1795341600000", 1_795_341_600_000), ("12", 12), (None, None), (b"", None),
    (b"-1", None), (b"1.5", None), (b"12x", None), (str(MAX_MS).encode(), MAX_MS),
    (str(MAX_MS + 1).encode(), None), (b"1" * 20, None), ("١٢", None),
])
def test_the_batch_time_header_is_ascii_decimal_ms(header, at):
    assert batch_time(header) == at


@pytest.mark.parametrize(("record", "mark", "reason"), [
    (b"not json", None, MALFORMED),
    (orjson.dumps({"name": "x", "kind": "counter", "labels": {}, "value": "inf",
                   "timestamp": W}), None, MALFORMED),
    (orjson.dumps({"name": "x", "kind": "counter", "labels": {"a.b": "1"}, "value": 1,
                   "timestamp": W}), None, INVALID_LABEL),
    (orjson.dumps({"name": "x", "kind": "counter", "labels": {}, "value": 1,
                   "timestamp": W}), b"\xff", MALFORMED),
])
def test_what_is_not_a_sample_says_why(record, mark, reason):
    assert read_sample(record, mark) == reason


def test_a_record_without_account_or_rule_reads_with_none_and_its_rule_as_text():
    read = read_sample(orjson.dumps({"name": "x", "kind": "gauge", "labels": {}, "value": 3,
                                     "timestamp": W}), "final")
    assert read == SampleRecord("x", "gauge", {}, 3.0, W, None, "None", FINAL, None)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_numbers_have_one_text_form_both_ways(value):
    text = nonfinite_text(value)
    assert sample_value(value) == dump_float(value) == text
    assert text in NONFINITE
    for back in (sample_number(text), load_float(text), NONFINITE[text]):
        assert back == value or (math.isnan(back) and math.isnan(value))
    assert sorted(NONFINITE) == ["+Inf", "-Inf", "NaN"]
