"""benchmarks/churn.py's parts that need no JVM: new series and refusals from the job's
tallies, the series a burst offers, the summary, targets and RESULTS.md section."""

from __future__ import annotations

from typing import Any

import orjson

from benchmarks.churn import (
    COUNTER_RULE,
    GAUGE_RULE,
    WINDOW_MS,
    ChurnLogs,
    churn_markdown,
    churn_targets,
    new_series,
    refused_logs,
    summarise_mode,
)
from l2m.state.format import CUMULATIVE
from l2m.state.tally import RefusedCount, SampleCount, SeriesCount


def test_new_series_counts_each_keys_growth() -> None:
    """A key's growth counts, a new key counts whole, a key that fell or vanished (a closed
    window) counts nothing."""
    before = {SeriesCount(COUNTER_RULE, 0, CUMULATIVE): 10,
              SeriesCount(COUNTER_RULE, 1, CUMULATIVE): 5,
              SeriesCount(GAUGE_RULE, 0, 60_000): 7,
              SeriesCount(GAUGE_RULE, 1, 60_000): 4}
    after = {SeriesCount(COUNTER_RULE, 0, CUMULATIVE): 25,
             SeriesCount(COUNTER_RULE, 1, CUMULATIVE): 5,
             SeriesCount(GAUGE_RULE, 0, 60_000): 3,
             SeriesCount(GAUGE_RULE, 0, 120_000): 30,
             SeriesCount("status", 0, CUMULATIVE): 2}
    assert new_series(before, after) == {COUNTER_RULE: 15, GAUGE_RULE: 30, "status": 2}


def test_refused_logs_are_the_growth_of_the_summed_counts() -> None:
    before: dict[Any, float] = {RefusedCount(COUNTER_RULE, "", "rule"): 100,
                                SampleCount(COUNTER_RULE): 9}
    after: dict[Any, float] = {RefusedCount(COUNTER_RULE, "", "rule"): 350,
                               RefusedCount(GAUGE_RULE, "", "rule"): 40,
                               SampleCount(COUNTER_RULE): 90}
    assert refused_logs(before, after) == {COUNTER_RULE: 250, GAUGE_RULE: 40}
    assert refused_logs(after, after) == {}


def test_a_burst_offers_a_request_per_log_and_each_user_window_once() -> None:
    """Counted from the logs themselves: every request_id is new; a (user, window) pair is new
    once per job, and only for logs the gauge's query takes (with http.duration_ms)."""
    logs = ChurnLogs(5_000, seed=3)
    lines = logs.burst(2_000)
    docs = [orjson.loads(line) for line in lines]
    assert len({d["request_id"] for d in docs}) == 2_000
    assert logs.offered[COUNTER_RULE] == 2_000
    first = logs.offered[GAUGE_RULE]
    timed = [d for d in docs if "duration_ms" in (d.get("http") or {})]
    assert 0 < first <= len(timed) < 2_000
    again = logs.burst(2_000)
    assert logs.offered[COUNTER_RULE] == 2_000
    pairs = {(u, w) for u, w in logs.pairs}
    assert len(pairs) == first + logs.offered[GAUGE_RULE]
    assert all(w % WINDOW_MS == 0 for _u, w in pairs)
    assert len(again) == 2_000


def _step(kind: str, ms: int, made: dict[str, int] | None = None,
          offered: dict[str, int] | None = None, refused: int = 0, live: int = 0,
          logs: int = 2_000) -> dict[str, Any]:
    return {"kind": kind, "logs": logs, "batches": 1, "batch_ms": ms, "durations": [],
            "new_series": made or {}, "offered": offered or {},
            "refused_logs": {COUNTER_RULE: refused} if refused else {},
            "live_series": live, "state_rows": 0, "produce_s": 0.1}


STEPS = [
    _step("steady", 2_500, logs=250_000),
    _step("before", 400), _step("before", 500), _step("before", 450),
    _step("burst", 50_000, {COUNTER_RULE: 250_000, GAUGE_RULE: 240_000, "status": 3},
          {COUNTER_RULE: 250_000, GAUGE_RULE: 240_000}, live=490_120, logs=250_000),
    _step("burst", 40_000, {COUNTER_RULE: 250_000, GAUGE_RULE: 250_000},
          {COUNTER_RULE: 250_000, GAUGE_RULE: 250_000}, live=980_000, logs=250_000),
    _step("after", 900, live=960_000), _step("after", 600, live=960_000),
    _step("after", 700, live=960_000),
]


def test_summary_of_an_uncapped_job() -> None:
    m = summarise_mode(STEPS)
    assert m["steady"] == {"logs": 250_000, "batch_ms": 2_500, "logs_per_s": 100_000}
    assert [b["new_series"] for b in m["bursts"]] == [490_003, 500_000]
    assert [b["new_series_per_s"] for b in m["bursts"]] == [9_800, 12_500]
    assert m["bursts"][0]["id_rule_series"] == {COUNTER_RULE: 250_000, GAUGE_RULE: 240_000}
    assert m["offered_made"] is True
    assert m["new_series"] == 990_003
    assert m["new_series_per_s"] == 11_000  # 990,003 in 90 s
    assert m["burst_logs_per_s"] == 5_556
    assert m["trickle_before_median_ms"] == 450
    assert m["trickle_after_median_ms"] == 700
    assert m["trickle_ratio"] == 1.56
    assert m["live_series"] == 980_000


def test_a_series_offered_but_not_made_is_flagged() -> None:
    steps = [*STEPS[:4], _step("burst", 1_000, {COUNTER_RULE: 1_999}, {COUNTER_RULE: 2_000}),
             _step("after", 500)]
    m = summarise_mode(steps)
    assert m["offered_made"] is False
    assert m["trickle_ratio"] == 1.11


def _result() -> dict[str, Any]:
    capped = [*STEPS[:4],
              _step("burst", 8_000, {COUNTER_RULE: 10_001, GAUGE_RULE: 80_008},
                    {COUNTER_RULE: 250_000, GAUGE_RULE: 240_000}, refused=239_999,
                    logs=250_000),
              _step("after", 420)]
    return {"burst": 250_000, "bursts": 2, "probes": 3, "probe_logs": 2_000,
            "modes": {"uncapped": summarise_mode(STEPS), "capped": summarise_mode(capped)}}


def test_targets_grade_the_uncapped_job() -> None:
    targets = churn_targets(_result())
    assert [(t["measured"], t["met"]) for t in targets] == [(11_000, False), (1.56, False)]
    assert targets[0]["goal"] == ">= 50,000"
    assert targets[1]["goal"] == "<= 1.5"
    assert targets[1]["note"] == "700 vs 450 ms (medians)"
    assert churn_targets({"burst": 1, "modes": {}}) == []


def test_markdown_lists_every_burst_of_both_modes() -> None:
    text = "\n".join(churn_markdown(_result()))
    assert "| uncapped | 1 | 50,000 | 490,003 | 0 | 9,800 | 5,000 |" in text
    assert "| capped | 1 | 8,000 | 90,009 | 239,999 | 11,251 | 31,250 |" in text
    assert "| uncapped | 2,500 | 100,000 | 11,000 | 450 | 700 | 1.56 |" in text
    assert "the id rules' new series equal the series their logs offered" in text
