"""Backfill's counts of native histogram and quantile rules (issue 56): a histogram asking
for classic and native buckets has two match rows per log, yet the summary's logs matched,
the logs refused per cap (admitted_table, and the read tasks' early cuts of
beyond_rule_caps) and the series count each log and series once."""

from __future__ import annotations

import dataclasses

import orjson

from l2m.batch.local import RunSettings, run_local
from l2m.policy.limits import Limits, SeriesLimits
from l2m.rules.loader import load_text
from l2m.rules.model import Aggregation, Rule

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start

_BASE, _PROBLEMS = load_text("""\
rules:
  - {id: both, name: both_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [10, 100], group_by: [service], max_series: 1}
  - {id: nat, name: nat_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [1], group_by: [service]}
  - {id: gh, name: gh_ms, kind: gauge, query: '*', aggregation: histogram, field: ms,
     buckets: [10, 100], group_by: [service], max_series: 2}
  - {id: q, name: q_ms, kind: gauge, query: '*', aggregation: sum, field: ms,
     group_by: [service], max_series: 2}
""")


def _rules() -> list[Rule]:
    """Classic+native counter capped at 1 series, native-only counter, classic+native gauge
    histogram and quantile gauges capped at 2 series a window (built in code)."""
    assert _PROBLEMS == []
    both, nat, gh, q = _BASE
    return [dataclasses.replace(both, native_schema=3),
            dataclasses.replace(nat, buckets=(), bucket_labels=(), native_schema=0),
            dataclasses.replace(gh, native_schema=2),
            dataclasses.replace(q, aggregation=Aggregation.QUANTILES, native_schema=5,
                                quantiles=(0.5, 0.99), quantile_labels=("0.5", "0.99"))]


def _logs() -> list[dict]:
    """41 logs over 4 windows; services a, b, c, one log in 7 without one (series "-",
    first in key order); values with a zero, negatives, a string and missing ones."""
    logs: list[dict] = []
    for i in range(41):
        log: dict = {"@timestamp": T0 + i * 240_000 // 41, "ms": i * 3.5 - 20}
        if i % 7 != 3:
            log["service"] = "abc"[i % 3]
        if i % 11 == 5:
            log["ms"] = "n/a"
        if i % 13 == 6:
            del log["ms"]
        logs.append(log)
    return logs


def _refused(logs: list[dict], cap: int, gauge: bool) -> int:
    """Logs of the series past ``cap`` in key order ("-" first, then "1:a", …) per domain
    (counters: one; gauges: each window), counted from the logs."""
    by_domain: dict[int, dict[str, int]] = {}
    for log in logs:
        domain = (log["@timestamp"] - T0) // 60_000 if gauge else 0
        key = f"1:{log['service']}" if "service" in log else "-"
        series = by_domain.setdefault(domain, {})
        series[key] = series.get(key, 0) + 1
    return sum(n for series in by_domain.values() for key, n in series.items()
               if sorted(series).index(key) >= cap)


def test_each_log_and_series_is_counted_once() -> None:
    logs = _logs()
    routing = RunSettings(limits=Limits(series=SeriesLimits(per_rule=1000))).routing(_rules())
    run = run_local(routing, [orjson.dumps(log) for log in logs])
    summary = run.summary
    assert summary.matches == {"both": 41, "nat": 41, "gh": 41, "q": 41}
    assert (_refused(logs, 1, False), _refused(logs, 2, True)) == (35, 23)
    assert summary.refused == {"both (rule)": 35, "gh (rule)": 23, "q (rule)": 23}
    # Series: "both" keeps "-" and its overflow series; "nat" a..c and "-"; the gauges "-"
    # and "a" in every window, and their overflow series (a histogram family, and a
    # quantiles' samples, are one series).
    assert summary.series_created == {"both": 2, "nat": 4, "gh": 3, "q": 3}
    assert summary.window_series == {"gh": 3, "q": 3}
    samples = [orjson.loads(line) for line in run.lines]
    native = [s for s in samples if s["rule"] == "both" and "histogram" in s]
    # every log counted in the histogram's count once: 41 logs, 7 without a number
    assert sum(s["histogram"]["count"] for s in native) == 41 - 7
    # "-": logs 3, 10, 17, 24, 31 (38's value is a string); the overflow series the rest
    assert [s["value"] for s in samples if s["name"] == "both_ms_count"] == [5.0, 29.0]
    assert [s["histogram"]["count"] for s in native] == [5, 29]
