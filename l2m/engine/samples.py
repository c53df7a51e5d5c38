"""Partials → metric samples (SPEC §3–4), and the sample record they travel as.

Input: a rule, a series' labels (from its key, :func:`series_labels`), a timestamp and the
series' partials (:class:`~l2m.engine.partials.Partial`, per bucket for histograms). Output:
sample dicts (name, kind, labels, value, timestamp, account, rule), their deterministic Kafka
keys and JSON lines. Pure Python, shared by backfill and the state stage.

The record on the metrics topic is defined here once, for whoever writes it (the state
stage's output, the Kafka sink) and whoever reads it back (remote write,
:mod:`l2m.remotewrite.outbox`): its JSON object's fields (:data:`SAMPLE_FIELDS`, as
:func:`sample` builds them), its key (:func:`series_key`), its headers
(:func:`record_headers`: :data:`MARK_HEADER`, :data:`TIME_HEADER`; :func:`read_headers`),
and its decoding and validation (:func:`read_sample` → :class:`SampleRecord`, or why the
record is not a sample: :data:`MALFORMED`, :data:`INVALID_LABEL`)."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from l2m.engine.admission import OVERFLOW_SERIES
from l2m.engine.columns import PACK_COLUMN, SAMPLE_COLUMNS
from l2m.engine.nativebuckets import is_native_key, native_histogram
from l2m.engine.partials import ARROW_TYPES, NONFINITE, Partial, nonfinite_text
from l2m.policy.limits import OVERFLOW_LABEL
from l2m.rules.model import LABEL_RE, NAME_RE, QUANTILE_LABEL, Rule
from l2m.semantics.exphist import (
    SCHEMA_MAX,
    SCHEMA_MIN,
    NativeHistogram,
    magnitude_index,
    quantile,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# The Kafka record header that marks a sample for remote write (docs/prometheus.md): a gauge
# window's value once the window is published (FINAL: what remote write sends) or an update
# after that (CORRECTION: kept on the topic, counted and not sent); a counter series' first
# sample (NEW: remote write writes a 0 just before it, so PromQL's increase() counts its first
# value). A sample dict carries its mark under MARK_KEY until samples_frame writes it.
MARK_HEADER = "l2m-mark"
FINAL = "final"
CORRECTION = "correction"
NEW = "new"
# The record header that carries the micro-batch's time (ASCII decimal ms) beside the record's
# own timestamp: a metrics topic with message.timestamp.type=LogAppendTime re-stamps records
# when the broker appends them, so a replayed batch would get a later time and a counter a
# second value; remote write reads this header first (docs/prometheus.md).
TIME_HEADER = "l2m-time"
MARK_KEY = "_mark"
# The sample's JSON object: its fields in the order sample() writes them (SampleLines builds
# the same bytes by pieces), its kinds, and the timestamps (ms) it may carry — far past any
# real time, yet far enough inside int64 that the 0 remote write writes a millisecond before
# a new counter's first sample stays inside.
SAMPLE_FIELDS = ("name", "kind", "labels", "value", "timestamp", "account", "rule")
# A native histogram's sample (docs/spec.md §4): ``histogram`` in place of ``value`` and
# ``"format": 2`` last — a float sample has no ``format`` (it is format 1, the bytes releases
# wrote), so a consumer that knows only those finds no ``value`` and can tell why.
HISTOGRAM_KEY = "histogram"
FORMAT_KEY = "format"
HISTOGRAM_FORMAT = 2
HISTOGRAM_FIELDS = ("name", "kind", "labels", HISTOGRAM_KEY, "timestamp", "account", "rule",
                    FORMAT_KEY)
# The fields of a sample's ``histogram`` object, in the order native_sample writes them:
# ``positive``/``negative`` are [index, count] pairs by index, nonzero counts only.
HISTOGRAM_VALUE_FIELDS = ("schema", "zero_threshold", "zero_count", "count", "sum", "positive",
                          "negative")
KINDS = frozenset({"counter", "gauge"})
MIN_MS, MAX_MS = -(2**62), 2**62
_MAX_TIME_DIGITS = 19  # a TIME_HEADER longer than this is no time (MAX_MS has 19 digits)
# Why a record read back is not a sample (remote write counts them under these names): not
# JSON, not an object, a name that is no metric name, labels that are not an object of
# strings, a value that is no number, a timestamp that is no integer (or past any real time),
# an unknown kind, an account that is not a non-empty string or null, a ``format`` other than
# 2 (format 1 is written without one), a format 2 record whose ``histogram`` is no native histogram
# (:func:`histogram_problem`) — or an l2m-mark header that is not UTF-8 (a mark l2m never
# writes, so the record is not one of l2m's); and a label name Prometheus refuses
# (``__name__`` among them).
MALFORMED = "malformed"
INVALID_LABEL = "invalid_label"
# A state call's samples from this many on leave the state stage packed (samples_frame): one
# binary value instead of a row each, which pyspark converts to Arrow and the JVM converts
# from Arrow and back for the sink's worker — with 100,000 tenant rules ≈ 95,000 samples a
# batch. Fewer stay rows: in Python a pack costs ≈ 0.3
# ms more a call (schema, framing, codec), a row ≈ 1.8 µs more a sample, before the JVM's
# two conversions of each row.
PACK_SAMPLES = 64
# The pandas dtype of each Spark type of the sample columns (samples_frame's frame).
_PANDAS_TYPES = {"string": "object", "bigint": "int64"}


def sample_value(value: float) -> float | str:
    """A sample's value: a finite number as itself; a sum that left the double range as
    Prometheus writes it, the string ``"+Inf"``, ``"-Inf"`` or ``"NaN"`` (JSON has no such
    numbers, and ``null`` would hide it)."""
    value = float(value)
    if math.isfinite(value):
        return value
    return nonfinite_text(value)


def is_finite_sample(s: Mapping[str, Any]) -> bool:
    """Whether a sample's value (a native histogram's sum) is a finite number."""
    shown = s["value"] if "value" in s else s[HISTOGRAM_KEY]["sum"]
    return is_finite_shown(shown)


def is_finite_shown(shown: float | str) -> bool:
    """Whether a value as :func:`sample_value` shows it is a finite number."""
    return not isinstance(shown, str)


def sample(rule: Rule, name: str, labels: dict[str, str], value: float,
           timestamp: int) -> dict[str, Any]:
    return {
        "name": name,
        "kind": rule.kind,
        "labels": labels,
        "value": sample_value(value),
        "timestamp": int(timestamp),
        "account": rule.target_account,
        "rule": rule.id,
    }


def series_value(rule: Rule, agg: Partial) -> float | None:
    """The value of a non-histogram series (and window, for gauges); None without values."""
    if agg.n <= 0:
        return None
    aggregation = rule.aggregation
    # A chain, not a table of lambdas: called once per touched series in every state call.
    # (Backfill computes the same on Arrow: l2m.batch.finals._values.)
    if aggregation == "count":
        return float(agg.n)
    if aggregation == "sum":
        return agg.total
    if aggregation == "avg":
        return agg.total / agg.n
    if aggregation == "min":
        return agg.min if agg.min is not None else math.nan  # n > 0: never NaN
    # max (histograms are family_samples')
    return agg.max if agg.max is not None else math.nan


def series_samples(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int,
                   agg: Partial) -> list[dict[str, Any]]:
    """The sample of a non-histogram series (and window, for gauges); none without values."""
    value = series_value(rule, agg)
    if value is None:
        return []
    return [sample(rule, rule.name, dict(labels), value, timestamp)]


class SampleLines:
    """A non-histogram rule's sample lines, byte for byte ``orjson.dumps`` of :func:`sample`,
    built from pieces: :meth:`prefix` (the rule's part and a series' labels, once per series
    for all its windows), the value as ``orjson`` writes :func:`sample_value`, then
    ``,"timestamp":`` and its digits, then :attr:`suffix` (the rule's part). Backfill joins
    the pieces on Arrow for 350,000 samples of one high-cardinality gauge
    (:func:`l2m.batch.finals.domain_samples`): a dict per sample, serialised, cost three
    times as much as pieces joined in Python, which cost five times as much again."""

    def __init__(self, rule: Rule) -> None:
        # orjson writes a dict's keys in insertion order without spaces: sample()'s order.
        self._head = orjson.dumps({"name": rule.name, "kind": rule.kind})[:-1] + b',"labels":'
        self.suffix = b',"account":' + orjson.dumps(rule.target_account) + b',"rule":' + \
            orjson.dumps(rule.id) + b"}"

    def prefix(self, labels: Iterable[tuple[str, str]]) -> bytes:
        """What every line of a series starts with (up to its value)."""
        return self._head + orjson.dumps(dict(labels)) + b',"value":'


def family_samples(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int | None,
                   buckets: Mapping[str, Partial]) -> list[dict[str, Any]]:
    """A histogram family from its per-bucket (non-cumulative) partials keyed by ``le``:
    cumulative ``_bucket`` counts for every bound, ``+Inf``, ``_sum``, ``_count``.
    ``timestamp`` None means: the largest event time counted (counters)."""
    total = Partial()
    for part in buckets.values():
        total = total.merge(part)
    if total.n <= 0:
        return []
    ts = timestamp if timestamp is not None else total.ts
    assert ts is not None
    base = dict(labels)
    out = []
    cumulative = 0
    for le in rule.bucket_labels:
        bucket = buckets.get(le)
        cumulative += bucket.n if bucket else 0
        out.append(sample(rule, f"{rule.name}_bucket", {**base, "le": le}, cumulative, ts))
    out.append(sample(rule, f"{rule.name}_bucket", {**base, "le": "+Inf"}, total.n, ts))
    out.append(sample(rule, f"{rule.name}_sum", dict(base), total.total, ts))
    out.append(sample(rule, f"{rule.name}_count", dict(base), total.n, ts))
    return out


def _rule_histogram(rule: Rule, timestamp: int | None, parts: Mapping[str, Partial]
                    ) -> tuple[NativeHistogram, int] | None:
    """A series' (window's) native histogram at the rule's resolution and its sample's
    timestamp (``timestamp``, else the largest event time counted); None without values."""
    assert rule.native_schema is not None
    found = native_histogram(parts, rule.native_schema, rule.native_max_buckets)
    if found is None:
        return None
    histogram, total = found
    ts = timestamp if timestamp is not None else total.ts
    assert ts is not None
    return histogram, int(ts)


def native_sample(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int | None,
                  parts: Mapping[str, Partial]) -> list[dict[str, Any]]:
    """A native histogram's sample from its partials keyed by native bucket key
    (:mod:`l2m.engine.nativebuckets`; classic bounds' partials are ignored): the histogram at
    the rule's schema, lowered until at most its ``native_max_buckets`` buckets are populated;
    none without values. ``timestamp`` None means: the largest event time counted."""
    found = _rule_histogram(rule, timestamp, parts)
    if found is None:
        return []
    histogram, ts = found
    return [{
        "name": rule.name,
        "kind": rule.kind,
        "labels": dict(labels),
        HISTOGRAM_KEY: {
            "schema": histogram.schema,
            "zero_threshold": histogram.zero_threshold,
            "zero_count": histogram.zero_count,
            "count": histogram.count,
            "sum": sample_value(histogram.sum),
            "positive": sorted([i, c] for i, c in histogram.positive.items()),
            "negative": sorted([i, c] for i, c in histogram.negative.items()),
        },
        "timestamp": int(ts),
        "account": rule.target_account,
        "rule": rule.id,
        FORMAT_KEY: HISTOGRAM_FORMAT,
    }]


def quantile_samples(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int | None,
                     parts: Mapping[str, Partial]) -> list[dict[str, Any]]:
    """A quantiles rule's samples of one window: per quantile q, the estimate of the window's
    q-quantile from its native histogram (:func:`l2m.semantics.exphist.quantile`, relative
    error at most :func:`~l2m.semantics.exphist.relative_error_bound` of the histogram's
    schema), labelled ``quantile``; none without values."""
    found = _rule_histogram(rule, timestamp, parts)
    if found is None:
        return []
    histogram, ts = found
    base = dict(labels)
    return [sample(rule, rule.name, {**base, QUANTILE_LABEL: label}, quantile(histogram, q), ts)
            for q, label in zip(rule.quantiles, rule.quantile_labels, strict=True)]


def rule_samples(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int | None,
                 parts: Mapping[str, Partial]) -> list[dict[str, Any]]:
    """The samples of one series from its partials keyed by ``le`` ("" outside bucketed
    rules). ``timestamp`` None means: the largest event time counted (counters)."""
    if rule.aggregation == "quantiles":
        return quantile_samples(rule, labels, timestamp, parts)
    if rule.aggregation == "histogram":
        if rule.native_schema is None:
            return family_samples(rule, labels, timestamp, parts)
        out = []
        if rule.classic:  # classic and native together: each log has a row in both
            out = family_samples(rule, labels, timestamp,
                                 {le: p for le, p in parts.items() if not is_native_key(le)})
        return out + native_sample(rule, labels, timestamp, parts)
    agg = next(iter(parts.values()))
    return series_samples(rule, labels, (agg.ts or 0) if timestamp is None else timestamp,
                          agg)


def series_labels(rule: Rule, key: str) -> list[tuple[str, str]]:
    """The labels of a series from its key (:meth:`l2m.engine.fanout.FanOut.series`): the rule's
    static labels plus one per present group-by value, sorted by name. The overflow series
    (:data:`~l2m.engine.admission.OVERFLOW_SERIES`) has the static labels and
    ``l2m_overflow="true"`` in place of every group-by label."""
    labels = list(rule.labels)
    if key == OVERFLOW_SERIES:
        return sorted([*labels, OVERFLOW_LABEL])
    pos = 0
    for label, _field in rule.group_labels:
        if key[pos] == "-":
            pos += 1
            continue
        colon = key.index(":", pos)
        end = colon + 1 + int(key[pos:colon])
        labels.append((label, key[colon + 1:end]))
        pos = end
    return sorted(labels)


def samples_frame(samples: list[dict[str, Any]], batch_ms: int,
                  mark: str | None = None) -> pd.DataFrame:
    """The state stage's output rows: deterministic Kafka key and JSON value per sample, the
    micro-batch's time (``batch_ms``: Spark's batch timestamp, the same when the batch is
    replayed) — the Kafka record's timestamp, what remote write stamps a counter with — and a
    gauge window's ``mark`` (:data:`FINAL`, :data:`CORRECTION` or None), its record's
    :data:`MARK_HEADER` (docs/prometheus.md). From :data:`PACK_SAMPLES` samples on, they
    travel packed (``pack``: Arrow IPC values of those four columns, ``key``, ``value`` and
    ``mark`` null) for the sink to unpack (:func:`unpacked_samples`)."""
    marks = [s.pop(MARK_KEY, mark) for s in samples]  # a sample's own mark, else the call's
    keys = [series_key(s).decode() for s in samples]
    values = [orjson.dumps(s).decode() for s in samples]
    # Imported here: the Kafka sink imports this module for MARK_HEADER, and Spark unpickles
    # the sink in short-lived Python processes on the driver (writer set-up, each commit),
    # where pandas (0.2 s) and Arrow are never used.
    import pandas as pd

    n = len(samples)
    rows: dict[str, list[Any]] = {"key": keys, "value": values, "time": [batch_ms] * n,
                                  "mark": marks}
    packs: list[bytes | None] = [None] * n
    if n >= PACK_SAMPLES:
        import pyarrow as pa

        from l2m.engine.ipc import streams

        packs = [value.to_pybytes() for value in streams(pa.table(rows, schema=sample_arrow()))]
        none = [None] * len(packs)
        rows = {"key": none, "value": none, "time": [batch_ms] * len(packs), "mark": none}
    columns = {name: pd.Series(rows[name], dtype=_PANDAS_TYPES[spark])
               for name, spark in SAMPLE_COLUMNS}
    return pd.DataFrame({**columns, PACK_COLUMN: pd.Series(packs, dtype="object")})


@functools.cache
def sample_arrow() -> pa.Schema:
    """A sample row's Arrow schema (:data:`~l2m.engine.columns.SAMPLE_COLUMNS`): a pack's
    columns."""
    import pyarrow as pa

    return pa.schema([pa.field(name, ARROW_TYPES[spark]) for name, spark in SAMPLE_COLUMNS])


def unpacked_samples(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The sink's input batches as sample rows (key, value, time, mark): the state stage's
    (:func:`samples_frame`'s) with the rows that are not packs first, then each pack's
    samples; a batch without a ``pack`` column (any ``key, value`` frame) as it is."""
    from l2m.engine.ipc import table_of

    for batch in batches:
        if PACK_COLUMN not in batch.schema.names:
            yield batch
            continue
        packs = batch.column(PACK_COLUMN)
        if packs.null_count:
            import pyarrow.compute as pc

            yield batch.filter(pc.is_null(packs)).drop_columns([PACK_COLUMN])
        for value in packs.drop_null().to_pylist():
            yield from table_of(value).to_batches()


def series_key(s: Mapping[str, Any]) -> bytes:
    """Deterministic Kafka key: per series for counters, per series and window for gauges,
    so a replayed sample overwrites itself downstream."""
    ident = [s["account"], s["rule"], s["name"], sorted(s["labels"].items())]
    if s["kind"] == "gauge":
        ident.append(s["timestamp"])
    return hashlib.sha1(orjson.dumps(ident)).hexdigest().encode()


def to_json_lines(samples: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for s in samples:
        yield orjson.dumps(s) + b"\n"


# --- the record read back ------------------------------------------------------------------


def record_headers(mark: str | None, batch_ms: int | None) -> list[tuple[str, bytes]]:
    """A sample record's headers: its ``mark`` (:data:`FINAL`, :data:`CORRECTION`,
    :data:`NEW` or None) as UTF-8 in :data:`MARK_HEADER`, the micro-batch's time
    (``batch_ms``; None: none) as ASCII decimal ms in :data:`TIME_HEADER`."""
    headers = [] if mark is None else [(MARK_HEADER, mark.encode())]
    if batch_ms is not None:
        headers.append((TIME_HEADER, str(batch_ms).encode()))
    return headers


def read_headers(headers: Iterable[tuple[str, bytes | None]] | None
                 ) -> tuple[bytes | None, bytes | None]:
    """The :data:`MARK_HEADER` and :data:`TIME_HEADER` values of a consumed record's headers
    (each the first one present; None when absent), for :func:`read_sample`."""
    mark = time = None
    for key, value in headers or ():
        if value is None:
            continue
        if key == MARK_HEADER and mark is None:
            mark = value
        elif key == TIME_HEADER and time is None:
            time = value
    return mark, time


# A native histogram's counts as read back: below 2^63, so that a bucket's count, the
# difference of two (remote write's deltas, sint64) and the total (uint64) all fit.
MAX_HISTOGRAM_COUNT = 2**63 - 1
# The bucket indexes a double can have, by schema (the smallest subnormal's to the one past
# MaxFloat64 that holds ±Inf): a record's indexes outside them are no observation's bucket,
# and kept inside them a span's offset (sint32 on the wire) always fits.
_MAX_DOUBLE = 1.7976931348623157e308
_INDEX_RANGE = {schema: (magnitude_index(5e-324, schema), magnitude_index(math.inf, schema))
                for schema in range(SCHEMA_MIN, SCHEMA_MAX + 1)}


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """A record of the metrics topic, read back and checked (:func:`read_sample`): the
    sample's fields, its ``value`` as the double it stands for (``"+Inf"``, ``"-Inf"``,
    ``"NaN"`` included), ``rule`` as text (another writer's record may hold anything there,
    or nothing: ``"None"``), and its headers: ``mark`` (None: none) and ``batch_ms`` (None:
    none, or not a time). A native histogram's record (format 2) has its ``histogram`` and
    ``value`` NaN (it has no value: its sum is the histogram's); a float sample's
    ``histogram`` is None."""

    name: str
    kind: str
    labels: dict[str, str]
    value: float
    timestamp: int
    account: str | None
    rule: str
    mark: str | None = None
    batch_ms: int | None = None
    histogram: NativeHistogram | None = None


def read_sample(value: bytes | None, mark: bytes | str | None = None,
                time: bytes | str | None = None) -> SampleRecord | str:
    """A record of the metrics topic — its value and its :data:`MARK_HEADER` and
    :data:`TIME_HEADER` headers — as a :class:`SampleRecord`, or why it is not one
    (:data:`MALFORMED`, :data:`INVALID_LABEL`). Never raises: what a record holds is
    checked before anything is built from it."""
    try:
        data = orjson.loads(value or b"")
    except orjson.JSONDecodeError:
        return MALFORMED
    reason = sample_problem(data)
    if reason is not None:
        return reason
    text = _header_text(mark)
    if text is _NOT_TEXT:
        return MALFORMED
    assert text is None or isinstance(text, str)
    histogram = None
    number = math.nan
    if FORMAT_KEY in data:  # format 2: sample_problem allows no other
        histogram = record_histogram(data[HISTOGRAM_KEY])
    else:
        number = sample_number(data["value"])
    return SampleRecord(data["name"], data["kind"], data["labels"], number, data["timestamp"],
                        data.get("account"), str(data.get("rule")), text, batch_time(time),
                        histogram)


def sample_problem(sample: Any) -> str | None:
    """Why a decoded JSON value is not a sample (:data:`MALFORMED`, :data:`INVALID_LABEL`),
    or None. A sample without :data:`FORMAT_KEY` is a float sample (format 1); with
    ``"format": 2`` a native histogram's (:func:`histogram_problem`); any other format is
    malformed (a newer writer's record this reader cannot know the meaning of)."""
    if not isinstance(sample, dict):
        return MALFORMED
    name, labels, value = sample.get("name"), sample.get("labels"), sample.get("value")
    timestamp, account = sample.get("timestamp"), sample.get("account")
    if FORMAT_KEY in sample:
        if type(sample[FORMAT_KEY]) is not int or sample[FORMAT_KEY] != HISTOGRAM_FORMAT \
                or histogram_problem(sample.get(HISTOGRAM_KEY)):
            return MALFORMED
        value = 0.0  # stands for the histogram, checked above
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        return MALFORMED
    if not isinstance(sample.get("kind"), str) or sample["kind"] not in KINDS:
        return MALFORMED
    if not isinstance(labels, dict) or not all(isinstance(v, str) and _utf8(v)
                                               for v in labels.values()):
        return MALFORMED
    if isinstance(value, bool) or not (isinstance(value, int | float) or (
            isinstance(value, str) and value in NONFINITE)):
        return MALFORMED
    if type(timestamp) is not int or not MIN_MS <= timestamp <= MAX_MS:
        return MALFORMED
    if account is not None and not (isinstance(account, str) and account and _utf8(account)):
        return MALFORMED
    if any(k == "__name__" or not LABEL_RE.fullmatch(k) for k in labels):
        return INVALID_LABEL
    return None


def histogram_problem(shown: Any) -> bool:
    """Whether a record's ``histogram`` object is not a native histogram as
    :func:`native_sample` writes one (docs/spec.md §4): ``schema`` an integer −4..8,
    ``zero_threshold`` a finite number ≥ 0, ``zero_count`` and ``count`` integers 0..2^63−1
    (never booleans), ``sum`` a number or ``"+Inf"``, ``"-Inf"``, ``"NaN"``, ``positive``
    and ``negative`` lists of [index, count] pairs — indexes strictly increasing, each one a
    double's bucket can have at that schema, counts integers 1..2^63−1 — and ``count`` at
    least ``zero_count`` plus the buckets' counts (more only by NaNs observed, in no bucket).
    Other keys are ignored, as a sample's are."""
    if not isinstance(shown, dict):
        return True
    schema, threshold = shown.get("schema"), shown.get("zero_threshold")
    if type(schema) is not int or not SCHEMA_MIN <= schema <= SCHEMA_MAX:
        return True
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) \
            or not 0 <= threshold <= _MAX_DOUBLE:
        return True
    zero_count, count = shown.get("zero_count"), shown.get("count")
    if not (type(zero_count) is int and type(count) is int
            and 0 <= zero_count <= MAX_HISTOGRAM_COUNT and 0 <= count <= MAX_HISTOGRAM_COUNT):
        return True
    total = shown.get("sum")
    if isinstance(total, bool) or not (isinstance(total, int | float) or (
            isinstance(total, str) and total in NONFINITE)):
        return True
    if isinstance(total, int) and abs(total) > _MAX_DOUBLE:  # no double (not from JSON)
        return True
    in_buckets = zero_count
    low, high = _INDEX_RANGE[schema]
    for side in ("positive", "negative"):
        pairs = shown.get(side)
        if not isinstance(pairs, list):
            return True
        last = low - 1
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int
                    and type(pair[1]) is int and last < pair[0] <= high
                    and 0 < pair[1] <= MAX_HISTOGRAM_COUNT):
                return True
            last = pair[0]
            in_buckets += pair[1]
    return in_buckets > count


def record_histogram(shown: Mapping[str, Any]) -> NativeHistogram:
    """The native histogram of a record's ``histogram`` object, checked
    (:func:`histogram_problem` found nothing wrong): :func:`native_sample`'s inverse."""
    return NativeHistogram(shown["schema"], float(shown["zero_threshold"]), shown["zero_count"],
                           shown["count"], sample_number(shown["sum"]),
                           {i: c for i, c in shown["positive"]},
                           {i: c for i, c in shown["negative"]})


def sample_number(shown: float | str) -> float:
    """The double a sample's value stands for: :func:`sample_value`'s inverse (its text forms
    of the non-finite numbers, :data:`~l2m.engine.partials.NONFINITE`, read back)."""
    if isinstance(shown, str):
        return NONFINITE.get(shown, math.nan)
    return float(shown)


def batch_time(header: bytes | str | None) -> int | None:
    """The micro-batch time of a :data:`TIME_HEADER` (ASCII decimal ms), or None when it is
    absent or not such a number."""
    if isinstance(header, str):
        header = header.encode("ascii", "replace")
    if not header or len(header) > _MAX_TIME_DIGITS or not header.isdigit():
        return None
    at = int(header)
    return at if at <= MAX_MS else None


_NOT_TEXT = object()


def _header_text(header: bytes | str | None) -> str | object | None:
    """A header's text, None when absent, :data:`_NOT_TEXT` when it is not UTF-8."""
    if header is None or isinstance(header, str):
        return header
    try:
        return header.decode()
    except UnicodeDecodeError:
        return _NOT_TEXT


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: no protobuf string can carry it
        return False
    return True
