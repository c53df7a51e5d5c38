"""Partials → metric samples (SPEC §3–4).

Input: a rule, a series' labels (from its key, :func:`series_labels`), a timestamp and the
series' partials (:class:`~l2m.engine.partials.Partial`, per bucket for histograms). Output:
sample dicts (name, kind, labels, value, timestamp, account, rule), their deterministic Kafka
keys and JSON lines. Pure Python, shared by backfill and the state stage."""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from l2m.engine.admission import OVERFLOW_SERIES
from l2m.engine.columns import PACK_COLUMN, SAMPLE_COLUMNS
from l2m.engine.partials import ARROW_TYPES, Partial, nonfinite_text
from l2m.policy.limits import OVERFLOW_LABEL
from l2m.rules.model import Rule

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
# A state call's samples from this many on leave the state stage packed (samples_frame): one
# binary value instead of a row each, which pyspark converts to Arrow and the JVM converts
# from Arrow and back for the sink's worker — with 100,000 tenant rules ≈ 95,000 samples a
# batch (benchmarks/README.md, "Session 26"). Fewer stay rows: in Python a pack costs ≈ 0.3
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
    return is_finite_shown(s["value"])


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


def rule_samples(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int | None,
                 parts: Mapping[str, Partial]) -> list[dict[str, Any]]:
    """The samples of one series from its partials keyed by ``le`` ("" outside histograms).
    ``timestamp`` None means: the largest event time counted (counters)."""
    if rule.aggregation == "histogram":
        return family_samples(rule, labels, timestamp, parts)
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
