"""Native histograms (issue 56) as the remote-write encoder sends them, against a real
Prometheus (Debian's 2.42, ``--enable-feature=native-histograms`` and its remote-write
receiver on, 127.0.0.1): a counter histogram series and a gauge histogram series, built by
hand with known buckets, are stored as sent — the buckets Prometheus reads back are the ones
meant — and PromQL's ``histogram_count``, ``histogram_sum``, ``histogram_quantile`` and
``histogram_fraction`` give exactly what 2.42's algorithm (promql/quantile.go, ported below)
gives for those buckets; a stale-NaN sample ends a histogram series.

What 2.42's receiver takes (storage/remote/write_handler.go, codec.go): ``TimeSeries.histograms``
(field 4); a histogram is a float one when ``count_float`` or ``zero_count_float`` is > 0,
else an integer one (``count_int``, ``zero_count_int``, ``*_deltas``) — the encoder writes only
the integer kind. ``reset_hint`` goes to the TSDB as is; GAUGE (3) exists there (a gauge
chunk header). Its TSDB checks spans against the deltas, no bucket below zero and the buckets
(not the zero bucket) ≤ ``count``; it does not check the schema — newer versions check more,
and the encoder refuses what they refuse (tests/unit/remotewrite/test_encode_histograms.py).
What it refuses, shown below: other counts at a written timestamp and a histogram older than
the series' newest are answered 400 (the out-of-order window is for floats only in 2.42); a
malformed histogram 500, which a sender retries — why the encoder refuses those first.
Without ``--enable-feature=native-histograms`` every histogram is answered 500 "native
histograms are disabled"."""

from __future__ import annotations

import math
import struct
import time

import cramjam

from l2m.remotewrite.client import Endpoint, Sender
from l2m.remotewrite.encode import STALE_NAN_BITS, Series, WireHistogram, body
from tests.integration.prometheus_server import NATIVE_HISTOGRAMS, PrometheusServer, post_write
from tests.integration.test_prometheus import promql, value

Bucket = tuple[float, float, float]  # lower, upper, count — in 2.42's iteration order


def _bound(index: int, schema: int) -> float:
    """model/histogram/generic.go getBound, for the schemas ≤ 0 used here (exact powers of
    two; schemas > 0 read a table)."""
    assert schema <= 0
    return math.ldexp(1, index << -schema)


def _iterate(schema: int, zero_threshold: float, zero_count: float,
             negative: dict[int, float], positive: dict[int, float]) -> list[Bucket]:
    """FloatHistogram.AllBucketIterator: negative buckets from the most negative, the zero
    bucket when it holds any, positive buckets upwards; bounds clipped at the zero bucket."""
    out: list[Bucket] = []
    for index in sorted(negative, reverse=True):
        upper = min(-_bound(index - 1, schema), -zero_threshold)
        out.append((-_bound(index, schema), upper, negative[index]))
    if zero_count > 0:
        out.append((-zero_threshold, zero_threshold, zero_count))
    for index in sorted(positive):
        lower = max(_bound(index - 1, schema), zero_threshold)
        out.append((lower, _bound(index, schema), positive[index]))
    return out


def _clip_zero(lower: float, upper: float, negative: dict[int, float],
               positive: dict[int, float]) -> tuple[float, float]:
    # The zero bucket's far side is taken as 0 when only the other side has buckets.
    if lower < 0 < upper:
        if not negative and positive:
            return 0.0, upper
        if not positive and negative:
            return lower, 0.0
    return lower, upper


def quantile(q: float, count: float, buckets: list[Bucket], negative: dict[int, float],
             positive: dict[int, float]) -> float:
    """promql/quantile.go histogramQuantile (v2.42.0), for 0 ≤ q ≤ 1 and count > 0."""
    rank, seen = q * count, 0.0
    bucket = (0.0, 0.0, 0.0)  # Go's zero Bucket, when there is none
    for bucket in buckets:
        seen += bucket[2]
        if seen >= rank:
            break
    lower, upper = _clip_zero(bucket[0], bucket[1], negative, positive)
    in_bucket = bucket[2]
    seen = min(seen, count)
    if seen < rank:
        return upper
    rank -= seen - in_bucket
    return lower + (upper - lower) * (rank / in_bucket)


def fraction(low: float, high: float, count: float, buckets: list[Bucket],
             negative: dict[int, float], positive: dict[int, float]) -> float:
    """promql/quantile.go histogramFraction (v2.42.0), for count > 0 and low < high."""
    rank = low_rank = high_rank = 0.0
    low_set = high_set = False
    for lower, upper, in_bucket in buckets:
        lower, upper = _clip_zero(lower, upper, negative, positive)
        if not low_set and lower >= low:
            low_rank, low_set = rank, True
        if not high_set and lower >= high:
            high_rank, high_set = rank, True
        if low_set and high_set:
            break
        if not low_set and lower < low < upper:
            low_rank, low_set = rank + in_bucket * (low - lower) / (upper - lower), True
        if not high_set and lower < high < upper:
            high_rank, high_set = rank + in_bucket * (high - lower) / (upper - lower), True
        if low_set and high_set:
            break
        rank += in_bucket
    if not low_set or low_rank > count:
        low_rank = count
    if not high_set or high_rank > count:
        high_rank = count
    return (high_rank - low_rank) / count


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes([*out, value])


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _unchecked(name: str, timestamp: int, deltas: bytes) -> bytes:
    """A WriteRequest of one integer histogram (count 1, one bucket at index 0) whose packed
    positive deltas are ``deltas``, built here because the encoder refuses malformed ones."""
    histogram = (b"\x08\x01" + b"\x30\x00" + _field(11, b"\x10\x01") + _field(12, deltas)
                 + b"\x78" + _varint(timestamp))
    label = _field(1, b"__name__") + _field(2, name.encode())
    return bytes(cramjam.snappy.compress_raw(_field(1, _field(1, label) + _field(4, histogram))))


def _histogram_json(base: str, query: str) -> dict[str, object]:
    got = promql(base, query)
    assert len(got) == 1 and "histogram" in got[0], got
    return got[0]["histogram"][1]


def test_prometheus_stores_native_histograms_as_sent_and_promql_reads_them(tmp_path):
    # The out-of-order window docs/prometheus.md asks for: 2.42 applies it to floats only.
    server = PrometheusServer(tmp_path)
    base = server.base
    sent = Sender(Endpoint(f"{base}/api/v1/write"))
    now = int(time.time() * 1000) // 1000 * 1000
    t1, t2, t3 = now - 90_000, now - 60_000, now - 30_000
    try:
        server.start(NATIVE_HISTOGRAMS)
        # Counter histogram, schema 0 (bucket i is (2**(i-1), 2**i]), zero bucket ±0.001.
        # At t2: zero 2, (0.5,1] 4, (1,2] 6, (4,8] 2, (8,16] 1 — 15 observations.
        latency = {"__name__": "l2m_test_latency_seconds", "service": "cart"}
        counter = [
            WireHistogram(t1, count=12, sum=30.5, schema=0, zero_threshold=0.001,
                            zero_count=2, positive_spans=[(0, 2), (1, 1)],
                            positive_deltas=[3, 2, -3]),
            WireHistogram(t2, count=15, sum=50.25, schema=0, zero_threshold=0.001,
                            zero_count=2, positive_spans=[(0, 2), (1, 2)],
                            positive_deltas=[4, 2, -4, -1], reset_hint="no"),
        ]
        # Gauge histogram, schema -1 (bucket i is (4**(i-1), 4**i]), zero bucket ±0.25:
        # [-16,-4) 1, [-4,-1) 2, zero 1, (0.25,1] 3, (4,16] 4 — 11 observations.
        depth = {"__name__": "l2m_test_queue_depth", "queue": "ünïcode"}
        gauge = [WireHistogram(t2, count=11, sum=21.5, schema=-1, zero_threshold=0.25,
                                 zero_count=1, negative_spans=[(1, 2)], negative_deltas=[2, -1],
                                 positive_spans=[(0, 1), (1, 1)], positive_deltas=[3, 1],
                                 reset_hint="gauge")]
        got = sent.send(body([Series(latency, histograms=counter),
                              Series(depth, histograms=gauge)]))
        assert (got.status, got.attempts) == (204, 1), got

        at = t2 / 1000
        # The buckets as Prometheus reads them back: [boundary rule, lower, upper, count]
        # (0: (lower, upper], 1: [lower, upper), 3: [lower, upper]).
        assert _histogram_json(base, f"l2m_test_latency_seconds @ {at}") == {
            "count": "15", "sum": "50.25", "buckets": [
                [3, "-0.001", "0.001", "2"], [0, "0.5", "1", "4"], [0, "1", "2", "6"],
                [0, "4", "8", "2"], [0, "8", "16", "1"]]}
        assert _histogram_json(base, f"l2m_test_queue_depth @ {at}") == {
            "count": "11", "sum": "21.5", "buckets": [
                [1, "-16", "-4", "1"], [1, "-4", "-1", "2"], [3, "-0.25", "0.25", "1"],
                [0, "0.25", "1", "3"], [0, "4", "16", "4"]]}
        assert value(base, f"histogram_count(l2m_test_latency_seconds @ {t1 / 1000})") == 12.0
        assert value(base, f"histogram_count(l2m_test_latency_seconds @ {at})") == 15.0
        assert value(base, f"histogram_sum(l2m_test_latency_seconds @ {at})") == 50.25
        assert value(base, f"histogram_count(l2m_test_queue_depth @ {at})") == 11.0
        assert value(base, f"histogram_sum(l2m_test_queue_depth @ {at})") == 21.5

        pos = {0: 4.0, 1: 6.0, 3: 2.0, 4: 1.0}
        buckets = _iterate(0, 0.001, 2.0, {}, pos)
        expected = quantile(0.5, 15.0, buckets, {}, pos)
        assert expected == 1.25  # rank 7.5 falls in (1,2], 1.5 of its 6 in
        assert value(base, f"histogram_quantile(0.5, l2m_test_latency_seconds @ {at})") \
            == expected
        # The zero bucket of a histogram with positive buckets only starts at 0.
        assert value(base, f"histogram_quantile(0.1, l2m_test_latency_seconds @ {at})") \
            == quantile(0.1, 15.0, buckets, {}, pos) == 0.00075
        assert value(base, f"histogram_fraction(0, 1, l2m_test_latency_seconds @ {at})") \
            == fraction(0, 1, 15.0, buckets, {}, pos) == 6 / 15

        neg, pos = {1: 2.0, 2: 1.0}, {0: 3.0, 2: 4.0}
        buckets = _iterate(-1, 0.25, 1.0, neg, pos)
        for q in (0.5, 0.2, 0.9):
            assert value(base, f"histogram_quantile({q}, l2m_test_queue_depth @ {at})") \
                == quantile(q, 11.0, buckets, neg, pos), q
        assert quantile(0.5, 11.0, buckets, neg, pos) == 0.625
        assert value(base, f"histogram_fraction(0, 1, l2m_test_queue_depth @ {at})") \
            == fraction(0, 1, 11.0, buckets, neg, pos) == 3.5 / 11

        # What 2.42 refuses. A histogram at a written timestamp with other counts: 400, the
        # same one again is taken; an older one than the series' newest: 400 despite the
        # out-of-order window, which a float series gets.
        changed = WireHistogram(t2, count=16, sum=50.25, schema=0, zero_threshold=0.001,
                                  zero_count=3, positive_spans=[(0, 2), (1, 2)],
                                  positive_deltas=[4, 2, -4, -1])
        assert post_write(base, body([Series(latency, histograms=[changed])])) \
            == (400, "duplicate sample for timestamp\n")
        assert post_write(base, body([Series(latency, histograms=counter[1:])])) == (204, "")
        older = WireHistogram(t1 - 1000, count=1, sum=1.0, schema=0, zero_count=1)
        assert post_write(base, body([Series(latency, histograms=[older])])) \
            == (400, "out of order sample\n")
        floats = {"__name__": "l2m_test_float_total"}
        assert post_write(base, body([Series(floats, [(t2, 2.0)])])) == (204, "")
        assert post_write(base, body([Series(floats, [(t1, 1.0)])])) == (204, "")
        # A malformed histogram (the encoder refuses it, tests/unit/remotewrite/
        # test_encode_histograms.py) is answered 500 — which a sender retries, forever.
        assert post_write(base, _unchecked("l2m_test_bad", t2, b"\x02\x02")) == (
            500, "positive side: spans need 1 buckets, have 2 buckets: histogram spans specify "
                 "different number of buckets than provided\n")
        assert post_write(base, _unchecked("l2m_test_bad", t2, b"\x03")) == (
            500, "positive side: bucket number 1 has observation count of -2: histogram has a "
                 "bucket whose observation count is negative\n")
        assert post_write(base, _unchecked("l2m_test_good", t2, b"\x02")) == (204, "")
        assert promql(base, "l2m_test_bad") == []
        assert value(base, f"histogram_count(l2m_test_good @ {at})") == 1.0

        # A stale NaN sample ends a histogram series: Prometheus stores it as a stale
        # histogram, and an instant query after it finds nothing.
        stale = struct.unpack("<d", struct.pack("<Q", STALE_NAN_BITS))[0]
        assert sent.send(body([Series(latency, [(t3, stale)])])).status == 204
        assert promql(base, f"l2m_test_latency_seconds @ {t3 / 1000}") == []
        assert value(base, f"histogram_count(l2m_test_latency_seconds @ {at})") == 15.0
    finally:
        sent.close()
        server.stop()
