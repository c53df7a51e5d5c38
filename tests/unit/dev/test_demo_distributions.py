"""`l2m demo`'s table (l2m/dev/demo.py, render_table) with native histogram and quantile
samples (issue 56): a native histogram shows its count and sum, a series' quantiles share
one row, and no sample without ``value`` breaks the view."""

from __future__ import annotations

from typing import Any

from l2m.dev.demo import render_table

T = 1_795_491_000_000


def native(name: str, labels: dict[str, str], count: int, total: float | str,
           kind: str = "counter", ts: int = T) -> dict[str, Any]:
    return {"name": name, "kind": kind, "labels": labels, "timestamp": ts, "account": None,
            "rule": "r", "format": 2,
            "histogram": {"schema": 3, "zero_threshold": 2.938735877055719e-39,
                          "zero_count": 0, "count": count, "sum": total,
                          "positive": [[13, count]], "negative": []}}


def quantile(q: str, value: float, service: str = "cart", ts: int = T) -> dict[str, Any]:
    return {"name": "lat_q_ms", "kind": "gauge", "labels": {"quantile": q, "service": service},
            "value": value, "timestamp": ts, "account": None, "rule": "q"}


def test_native_histograms_and_quantiles_have_one_readable_row_each() -> None:
    samples = [
        native("lat_ms", {"service": "cart"}, 40, 1234.5),
        native("size_bytes", {}, 3, "+Inf", kind="gauge"),
        quantile("0.99", 98.7), quantile("0.5", 12.25), quantile("0.9", 50),
        # an older window's quantile: the newer window's row stands
        quantile("0.5", 1, ts=T - 60_000),
        # a classic family: buckets hidden, sum and count shown
        {"name": "lat_ms_bucket", "kind": "counter", "labels": {"le": "5"}, "value": 1,
         "timestamp": T},
        {"name": "lat_ms_count", "kind": "counter", "labels": {}, "value": 40, "timestamp": T},
    ]
    assert render_table(samples, rows=10) == [
        "metric       labels                                     value  kind    time",
        "lat_ms       service=cart                   n=40 sum=1,234.50  counter 03:30:00",
        "lat_ms_count                                               40  counter 03:30:00",
        "lat_q_ms     service=cart q0.5: 12.25  q0.9: 50  q0.99: 98.70  gauge   03:30:00",
        "size_bytes                                       n=3 sum=+Inf  gauge   03:30:00",
    ]


def test_a_sample_without_value_or_histogram_does_not_break_the_view() -> None:
    odd = {"name": "odd", "kind": "counter", "labels": {}, "timestamp": T}
    assert render_table([odd], rows=5)[1] == "odd             nan  counter 03:30:00"
