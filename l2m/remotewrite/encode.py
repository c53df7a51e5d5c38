"""Prometheus remote-write 1.0 request bodies, encoded by hand.

Input: series — each its labels (``__name__`` among them) and its samples (timestamp in ms,
value), oldest first — and the metadata of the metric families they belong to. Output: the
HTTP body (a protobuf ``prometheus.WriteRequest``, snappy-compressed in the *block* format)
and the headers the spec requires (:data:`HEADERS`).

The spec (https://prometheus.io/docs/specs/remote_write_spec/) and the messages used
(``prompb/remote.proto``, ``prompb/types.proto``)::

    WriteRequest   { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    TimeSeries     { repeated Label labels = 1; repeated Sample samples = 2; }
    Label          { string name = 1; string value = 2; }
    Sample         { double value = 1; int64 timestamp = 2; }
    MetricMetadata { MetricType type = 1; string metric_family_name = 2; string help = 4;
                     string unit = 5; }

Five small messages: encoded here rather than through generated code, so no ``.proto``
compilation and no pinned protobuf runtime (ready-made clients on PyPI pin old ones). Fields
at their proto3 default are left out, as a generated encoder does. What a receiver rejects as
malformed is refused here with :class:`~l2m.errors.RemoteWriteError` instead: labels must be
sorted by name and unique, names match Prometheus's label-name syntax, a series names its
metric, its samples are in strictly increasing time order. Empty label values are dropped (in
Prometheus an empty value is the label's absence)."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import cramjam

from l2m.errors import RemoteWriteError
from l2m.semantics.values import LABEL_NAME_RE

# What every request carries (spec 1.0, "Protocol").
HEADERS: Mapping[str, str] = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
    "User-Agent": "l2m",
}
# MetricMetadata.MetricType by the kinds l2m writes.
METRIC_TYPES: Mapping[str, int] = {"counter": 1, "gauge": 2, "histogram": 3}
# Prometheus's stale marker: a NaN with this exact bit pattern ends a series.
STALE_NAN_BITS = 0x7FF0000000000002
_VARINT, _I64, _LEN = 0, 1, 2


@dataclass(frozen=True)
class Series:
    """One series of a request: ``labels`` (``__name__`` among them), ``samples`` as
    (timestamp ms, value), oldest first."""

    labels: Mapping[str, str]
    samples: Sequence[tuple[int, float]]


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
    out = b""
    if value != 0.0 or math.copysign(1.0, value) < 0 or math.isnan(value):
        out += _key(1, _I64) + struct.pack("<d", value)
    if timestamp:
        out += _key(2, _VARINT) + _varint(timestamp)
    return out


def _series(series: Series) -> bytes:
    out = [_bytes(1, _string(1, name) + _string(2, value))
           for name, value in _labels(series.labels)]
    last: int | None = None
    for timestamp, value in series.samples:
        if last is not None and timestamp <= last:
            raise RemoteWriteError(
                f"samples of {series.labels.get('__name__')} out of order: {timestamp} after "
                f"{last} (a series' samples must be in strictly increasing time order)")
        last = timestamp
        out.append(_bytes(2, _sample(int(timestamp), float(value))))
    return b"".join(out)


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
