"""Prometheus remote-write 1.0 request bodies, encoded by hand.

Input: series — each its labels (``__name__`` among them) and its samples (timestamp in ms,
value), oldest first — and the metadata of the metric families they belong to. Output: the
HTTP body (a protobuf ``prometheus.WriteRequest``, snappy-compressed in the *block* format)
and the headers the spec requires (:data:`HEADERS`).

The spec (https://prometheus.io/docs/specs/remote_write_spec/) and the messages used
(``prompb/remote.proto``, ``prompb/types.proto``)::

    WriteRequest   { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    TimeSeries     { repeated Label labels = 1; repeated Sample samples = 2;
                     repeated Histogram histograms = 4; }
    Label          { string name = 1; string value = 2; }
    Sample         { double value = 1; int64 timestamp = 2; }
    MetricMetadata { MetricType type = 1; string metric_family_name = 2; string help = 4;
                     string unit = 5; }
    Histogram      { oneof count { uint64 count_int = 1; double count_float = 2; }
                     double sum = 3; sint32 schema = 4; double zero_threshold = 5;
                     oneof zero_count { uint64 zero_count_int = 6; double zero_count_float = 7; }
                     repeated BucketSpan negative_spans = 8; repeated sint64 negative_deltas = 9;
                     repeated double negative_counts = 10;
                     repeated BucketSpan positive_spans = 11; repeated sint64 positive_deltas = 12;
                     repeated double positive_counts = 13;
                     ResetHint reset_hint = 14; int64 timestamp = 15; }
    BucketSpan     { sint32 offset = 1; uint32 length = 2; }

Seven small messages: encoded here rather than through generated code, so no ``.proto``
compilation and no pinned protobuf runtime (ready-made clients on PyPI pin old ones). Fields
at their proto3 default are left out, as a generated encoder does. What a receiver rejects as
malformed is refused here with :class:`~l2m.errors.RemoteWriteError` instead: labels must be
sorted by name and unique, names match Prometheus's label-name syntax, a series names its
metric, its samples are in strictly increasing time order. Empty label values are dropped (in
Prometheus an empty value is the label's absence).

Native histograms (:class:`WireHistogram`) are the *integer* kind: bucket counts as deltas
in the spans' order, ``count_int`` and ``zero_count_int`` always written (the oneof's choice
is what tells a receiver it is not a float histogram — Prometheus's own sender writes them
too); the float kind (``*_float``, ``*_counts``) is not written. They are checked as the
newest Prometheus checks them (its ``Histogram.Validate``), which is stricter than 2.42's
receiver: schema −4..8, spans after the first never step back, as many deltas as the spans
have buckets, no bucket count below zero, and ``count`` equal to the zero bucket's count plus
the buckets' (at least that when ``sum`` is NaN, a NaN observed). A histogram series is ended
like any other, by a sample whose value is the stale NaN: a receiver's TSDB turns it into a
stale histogram. Needs ``--enable-feature=native-histograms`` on a Prometheus 2.40 or later;
tests/integration/test_native_histograms_receiver.py checks it against 2.42."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import cramjam

from l2m.errors import RemoteWriteError
from l2m.semantics.exphist import SCHEMA_MAX, SCHEMA_MIN, NativeHistogram, encode_buckets
from l2m.semantics.values import LABEL_NAME_RE

# What every request carries (spec 1.0, "Protocol").
HEADERS: Mapping[str, str] = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "l2m",
}
# MetricMetadata.MetricType by the kinds l2m writes.
METRIC_TYPES: Mapping[str, int] = {"counter": 1, "gauge": 2, "histogram": 3,
                                   "gaugehistogram": 4}
# Histogram.ResetHint by name: "gauge" marks a gauge histogram (no counter resets), "yes" the
# first histogram after a reset, "no" none since the last, "unknown" that the reader checks.
RESET_HINTS: Mapping[str, int] = {"unknown": 0, "yes": 1, "no": 2, "gauge": 3}
# Prometheus's stale marker: a NaN with this exact bit pattern ends a series.
STALE_NAN_BITS = 0x7FF0000000000002
_VARINT, _I64, _LEN = 0, 1, 2


@dataclass(frozen=True)
class WireHistogram:
    """One native (exponential-bucket) histogram at ``timestamp`` (ms), integer counts, in
    the wire form remote write carries (spans and deltas; the sparse value itself, its
    buckets and their arithmetic, is :class:`l2m.semantics.exphist.NativeHistogram`).

    Bucket ``i`` of ``schema`` s spans (2**(2**-s * (i-1)), 2**(2**-s * i)] on the positive
    side, its mirror on the negative side. ``*_spans`` are (offset, length): the first offset
    is the first bucket's index, each later one the gap after the previous span (never
    negative). ``*_deltas`` are the buckets' counts in the spans' order, each given as the
    difference from the bucket before it (the first from zero). ``count`` counts every
    observation, ``zero_count`` those within ±``zero_threshold``. ``reset_hint`` is a key of
    :data:`RESET_HINTS` ("gauge" for a gauge histogram)."""

    timestamp: int
    count: int
    sum: float
    schema: int
    zero_threshold: float = 0.0
    zero_count: int = 0
    positive_spans: Sequence[tuple[int, int]] = ()
    positive_deltas: Sequence[int] = ()
    negative_spans: Sequence[tuple[int, int]] = ()
    negative_deltas: Sequence[int] = ()
    reset_hint: str = "unknown"


def wire_histogram(histogram: NativeHistogram, timestamp: int,
                   reset_hint: str = "unknown") -> WireHistogram:
    """``histogram`` at ``timestamp`` (ms) in the wire form: its buckets as spans and deltas
    (:func:`l2m.semantics.exphist.encode_buckets`), ``reset_hint`` a key of
    :data:`RESET_HINTS`. Not checked: :func:`check_histogram` says whether a receiver
    takes it."""
    positive_spans, positive_deltas = encode_buckets(histogram.positive)
    negative_spans, negative_deltas = encode_buckets(histogram.negative)
    return WireHistogram(timestamp, histogram.count, histogram.sum, histogram.schema,
                         histogram.zero_threshold, histogram.zero_count, positive_spans,
                         positive_deltas, negative_spans, negative_deltas, reset_hint)


def check_histogram(name: str | None, histogram: WireHistogram) -> None:
    """Refuse (:class:`~l2m.errors.RemoteWriteError`) a histogram of metric ``name`` that a
    receiver would refuse — Prometheus 2.42 answers such a request 500, which a sender
    retries forever: checked before it joins a request, it is left out instead."""
    _histogram(name, histogram)


@dataclass(frozen=True)
class Series:
    """One series of a request: ``labels`` (``__name__`` among them), ``samples`` as
    (timestamp ms, value), oldest first; ``histograms`` (:class:`WireHistogram`), oldest
    first. A histogram series carries histograms, and a sample only to end it (stale NaN)."""

    labels: Mapping[str, str]
    samples: Sequence[tuple[int, float]] = ()
    histograms: Sequence[WireHistogram] = ()


@dataclass(frozen=True)
class Metadata:
    """TYPE, HELP and UNIT of one metric family (``kind``: counter, gauge or histogram)."""

    name: str
    kind: str
    help: str = ""
    unit: str = ""


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 on the wire: two's complement, ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(data)) + data


def _string(field: int, text: str) -> bytes:
    return _bytes(field, text.encode()) if text else b""


def _labels(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """The labels as the spec wants them: sorted by name, no empty values; refused when a
    name is not a label name or the metric name is missing."""
    kept = sorted((name, value) for name, value in labels.items() if value != "")
    for name, _value in kept:
        if not LABEL_NAME_RE.fullmatch(name):
            raise RemoteWriteError(f"label name {name!r} is not a Prometheus label name")
    if not any(name == "__name__" for name, _ in kept):
        raise RemoteWriteError(f"a series without a metric name (__name__): {dict(kept)}")
    return kept


def _sample(timestamp: int, value: float) -> bytes:
    return _double(1, value) + (_key(2, _VARINT) + _varint(timestamp) if timestamp else b"")


def _in_order(name: str | None, what: str, last: int | None, timestamp: int) -> int:
    """``timestamp``, refused unless after ``last`` (the series' previous one of ``what``)."""
    if last is not None and timestamp <= last:
        raise RemoteWriteError(
            f"{what} of {name} out of order: {timestamp} after {last} (a series' {what} must "
            "be in strictly increasing time order)")
    return timestamp


def _series(series: Series) -> bytes:
    name = series.labels.get("__name__")
    out = [_bytes(1, _string(1, label) + _string(2, value))
           for label, value in _labels(series.labels)]
    last: int | None = None
    for timestamp, value in series.samples:
        last = _in_order(name, "samples", last, timestamp)
        out.append(_bytes(2, _sample(int(timestamp), float(value))))
    last = None
    for histogram in series.histograms:
        encoded = _histogram(name, histogram)  # timestamp checked
        last = _in_order(name, "histograms", last, histogram.timestamp)
        out.append(_bytes(4, encoded))
    return b"".join(out)


_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT32 = (0, (1 << 32) - 1)
_UINT64 = (0, (1 << 64) - 1)


def _zigzag(value: int) -> int:
    """sint32/sint64 on the wire: small magnitudes of either sign stay short."""
    return value * 2 if value >= 0 else -value * 2 - 1


def _integer(what: str, value: object, bounds: tuple[int, int]) -> int:
    # bool is an int to Python but never a count a user meant.
    if not isinstance(value, int) or isinstance(value, bool):
        raise RemoteWriteError(f"{what} is {value!r}, not an integer")
    if not bounds[0] <= value <= bounds[1]:
        raise RemoteWriteError(f"{what} is {value}, outside {bounds[0]}..{bounds[1]}")
    return value


def _buckets(what: str, spans: Sequence[tuple[int, int]], deltas: Sequence[int],
             fields: tuple[int, int]) -> tuple[bytes, int]:
    """One side's spans and packed deltas on the wire (``fields``: their field numbers), and
    how many observations its buckets hold; refused where Prometheus's validation refuses
    them."""
    if not isinstance(spans, tuple | list) or not isinstance(deltas, tuple | list):
        raise RemoteWriteError(f"{what} spans and deltas must be lists, not {spans!r} and "
                               f"{deltas!r}")
    encoded = []
    buckets = 0
    for n, span in enumerate(spans):
        if not isinstance(span, tuple | list) or len(span) != 2:
            raise RemoteWriteError(f"{what} span {n + 1} is {span!r}, not (offset, length)")
        offset = _integer(f"{what} span {n + 1}'s offset", span[0], _INT32)
        length = _integer(f"{what} span {n + 1}'s length", span[1], _UINT32)
        if n > 0 and offset < 0:
            # Only the first offset is an index; a later one is a gap and cannot go back.
            raise RemoteWriteError(f"{what} span {n + 1} has offset {offset}: only the first "
                                   "span's offset may be negative")
        buckets += length
        body = b""
        if offset:
            body += _key(1, _VARINT) + _varint(_zigzag(offset))
        if length:
            body += _key(2, _VARINT) + _varint(length)
        encoded.append(_bytes(fields[0], body))
    if len(deltas) != buckets:
        raise RemoteWriteError(f"{what} spans have {buckets} buckets but {len(deltas)} deltas "
                               "are given")
    count = total = 0
    packed = bytearray()
    for n, delta in enumerate(deltas):
        count += _integer(f"{what} delta {n + 1}", delta, _INT64)
        if count < 0:
            raise RemoteWriteError(f"{what} bucket {n + 1} would count {count} observations "
                                   "(the deltas summed so far)")
        _integer(f"{what} bucket {n + 1}'s count", count, _INT64)
        total += count
        packed += _varint(_zigzag(delta))
    # proto3 packs repeated scalars: one length-delimited field, left out when empty.
    return b"".join(encoded) + (_bytes(fields[1], bytes(packed)) if packed else b""), total


def _double(field: int, value: float) -> bytes:
    if value != 0.0 or math.copysign(1.0, value) < 0 or math.isnan(value):
        return _key(field, _I64) + struct.pack("<d", value)
    return b""


def _number(what: str, value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise RemoteWriteError(f"{what} is {value!r}, not a number")
    try:
        return float(value)
    except OverflowError:  # an int past the largest double
        raise RemoteWriteError(f"{what} is {value}, beyond a double's range") from None


def _histogram(name: str | None, h: WireHistogram) -> bytes:
    """One ``Histogram`` message, refused where a receiver would refuse it."""
    what = f"histogram of {name} at {h.timestamp!r}"
    timestamp = _integer(f"{what}: timestamp", h.timestamp, _INT64)
    count = _integer(f"{what}: count", h.count, _UINT64)
    zero_count = _integer(f"{what}: zero_count", h.zero_count, _UINT64)
    schema = _integer(f"{what}: schema", h.schema, _INT32)
    if not SCHEMA_MIN <= schema <= SCHEMA_MAX:
        raise RemoteWriteError(f"{what}: schema {schema} is not one of the exponential schemas "
                               f"{SCHEMA_MIN}..{SCHEMA_MAX}")
    total = _number(f"{what}: sum", h.sum)
    threshold = _number(f"{what}: zero_threshold", h.zero_threshold)
    if not (math.isfinite(threshold) and threshold >= 0):
        raise RemoteWriteError(f"{what}: zero_threshold is {h.zero_threshold!r}, not a finite "
                               "number ≥ 0")
    hint = RESET_HINTS.get(h.reset_hint) if isinstance(h.reset_hint, str) else None
    if hint is None:
        raise RemoteWriteError(f"{what}: reset_hint {h.reset_hint!r} is not one of "
                               f"{', '.join(RESET_HINTS)}")
    negative, in_negative = _buckets(f"{what}: negative", h.negative_spans, h.negative_deltas,
                                     (8, 9))
    positive, in_positive = _buckets(f"{what}: positive", h.positive_spans, h.positive_deltas,
                                     (11, 12))
    in_buckets = zero_count + in_negative + in_positive
    # A NaN observed lands in no bucket but is counted (and makes the sum NaN).
    if in_buckets > count or (in_buckets != count and not math.isnan(total)):
        raise RemoteWriteError(f"{what}: count is {count} but the zero bucket and the buckets "
                               f"hold {in_buckets} observations")
    return b"".join([
        _key(1, _VARINT) + _varint(count),
        _double(3, total),
        _key(4, _VARINT) + _varint(_zigzag(schema)) if schema else b"",
        _double(5, threshold),
        _key(6, _VARINT) + _varint(zero_count),
        negative,
        positive,
        _key(14, _VARINT) + _varint(hint) if hint else b"",
        _key(15, _VARINT) + _varint(timestamp) if timestamp else b"",
    ])


def _metadata(meta: Metadata) -> bytes:
    kind = METRIC_TYPES.get(meta.kind)
    if kind is None:
        raise RemoteWriteError(f"metric {meta.name}: unknown kind {meta.kind!r}")
    return (_key(1, _VARINT) + _varint(kind) + _string(2, meta.name) + _string(4, meta.help)
            + _string(5, meta.unit))


def write_request(series: Iterable[Series], metadata: Iterable[Metadata] = ()) -> bytes:
    """The uncompressed protobuf ``WriteRequest`` of these series and metadata."""
    return b"".join([*(_bytes(1, _series(s)) for s in series),
                     *(_bytes(3, _metadata(m)) for m in metadata)])


def body(series: Iterable[Series], metadata: Iterable[Metadata] = ()) -> bytes:
    """The HTTP body of a remote-write request: :func:`write_request`, snappy block format
    (``compress_raw``; the framed format is not what receivers read)."""
    return bytes(cramjam.snappy.compress_raw(write_request(series, metadata)))
