"""Aggregates → metric samples (SPEC §3–4). Pure Python, shared by backfill and the sink."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from l2m.rules import Rule


def sample(rule: Rule, name: str, labels: dict[str, str], value: float,
           timestamp: int) -> dict[str, Any]:
    return {
        "name": name,
        "kind": rule.kind,
        "labels": labels,
        "value": float(value),
        "timestamp": int(timestamp),
        "account": rule.target_account,
        "rule": rule.id,
    }


def samples_for(rule: Rule, labels: Iterable[tuple[str, str]], timestamp: int, n: int,
                total: float | None, minimum: float | None, maximum: float | None,
                buckets: Iterable[int] = ()) -> list[dict[str, Any]]:
    """The samples of one series (and window, for gauges). ``n`` counts contributing logs;
    nothing is emitted when it is 0. ``buckets`` are cumulative counts per bound."""
    if n <= 0:
        return []
    base = dict(labels)
    agg = rule.aggregation
    if agg == "histogram":
        out = []
        counts = list(buckets)[: len(rule.bucket_labels)]
        for le, count in zip(rule.bucket_labels, counts, strict=True):
            out.append(sample(rule, f"{rule.name}_bucket", {**base, "le": le}, count, timestamp))
        out.append(sample(rule, f"{rule.name}_bucket", {**base, "le": "+Inf"}, n, timestamp))
        out.append(sample(rule, f"{rule.name}_sum", dict(base), total or 0.0, timestamp))
        out.append(sample(rule, f"{rule.name}_count", dict(base), n, timestamp))
        return out
    value = {
        "count": lambda: float(n),
        "sum": lambda: total,
        "avg": lambda: (total or 0.0) / n,
        "min": lambda: minimum,
        "max": lambda: maximum,
    }[agg]()
    return [sample(rule, rule.name, base, value, timestamp)]


def series_key(s: dict[str, Any]) -> bytes:
    """Deterministic Kafka key: per series for counters, per series and window for gauges,
    so a replayed sample overwrites itself downstream."""
    ident = [s["account"], s["rule"], s["name"], sorted(s["labels"].items())]
    if s["kind"] == "gauge":
        ident.append(s["timestamp"])
    return hashlib.sha1(orjson.dumps(ident)).hexdigest().encode()


def to_json_lines(samples: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for s in samples:
        yield orjson.dumps(s) + b"\n"
