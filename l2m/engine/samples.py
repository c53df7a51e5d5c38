"""Aggregates → metric samples (SPEC §3–4). Pure Python, shared by backfill, the counter
state and the sink."""

from __future__ import annotations

import decimal
import hashlib
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
import pandas as pd

from l2m.rules.model import Rule
from l2m.state.format import dump_float, load_float

# Exact sums: wide enough that adding never rounds; past ±1e20 (what Spark's decimal(38,18)
# holds) a sum falls back to doubles, as the Spark aggregate does.
_EXACT = decimal.Context(prec=80)
_EXACT_LIMIT = Decimal(10) ** 20


@dataclass
class Partial:
    """A mergeable aggregate of one series (window, bucket): what the Spark aggregate
    (:mod:`l2m.engine.preaggregate`) produces per group, and what the counter state keeps."""

    matches: int = 0
    n: int = 0
    sum: float = 0.0
    exact: Decimal | None = Decimal(0)  # None once a value or the total does not fit
    min: float | None = None
    max: float | None = None
    ts: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Partial:
        exact = row["exact_sum"]
        if row["exact_n"] != row["n"] or exact is None:
            exact = None
        return cls(row["matches"], row["n"], row["sum"] or 0.0,
                   None if exact is None else Decimal(exact), row["min"], row["max"], row["ts"])

    def merge(self, other: Partial) -> Partial:
        exact = None
        if self.exact is not None and other.exact is not None:
            exact = _EXACT.add(self.exact, other.exact)
            if abs(exact) >= _EXACT_LIMIT:
                exact = None
        return Partial(
            self.matches + other.matches, self.n + other.n, self.sum + other.sum, exact,
            _pick(min, self.min, other.min), _pick(max, self.max, other.max),
            _pick(max, self.ts, other.ts),
        )

    def dump(self) -> list[Any]:
        """The JSON-able form the streaming state stores (:mod:`l2m.state.function`, format 1: exact
        sum as a string, non-finite floats as strings)."""
        return [self.matches, self.n, dump_float(self.sum),
                None if self.exact is None else str(self.exact),
                dump_float(self.min), dump_float(self.max), self.ts]

    @classmethod
    def load(cls, stored: list[Any]) -> Partial:
        matches, n, total, exact, lo, hi, ts = stored
        return cls(matches, n, load_float(total) or 0.0,
                   None if exact is None else Decimal(exact), load_float(lo), load_float(hi), ts)

    def merged_into(self, stored: list[Any] | None) -> list[Any]:
        """The stored form of ``stored`` (if any) merged with this partial."""
        return (self if stored is None else Partial.load(stored).merge(self)).dump()

    @property
    def total(self) -> float:
        """The sum: exact when possible, else the double sum."""
        return float(self.exact) if self.exact is not None else self.sum


def _pick(fn: Any, a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return fn(a, b)


def sample_value(value: float) -> float | str:
    """A sample's value: a finite number as itself; a sum that left the double range as
    Prometheus writes it, the string ``"+Inf"``, ``"-Inf"`` or ``"NaN"`` (JSON has no such
    numbers, and ``null`` would hide it)."""
    value = float(value)
    if math.isfinite(value):
        return value
    return dump_float(value)  # type: ignore[return-value]


def is_finite_sample(s: Mapping[str, Any]) -> bool:
    return not isinstance(s["value"], str)


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


def series_samples(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int,
                   agg: Partial) -> list[dict[str, Any]]:
    """The sample of a non-histogram series (and window, for gauges); none without values."""
    if agg.n <= 0:
        return []
    value = {
        "count": lambda: float(agg.n),
        "sum": lambda: agg.total,
        "avg": lambda: agg.total / agg.n,
        "min": lambda: agg.min,
        "max": lambda: agg.max,
    }[rule.aggregation]()
    return [sample(rule, rule.name, dict(labels), value, timestamp)]


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
        part = buckets.get(le)
        cumulative += part.n if part else 0
        out.append(sample(rule, f"{rule.name}_bucket", {**base, "le": le}, cumulative, ts))
    out.append(sample(rule, f"{rule.name}_bucket", {**base, "le": "+Inf"}, total.n, ts))
    out.append(sample(rule, f"{rule.name}_sum", dict(base), total.total, ts))
    out.append(sample(rule, f"{rule.name}_count", dict(base), total.n, ts))
    return out


def frame_partials(frame: pd.DataFrame) -> Iterator[tuple[str, str, Partial]]:
    """(series, le or "", partial) of each row of a pre-aggregated frame."""
    columns = [frame[c].tolist() for c in ("series", "le", "matches", "n", "sum", "exact_sum",
                                           "exact_n", "min", "max", "ts")]
    for name, le, matches, n, total, exact, exact_n, lo, hi, ts in zip(*columns, strict=True):
        yield name, le if isinstance(le, str) else "", Partial(
            int(matches), int(n), _float(total) or 0.0,
            _exact(exact, int(exact_n), int(n)),
            _float(lo), _float(hi), None if ts is None or ts != ts else int(ts))


def _exact(exact: Any, exact_n: int, n: int) -> Decimal | None:
    """A partial's exact sum; one without values sums to an exact 0 (SQL's sum is null)."""
    if n == 0:
        return Decimal(0)
    return exact if isinstance(exact, Decimal) and exact_n == n else None


def _float(value: Any) -> float | None:
    return None if value is None or value != value else float(value)


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
    static labels plus one per present group-by value, sorted by name."""
    labels = list(rule.labels)
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


def samples_frame(samples: list[dict[str, Any]]) -> pd.DataFrame:
    """The state stage's output rows: deterministic Kafka key and JSON value per sample."""
    return pd.DataFrame({"key": [series_key(s).decode() for s in samples],
                         "value": [orjson.dumps(s).decode() for s in samples]})


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
