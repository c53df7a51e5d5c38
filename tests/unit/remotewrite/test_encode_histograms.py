"""Native histograms in remote-write requests (issue 56) without a network: decoded field by
field with protobuf's own runtime from prompb/types.proto's ``Histogram`` and ``BucketSpan``
(oneofs and packed sint64 as declared there), and compared byte for byte with what that
runtime's generated-style encoder writes for the same message; every refusal with its text.
The same histograms against a real Prometheus: tests/integration/
test_native_histograms_receiver.py."""

from __future__ import annotations

import math
import struct
from typing import Any

import cramjam
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from l2m.errors import RemoteWriteError
from l2m.remotewrite.encode import (
    METRIC_TYPES,
    RESET_HINTS,
    STALE_NAN_BITS,
    Metadata,
    Series,
    WireHistogram,
    body,
    write_request,
)

F = descriptor_pb2.FieldDescriptorProto
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED


def _write_request_class() -> type:
    """prometheus.WriteRequest with TimeSeries.histograms, as prompb/types.proto (v2.42.0 and
    now) declares them."""
    proto = descriptor_pb2.FileDescriptorProto(name="l2m_test_prompb_histograms.proto",
                                               package="l2mhist", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, int, str, int | None]) -> Any:
        m = proto.message_type.add(name=name)
        for fname, number, ftype, label, type_name, oneof in fields:
            field = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name
            if oneof is not None:
                field.oneof_index = oneof
        return m

    message("Label", ("name", 1, F.TYPE_STRING, OPT, "", None),
            ("value", 2, F.TYPE_STRING, OPT, "", None))
    message("Sample", ("value", 1, F.TYPE_DOUBLE, OPT, "", None),
            ("timestamp", 2, F.TYPE_INT64, OPT, "", None))
    message("BucketSpan", ("offset", 1, F.TYPE_SINT32, OPT, "", None),
            ("length", 2, F.TYPE_UINT32, OPT, "", None))
    span = ".l2mhist.BucketSpan"
    histogram = message(
        "Histogram",
        ("count_int", 1, F.TYPE_UINT64, OPT, "", 0),
        ("count_float", 2, F.TYPE_DOUBLE, OPT, "", 0),
        ("sum", 3, F.TYPE_DOUBLE, OPT, "", None),
        ("schema", 4, F.TYPE_SINT32, OPT, "", None),
        ("zero_threshold", 5, F.TYPE_DOUBLE, OPT, "", None),
        ("zero_count_int", 6, F.TYPE_UINT64, OPT, "", 1),
        ("zero_count_float", 7, F.TYPE_DOUBLE, OPT, "", 1),
        ("negative_spans", 8, F.TYPE_MESSAGE, REP, span, None),
        ("negative_deltas", 9, F.TYPE_SINT64, REP, "", None),
        ("negative_counts", 10, F.TYPE_DOUBLE, REP, "", None),
        ("positive_spans", 11, F.TYPE_MESSAGE, REP, span, None),
        ("positive_deltas", 12, F.TYPE_SINT64, REP, "", None),
        ("positive_counts", 13, F.TYPE_DOUBLE, REP, "", None),
        ("reset_hint", 14, F.TYPE_INT32, OPT, "", None),
        ("timestamp", 15, F.TYPE_INT64, OPT, "", None))
    histogram.oneof_decl.add(name="count")
    histogram.oneof_decl.add(name="zero_count")
    message("TimeSeries", ("labels", 1, F.TYPE_MESSAGE, REP, ".l2mhist.Label", None),
            ("samples", 2, F.TYPE_MESSAGE, REP, ".l2mhist.Sample", None),
            ("histograms", 4, F.TYPE_MESSAGE, REP, ".l2mhist.Histogram", None))
    message("MetricMetadata", ("type", 1, F.TYPE_INT32, OPT, "", None),
            ("metric_family_name", 2, F.TYPE_STRING, OPT, "", None),
            ("help", 4, F.TYPE_STRING, OPT, "", None), ("unit", 5, F.TYPE_STRING, OPT, "", None))
    message("WriteRequest", ("timeseries", 1, F.TYPE_MESSAGE, REP, ".l2mhist.TimeSeries", None),
            ("metadata", 3, F.TYPE_MESSAGE, REP, ".l2mhist.MetricMetadata", None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("l2mhist.WriteRequest"))


WriteRequest = _write_request_class()
NAME = {"__name__": "l2m_latency_seconds"}


def decode(data: bytes) -> Any:
    request = WriteRequest()
    request.ParseFromString(data)
    return request


def encoded(*histograms: WireHistogram) -> Any:
    """The histograms of one series, as protobuf's runtime decodes what the encoder wrote."""
    return decode(write_request([Series(NAME, histograms=histograms)])).timeseries[0].histograms


def same_as_generated(h: WireHistogram) -> bytes:
    """The runtime's own encoding of ``h`` as a one-series WriteRequest (oneofs set to the
    integer members, as Prometheus's sender sets them)."""
    request = WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value=NAME["__name__"])
    msg = series.histograms.add(
        count_int=h.count, sum=h.sum, schema=h.schema, zero_threshold=h.zero_threshold,
        zero_count_int=h.zero_count, negative_deltas=list(h.negative_deltas),
        positive_deltas=list(h.positive_deltas), reset_hint=RESET_HINTS[h.reset_hint],
        timestamp=h.timestamp)
    for spans, field in ((h.negative_spans, msg.negative_spans),
                         (h.positive_spans, msg.positive_spans)):
        for offset, length in spans:
            field.add(offset=offset, length=length)
    return bytes(request.SerializeToString(deterministic=True))


def spans(field: Any) -> list[tuple[int, int]]:
    return [(s.offset, s.length) for s in field]


COUNTER = WireHistogram(1_795_169_274_799, count=15, sum=50.25, schema=0,
                          zero_threshold=0.001, zero_count=2, positive_spans=[(0, 2), (1, 2)],
                          positive_deltas=[4, 2, -4, -1], reset_hint="no")
GAUGE = WireHistogram(1_795_169_284_799, count=11, sum=-21.5, schema=-1, zero_threshold=0.25,
                        zero_count=1, negative_spans=[(1, 2)], negative_deltas=[2, -1],
                        positive_spans=[(-3, 1), (1, 1)], positive_deltas=[3, 1],
                        reset_hint="gauge")
EMPTY = WireHistogram(0, count=0, sum=0.0, schema=0)
# -0.0 is not the default's bit pattern: written, as the runtime writes it.
NEGATIVE_ZERO = WireHistogram(3, count=1, sum=-0.0, schema=2, zero_count=1, reset_hint="yes")


def test_a_counter_histogram_decodes_field_by_field():
    first = WireHistogram(1_795_169_264_799, count=12, sum=30.5, schema=0,
                            zero_threshold=0.001, zero_count=2, positive_spans=[(0, 2), (1, 1)],
                            positive_deltas=[3, 2, -3], reset_hint="yes")
    a, b = encoded(first, COUNTER)
    assert (a.WhichOneof("count"), a.count_int, a.WhichOneof("zero_count"), a.zero_count_int) \
        == ("count_int", 12, "zero_count_int", 2)
    assert (a.sum, a.schema, a.zero_threshold, a.reset_hint, a.timestamp) \
        == (30.5, 0, 0.001, 1, 1_795_169_264_799)
    assert (spans(a.positive_spans), list(a.positive_deltas)) == ([(0, 2), (1, 1)], [3, 2, -3])
    assert (spans(a.negative_spans), list(a.negative_deltas)) == ([], [])
    assert (list(a.positive_counts), list(a.negative_counts)) == ([], [])
    assert (b.count_int, b.sum, b.zero_count_int, b.reset_hint, b.timestamp) \
        == (15, 50.25, 2, 2, 1_795_169_274_799)
    assert (spans(b.positive_spans), list(b.positive_deltas)) \
        == ([(0, 2), (1, 2)], [4, 2, -4, -1])


def test_a_gauge_histogram_with_negative_buckets_and_a_negative_schema():
    (h,) = encoded(GAUGE)
    assert (h.count_int, h.sum, h.schema, h.zero_threshold, h.zero_count_int, h.reset_hint) \
        == (11, -21.5, -1, 0.25, 1, 3)
    assert (spans(h.negative_spans), list(h.negative_deltas)) == ([(1, 2)], [2, -1])
    assert (spans(h.positive_spans), list(h.positive_deltas)) == ([(-3, 1), (1, 1)], [3, 1])
    assert RESET_HINTS == {"unknown": 0, "yes": 1, "no": 2, "gauge": 3}


@pytest.mark.parametrize("histogram", [COUNTER, GAUGE, EMPTY, NEGATIVE_ZERO],
                         ids=["counter", "gauge", "empty", "negative zero"])
def test_the_bytes_are_what_a_generated_encoder_writes(histogram):
    assert write_request([Series(NAME, histograms=[histogram])]) == same_as_generated(histogram)


def test_the_empty_histogram_writes_its_integer_counts_and_nothing_else():
    # count_int and zero_count_int are oneof members: written at 0 too, so the histogram is
    # an integer one to any receiver; every other field is at its default and left out.
    data = write_request([Series(NAME, histograms=[EMPTY])])
    assert data.endswith(b"\x22\x04" + b"\x08\x00" + b"\x30\x00")  # field 4, 4 bytes
    (series,) = decode(data).timeseries
    (h,) = series.histograms
    assert (h.WhichOneof("count"), h.WhichOneof("zero_count")) == ("count_int", "zero_count_int")


def test_zigzag_packing_and_wide_values():
    h = WireHistogram(-1, count=2**64 - 1, sum=math.inf, schema=8,
                        positive_spans=[(-(2**31), 1), (2**31 - 1, 1)],
                        positive_deltas=[2**63 - 1, -(2**63 - 1)],
                        zero_count=1, negative_spans=[(0, 1)], negative_deltas=[2**63 - 1])
    got, = encoded(h)
    assert (got.count_int, got.sum, got.schema, got.timestamp) == (2**64 - 1, math.inf, 8, -1)
    assert spans(got.positive_spans) == [(-(2**31), 1), (2**31 - 1, 1)]
    assert list(got.positive_deltas) == [2**63 - 1, -(2**63 - 1)]
    assert write_request([Series(NAME, histograms=[h])]) == same_as_generated(h)
    # Packed: one length-delimited field 12 holding both zigzag varints.
    assert b"\x62\x14" + b"\xfe" + b"\xff" * 8 + b"\x01" + b"\xfd" + b"\xff" * 8 + b"\x01" \
        in write_request([Series(NAME, histograms=[h])])


def test_integers_are_taken_for_the_float_fields():
    (h,) = encoded(WireHistogram(5, count=1, sum=3, schema=0, zero_threshold=1, zero_count=1))
    assert (h.sum, h.zero_threshold) == (3.0, 1.0)


def test_a_nan_sum_allows_observations_outside_every_bucket():
    # A NaN observed is counted but in no bucket, and makes the sum NaN.
    (h,) = encoded(WireHistogram(5, count=3, sum=math.nan, schema=0, zero_count=1,
                                   positive_spans=[(0, 1)], positive_deltas=[1]))
    assert (h.count_int, math.isnan(h.sum)) == (3, True)


def test_a_histogram_series_ends_with_a_stale_sample_and_metadata_types():
    stale = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
    series = Series(NAME, [(1_795_169_294_799, stale)], [COUNTER])
    meta = [Metadata("l2m_latency_seconds", "histogram"),
            Metadata("l2m_queue_depth", "gaugehistogram", "Queue depth.", "")]
    got = decode(write_request([series], meta))
    (ts,) = got.timeseries
    assert [struct.pack("<d", s.value) for s in ts.samples] == [struct.pack("<d", stale)]
    assert [h.timestamp for h in ts.histograms] == [1_795_169_274_799]
    assert [(m.type, m.metric_family_name) for m in got.metadata] == [
        (3, "l2m_latency_seconds"), (4, "l2m_queue_depth")]
    assert METRIC_TYPES == {"counter": 1, "gauge": 2, "histogram": 3, "gaugehistogram": 4}
    assert bytes(cramjam.snappy.decompress_raw(body([series], meta))) \
        == write_request([series], meta)


def test_series_of_samples_are_encoded_as_before():
    # The histogram fields add nothing to a series that has none.
    assert write_request([Series(NAME, [(1, 2.0)])]) == (
        b"\x0a\x2e\x0a\x1f\x0a\x08__name__\x12\x13l2m_latency_seconds"
        b"\x12\x0b\x09\x00\x00\x00\x00\x00\x00\x00\x40\x10\x01")


def _h(**changes: Any) -> WireHistogram:
    fields = {"timestamp": 7, "count": 3, "sum": 4.0, "schema": 0, "zero_count": 1,
              "positive_spans": [(0, 1), (2, 1)], "positive_deltas": [1, 0]}
    return WireHistogram(**{**fields, **changes})


@pytest.mark.parametrize("histogram, message", [
    (_h(schema=9), "schema 9 is not one of the exponential schemas -4..8"),
    (_h(schema=-5), "schema -5 is not one of the exponential schemas -4..8"),
    (_h(schema=1.0), "schema is 1.0, not an integer"),
    (_h(count=2), "count is 2 but the zero bucket and the buckets hold 3 observations"),
    (_h(count=4), "count is 4 but the zero bucket and the buckets hold 3 observations"),
    (_h(count=2, sum=math.nan), "count is 2 but the zero bucket and the buckets hold 3"),
    (_h(count=-1), "count is -1, outside 0..18446744073709551615"),
    (_h(count=2**64), "count is 18446744073709551616, outside 0..18446744073709551615"),
    (_h(count=True), "count is True, not an integer"),
    (_h(zero_count=-1), "zero_count is -1, outside 0..18446744073709551615"),
    (_h(sum="4"), "sum is '4', not a number"),
    (_h(sum=10**400), "sum is 1000000000000000000000000000000000000000"),
    (_h(zero_threshold=10**400), "zero_threshold is 10000000000000000000000000000"),
    (_h(zero_threshold=-0.5), "zero_threshold is -0.5, not a finite number ≥ 0"),
    (_h(zero_threshold=math.nan), "zero_threshold is nan, not a finite number ≥ 0"),
    (_h(zero_threshold=math.inf), "zero_threshold is inf, not a finite number ≥ 0"),
    (_h(reset_hint="GAUGE"), "reset_hint 'GAUGE' is not one of unknown, yes, no, gauge"),
    (_h(reset_hint=3), "reset_hint 3 is not one of unknown, yes, no, gauge"),
    (_h(positive_spans=[(0, -1), (2, 3)]),
     "positive span 1's length is -1, outside 0..4294967295"),
    (_h(positive_spans=[(0, 1), (-2, 1)]),
     "positive span 2 has offset -2: only the first span's offset may be negative"),
    (_h(positive_spans=[(2**31, 1), (0, 1)]),
     "positive span 1's offset is 2147483648, outside -2147483648..2147483647"),
    (_h(positive_spans=[(0, 1, 2), (0, 1)]), r"positive span 1 is \(0, 1, 2\), not \(offset,"),
    (_h(positive_spans=[(0, 1)]), "positive spans have 1 buckets but 2 deltas are given"),
    (_h(positive_spans=[(0, 3)]), "positive spans have 3 buckets but 2 deltas are given"),
    (_h(positive_deltas=[1, -2]),
     "positive bucket 2 would count -1 observations \\(the deltas summed so far\\)"),
    (_h(positive_deltas=[1, 0.0]), "positive delta 2 is 0.0, not an integer"),
    (_h(positive_deltas=[1, 2**63]), "positive delta 2 is 9223372036854775808, outside"),
    (_h(positive_deltas=[2**63 - 1, 1]), "positive bucket 2's count is 9223372036854775808"),
    (_h(positive_deltas=None), "positive spans and deltas must be lists"),
    (_h(negative_spans=[(0, 1)], negative_deltas=[-1]),
     "negative bucket 1 would count -1 observations"),
    (_h(negative_spans=[(0, 1)]), "negative spans have 1 buckets but 0 deltas are given"),
    (_h(timestamp=2**63), "timestamp is 9223372036854775808, outside"),
    (_h(timestamp="7"), "timestamp is '7', not an integer"),
])
def test_what_a_receiver_would_reject_is_refused_before_sending(histogram, message):
    with pytest.raises(RemoteWriteError, match=message) as err:
        write_request([Series(NAME, histograms=[histogram])])
    assert err.value.code == "REMOTE_WRITE"
    assert str(err.value).startswith(
        f"histogram of l2m_latency_seconds at {histogram.timestamp!r}: ")


@pytest.mark.parametrize("timestamps", [(7, 7), (8, 7)])
def test_histograms_out_of_time_order_are_refused(timestamps):
    histograms = [_h(timestamp=t) for t in timestamps]
    with pytest.raises(RemoteWriteError, match=(
            f"^histograms of l2m_latency_seconds out of order: {timestamps[1]} after "
            f"{timestamps[0]} \\(a series' histograms must be in strictly increasing time "
            "order\\)$")):
        write_request([Series(NAME, histograms=histograms)])


def test_an_unknown_label_or_metric_name_is_refused_for_histogram_series_too():
    with pytest.raises(RemoteWriteError, match="without a metric name"):
        write_request([Series({"job": "a"}, histograms=[_h()])])
