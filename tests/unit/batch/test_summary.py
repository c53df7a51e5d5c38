"""The run's summary per rule (l2m.batch.summary, issue 55 item 3): logs matched, series
(distinct label sets: a histogram family is one, a gauge's series once across its windows),
the most series in one window, each group-by label's distinct values and the logs refused
per cap — counted over the samples written, so one process and Spark's tasks agree."""

from __future__ import annotations

import json
from collections import defaultdict

import orjson

from l2m.batch.local import RunSettings, run_local
from l2m.batch.summary import BackfillSummary
from l2m.policy.limits import Limits, SeriesLimits
from l2m.rules.loader import load_text

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start

RULES, PROBLEMS = load_text("""\
rules:
  - {id: hits, name: hits_total, kind: counter, query: '*', aggregation: count,
     group_by: [service, user]}
  - {id: gauge, name: ms, kind: gauge, query: '*', aggregation: sum, field: ms,
     group_by: [service]}
  - {id: lat, name: lat_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [10, 100], group_by: [service]}
  - {id: plain, name: all_total, kind: counter, query: '*', aggregation: count}
  - {id: ids, name: ids_total, kind: counter, query: '*', aggregation: count,
     group_by: [request_id], max_series: 3}
  - {id: none, name: none_total, kind: counter, query: 'nothing:here', aggregation: count}
""")


def _logs() -> list[bytes]:
    """10 logs over 3 windows: services a, b, c, a | b, c, a, b | c, c; users u0–u3
    (absent from one log, and "\\u0000x" in one; log 9 repeats log 8's pair); request ids
    all distinct."""
    logs = []
    for i in range(10):
        log = {"@timestamp": T0 + 60_000 * (i // 4) + i, "service": "abc"[i % 3] if i < 8
               else "c", "user": f"u{i % 4}", "ms": 7 * i, "request_id": f"r{i}"}
        if i == 5:
            del log["user"]
        if i == 6:
            log["user"] = "\x00x"
        if i == 9:
            log["user"] = "u0"  # (c, u0) again
        logs.append(orjson.dumps(log))
    return logs


def _run(limits: Limits | None = None) -> BackfillSummary:
    assert PROBLEMS == []
    return run_local(RunSettings(limits=limits).routing(RULES), _logs()).summary


def test_series_windows_and_labels_are_counted_per_rule():
    summary = _run(limits=None)
    assert summary.matches == {"hits": 10, "gauge": 10, "lat": 10, "plain": 10, "ids": 10,
                               "none": 0}
    # hits: the (service, user) pairs of the 10 logs; ids: one per log, no cap without limits
    assert summary.series_created == {"hits": 9, "gauge": 3, "lat": 3, "plain": 1, "ids": 10}
    # gauge windows: 3, 3 and 1 series
    assert summary.window_series == {"gauge": 3}
    assert summary.label_values == {
        "hits": {"service": 3, "user": 5}, "gauge": {"service": 3}, "lat": {"service": 3},
        "plain": {}, "ids": {"request_id": 10}, "none": {}}
    # hits' series without a user: (c, absent) of log 5
    assert summary.labelled == {
        "hits": {"service": 9, "user": 8}, "gauge": {"service": 3}, "lat": {"service": 3},
        "plain": {}, "ids": {"request_id": 10}, "none": {}}
    assert summary.largest_label("hits") == ("user", 5)
    assert summary.largest_label("plain") is None
    # a histogram family: _bucket x3, _sum, _count per series, 5 samples for one series
    assert summary.samples_per_rule["lat"] == 15


def test_the_counts_match_the_samples_json():
    run = run_local(RunSettings(limits=None).routing(RULES), _logs())
    series: dict[str, set[tuple[tuple[str, str], ...]]] = defaultdict(set)
    values: dict[tuple[str, str], set[str]] = defaultdict(set)
    for line in run.lines:
        sample = json.loads(line)
        labels = tuple(sorted((k, v) for k, v in sample["labels"].items() if k != "le"))
        series[sample["rule"]].add(labels)
        for name, value in labels:
            values[(sample["rule"], name)].add(value)
    assert run.summary.series_created == {rule: len(s) for rule, s in series.items()}
    assert {(rule, name): count for rule, counts in run.summary.label_values.items()
            for name, count in counts.items()} == \
        {key: len(v) for key, v in values.items()}


def test_the_overflow_series_is_a_series_and_refused_logs_go_by_cap():
    summary = _run(Limits(series=SeriesLimits()))
    # ids: 3 admitted (r0, r1, r2 — key order) and the overflow series
    assert summary.series_created["ids"] == 4
    assert summary.label_values["ids"] == {"request_id": 3}
    assert summary.refused == {"ids (rule)": 7}
    assert summary.refused_logs("ids") == {"rule": 7}
    assert summary.refused_logs("hits") == {}
    summary.refused.update({"hits (account)": 2, "hits (rule)": 1, "hits (metric)": 3})
    assert list(summary.refused_logs("hits").items()) == [("rule", 1), ("metric", 3),
                                                          ("account", 2)]


def test_render_rules_is_an_aligned_table_in_load_order():
    assert _run(Limits(series=SeriesLimits())).render_rules() == [
        "rule   logs matched  samples  series  most in a window  largest label (values)"
        "  logs refused (cap)",
        "hits             10        9       9                 -  user (5)                -",
        "gauge            10        7       3                 3  service (3)             -",
        "lat              10       15       3                 -  service (3)             -",
        "plain            10        1       1                 -  -                       -",
        "ids              10        4       4                 -  request_id (3)          "
        "7 rule",
        "none              0        0       0                 -  -                       -",
    ]


def test_render_shows_the_table_under_per_rule():
    text = _run(Limits(series=SeriesLimits())).render()
    assert "\nper rule:\n  rule   logs matched  samples  series" in text
    assert "series refused:     7 logs (counted into overflow series" in text
    assert "  ids (rule): 7" in text


def test_thousands_separators_and_an_empty_run():
    summary = BackfillSummary.for_rules(RULES)
    summary.matches["hits"] = 1_234_567
    summary.series_created["hits"] = 12_345
    summary.label_values["hits"] = {"service": 3, "user": 12_000}
    assert summary.render_rules()[1].split() == ["hits", "1,234,567", "0", "12,345", "-",
                                                 "user", "(12,000)", "-"]
    empty = run_local(RunSettings().routing(RULES), []).summary
    assert empty.series_created == {} and empty.window_series == {}
    assert empty.render_rules()[1].split()[:4] == ["hits", "0", "0", "0"]
