"""Requests weighed by what they carry (review 56 F3): a native histogram counts 1 + its
buckets // BUCKETS_PER_SAMPLE toward ``max_samples_per_send``, so a request of histograms of
up to 1,000 buckets stays near the bytes of one of float samples. The measurement behind the
weight: protobuf bytes per point, a float sample in its own series against histograms of
contiguous and scattered buckets."""

from __future__ import annotations

import random

import cramjam

from l2m.remotewrite.encode import Series, WireHistogram, write_request
from l2m.remotewrite.outbox import BUCKETS_PER_SAMPLE, Outbox, Route, Tally, weight
from l2m.semantics.exphist import DEFAULT_ZERO_THRESHOLD, encode_buckets
from tests.unit.remotewrite.test_encode_histograms import decode
from tests.unit.remotewrite.test_remotewrite_histograms import HIST, record
from tests.unit.remotewrite.test_remotewrite_outbox import W, sample


def _labels(i: int) -> dict[str, str]:
    return {"__name__": "http_request_latency_ms", "service": f"svc-{i:04d}",
            "l2m_account": "acme"}


def _histogram(buckets: int, rnd: random.Random, scattered: bool) -> WireHistogram:
    """Counts 1..5000 in ``buckets`` buckets, contiguous or 3 apart (each its own span)."""
    indices = range(0, 3 * buckets, 3) if scattered else range(-buckets // 2, buckets // 2)
    counts = {i: rnd.randint(1, 5000) for i in indices}
    spans, deltas = encode_buckets(counts)
    return WireHistogram(W, sum(counts.values()), 12345.678, 3, DEFAULT_ZERO_THRESHOLD, 0,
                         spans, deltas)


def _bytes_per_point(series: list[Series]) -> float:
    return len(write_request(series)) / len(series)


def test_the_measured_bytes_that_set_the_weight():
    rnd = random.Random(56)
    floats = _bytes_per_point([Series(_labels(i), [(W, 1234.5)]) for i in range(200)])
    assert floats == 99.0
    sizes = {}
    for buckets in (0, 16, 160, 1000):
        for scattered in (False, True):
            sizes[buckets, scattered] = _bytes_per_point([
                Series(_labels(i), histograms=[_histogram(buckets, rnd, scattered)])
                for i in range(200)])
    assert sizes[0, False] == 114.0
    # Per bucket past the empty histogram: ~2 bytes contiguous, ~5 scattered.
    per_bucket = {key: round((size - 114.0) / key[0], 1) for key, size in sizes.items()
                  if key[0] >= 160}
    assert per_bucket == {(160, False): 2.1, (160, True): 5.0, (1000, False): 2.0,
                          (1000, True): 5.0}
    # 16 buckets weigh at most about one float sample; the weight then bounds a request's
    # bytes per unit of max_samples near a float sample's.
    assert sizes[16, True] - sizes[0, True] <= floats
    for (buckets, _), size in sizes.items():
        h = _histogram(buckets, rnd, True)
        assert size / weight(h) <= 2 * floats, (buckets, size, weight(h))


def test_a_histogram_weighs_one_and_a_sixteenth_per_bucket():
    assert BUCKETS_PER_SAMPLE == 16
    assert weight(1.0) == 1
    assert weight(WireHistogram(W, 0, 0.0, 3)) == 1
    assert weight(WireHistogram(W, 15, 0.0, 3, positive_spans=[(0, 15)],
                                positive_deltas=[1] + [0] * 14)) == 1
    assert weight(WireHistogram(W, 16, 0.0, 3, positive_spans=[(0, 8)],
                                positive_deltas=[1] + [0] * 7, negative_spans=[(0, 8)],
                                negative_deltas=[1] + [0] * 7)) == 2
    assert weight(WireHistogram(W, 1000, 0.0, 3, positive_spans=[(0, 1000)],
                                positive_deltas=[1] + [0] * 999)) == 63


def _outbox(max_samples: int) -> Outbox:
    return Outbox(Route(), max_samples, Tally(), clock=lambda: W / 1000)


def _shapes(outbox: Outbox) -> list[tuple[int, int, int]]:
    """(floats, histograms, samples) of each request, decoded."""
    out = []
    for request in outbox.requests():
        decoded = decode(bytes(cramjam.snappy.decompress_raw(request.body)))
        floats = sum(len(ts.samples) for ts in decoded.timeseries)
        histograms = sum(len(ts.histograms) for ts in decoded.timeseries)
        assert request.samples == floats + histograms
        out.append((floats, histograms, request.samples))
    return out


def _heavy(buckets: int) -> dict[str, object]:
    """A histogram of ``buckets`` contiguous buckets, one observation each."""
    return {**HIST, "zero_count": 0, "count": buckets, "sum": float(buckets),
            "positive": [[i, 1] for i in range(buckets)], "negative": []}


def test_requests_are_filled_by_weight_floats_as_before():
    outbox = _outbox(10)
    for i in range(25):
        outbox.add(sample(i=str(i)), W + i, None)
    assert _shapes(outbox) == [(10, 0, 10), (10, 0, 10), (5, 0, 5)]

    # Histograms of 160 buckets weigh 11: one per request of 20, the floats fill the rest.
    outbox = _outbox(20)
    for i in range(3):
        outbox.add(record(_heavy(160), i=str(i)), W + i, None)
    for i in range(12):
        outbox.add(sample(i=str(i)), W + i, None)
    # series in label order: the three lat_ms histograms (name "lat_ms") before x_total
    assert _shapes(outbox) == [(0, 1, 1), (0, 1, 1), (9, 1, 10), (3, 0, 3)]


def test_a_histogram_heavier_than_a_request_goes_alone_and_a_split_series_keeps_its_order():
    outbox = _outbox(10)
    outbox.add(sample(i="a"), W, None)
    for at in range(3):  # one series, three times: 1000 buckets each (weight 63)
        outbox.add(record(_heavy(1000), ts=W), W + at, None)
    outbox.add(sample(i="b"), W, None)
    requests = outbox.requests()
    shapes = []
    for request in requests:
        decoded = decode(bytes(cramjam.snappy.decompress_raw(request.body)))
        shapes.append([(ts.labels[-1].value, [h.timestamp for h in ts.histograms],
                        [s.timestamp for s in ts.samples]) for ts in decoded.timeseries])
    assert shapes == [[("lat_ms", [W], [])], [("lat_ms", [W + 1], [])],
                      [("lat_ms", [W + 2], [])],
                      [("a", [], [W]), ("b", [], [W])]]
