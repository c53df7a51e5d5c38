"""Remote-write request bodies (issue 22) without a network: decoded with protobuf's own
runtime from the spec's message definitions, so the hand encoder is checked against the
wire format, not against itself; and refused where a receiver would refuse them."""

from __future__ import annotations

import math
import struct

import cramjam
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from l2m.errors import RemoteWriteError
from l2m.remotewrite.encode import (
    HEADERS,
    STALE_NAN_BITS,
    Metadata,
    Series,
    body,
    write_request,
)

F = descriptor_pb2.FieldDescriptorProto


def _write_request_class() -> type:
    """prometheus.WriteRequest and what it holds, as prompb/{remote,types}.proto define them
    (the parts remote write 1.0 uses)."""
    proto = descriptor_pb2.FileDescriptorProto(name="l2m_test_prompb.proto",
                                               package="l2mtest", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = proto.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            m.field.add(name=fname, number=number, type=ftype, label=label,
                        **({"type_name": type_name} if type_name else {}))

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Label", ("name", 1, F.TYPE_STRING, opt, ""), ("value", 2, F.TYPE_STRING, opt, ""))
    message("Sample", ("value", 1, F.TYPE_DOUBLE, opt, ""),
            ("timestamp", 2, F.TYPE_INT64, opt, ""))
    message("TimeSeries", ("labels", 1, F.TYPE_MESSAGE, rep, ".l2mtest.Label"),
            ("samples", 2, F.TYPE_MESSAGE, rep, ".l2mtest.Sample"))
    message("MetricMetadata", ("type", 1, F.TYPE_INT32, opt, ""),
            ("metric_family_name", 2, F.TYPE_STRING, opt, ""),
            ("help", 4, F.TYPE_STRING, opt, ""), ("unit", 5, F.TYPE_STRING, opt, ""))
    message("WriteRequest", ("timeseries", 1, F.TYPE_MESSAGE, rep, ".l2mtest.TimeSeries"),
            ("metadata", 3, F.TYPE_MESSAGE, rep, ".l2mtest.MetricMetadata"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("l2mtest.WriteRequest"))


WriteRequest = _write_request_class()


def decode(data: bytes):
    request = WriteRequest()
    request.ParseFromString(data)
    return request


def test_series_and_metadata_decode_as_the_spec_defines_them():
    stale = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
    series = [
        Series({"service": "cart", "__name__": "http_errors_total", "status": "502"},
               [(1_795_169_274_799, 17.0), (1_795_169_284_799, 18.5)]),
        Series({"__name__": "latency_ms_bucket", "le": "+Inf", "empty": ""},
               [(-5, 0.0), (0, -0.0), (7, math.inf), (8, stale)]),
    ]
    meta = [Metadata("http_errors_total", "counter", "Errors by service.", ""),
            Metadata("latency_ms", "histogram", "", "milliseconds")]
    got = decode(write_request(series, meta))
    first, second = got.timeseries
    assert [(lb.name, lb.value) for lb in first.labels] == [
        ("__name__", "http_errors_total"), ("service", "cart"), ("status", "502")]
    assert [(s.timestamp, s.value) for s in first.samples] == [
        (1_795_169_274_799, 17.0), (1_795_169_284_799, 18.5)]
    # Labels sorted, the empty one dropped; negative timestamps, -0.0, infinities and the
    # stale marker's exact NaN kept.
    assert [lb.name for lb in second.labels] == ["__name__", "le"]
    assert [s.timestamp for s in second.samples] == [-5, 0, 7, 8]
    assert math.copysign(1.0, second.samples[1].value) == -1.0
    assert second.samples[2].value == math.inf
    assert struct.unpack("<Q", struct.pack("<d", second.samples[3].value))[0] == STALE_NAN_BITS
    assert [(m.type, m.metric_family_name, m.help, m.unit) for m in got.metadata] == [
        (1, "http_errors_total", "Errors by service.", ""), (3, "latency_ms", "", "milliseconds")]


def test_the_body_is_snappy_block_format_with_the_spec_headers():
    series = [Series({"__name__": "up"}, [(1, 1.0)])]
    data = body(series)
    assert bytes(cramjam.snappy.decompress_raw(data)) == write_request(series)
    assert HEADERS["Content-Encoding"] == "snappy"
    assert HEADERS["X-Prometheus-Remote-Write-Version"] == "0.1.0"


@pytest.mark.parametrize("series, message", [
    (Series({"__name__": "x", "bad-name": "v"}, [(1, 1.0)]), "not a Prometheus label name"),
    (Series({"job": "a"}, [(1, 1.0)]), "without a metric name"),
    (Series({"__name__": "x"}, [(2, 1.0), (2, 2.0)]), "strictly increasing"),
    (Series({"__name__": "x"}, [(3, 1.0), (2, 2.0)]), "out of order"),
])
def test_what_a_receiver_would_reject_is_refused_before_sending(series, message):
    with pytest.raises(RemoteWriteError, match=message) as err:
        write_request([series])
    assert err.value.code == "REMOTE_WRITE"


def test_an_unknown_metric_kind_is_refused():
    with pytest.raises(RemoteWriteError, match="unknown kind"):
        write_request([], [Metadata("x", "summary")])
