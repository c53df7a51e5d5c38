"""benchmarks/histograms.py's figures that need no JVM, on a few generated logs: the stored
forms it measures, the quantile error it reports, its RESULTS.md section."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.histograms import (
    MARK,
    VARIANTS,
    WIDE_MAX_BUCKETS,
    log_lines,
    markdown,
    merged,
    quantile_error,
    record,
    state_cost,
    task_rows,
)
from l2m.rules.model import MAX_NATIVE_BUCKETS, NATIVE_MAX_BUCKETS, QUANTILES_MAX_BUCKETS
from l2m.semantics import exphist

LINES = log_lines(3_000)
BY_ID = {v.id: v for v in VARIANTS}


def test_variants_use_the_limits_a_rule_gets() -> None:
    """Without max_buckets a histogram keeps 160 buckets, a quantiles rule 320; the "wide"
    variants ask for 1,000, no more than a rule may."""
    limits = {v.id: (v.max_buckets, v.label) for v in VARIANTS if v.schema is not None}
    assert limits["native-5"] == (NATIVE_MAX_BUCKETS, "native, schema 5")
    assert limits["gauge-quantiles-5"] == (QUANTILES_MAX_BUCKETS,
                                           "gauge, quantiles, schema 5, limit 320")
    assert WIDE_MAX_BUCKETS == 1_000 <= MAX_NATIVE_BUCKETS
    assert limits["native-5-wide"] == (1_000, "native, schema 5, limit 1,000")
    assert limits["gauge-quantiles-5-wide"] == (1_000, "gauge, quantiles, schema 5, limit 1,000")


def _run(date: str, ids: list[str], runs: int = 3) -> dict[str, object]:
    return {"machine": {"date": date, "cpus": 2, "cpu": "test"},
            "load_average": {"before": 1.0, "after": 2.0}, "logs": 3_000, "drain_logs": 8_000,
            "partitions": 4, "per_task": 1_000, "runs": runs, "seconds": 9.5,
            "rules": [{"id": i, "label": BY_ID[i].label, "from": date} for i in ids],
            "growth": {i: [[1, 2]] for i in ids if i in ("native-5-wide", "native-3")}}


def test_a_re_run_replaces_its_rows_and_says_when() -> None:
    whole = _run("whole", [v.id for v in VARIANTS])
    again = merged(whole, _run("later", ["gauge-quantiles-5", "native-5-wide"]),
                   ["gauge-quantiles-5", "native-5-wide"])
    assert [(r["id"], r["from"]) for r in again["rules"]] == [
        (v.id, "later" if v.id in ("gauge-quantiles-5", "native-5-wide") else "whole")
        for v in VARIANTS]
    assert again["reruns"] == [{"ids": ["gauge-quantiles-5", "native-5-wide"], "date": "later",
                                "before": 1.0, "after": 2.0, "seconds": 9.5}]
    assert again["machine"]["date"] == "whole" and list(again["growth"]) == [
        "native-3", "native-5-wide"]
    with pytest.raises(ValueError, match=r"^--only re-runs with the recorded run's options; "
                                         r"these differ: runs 3 \(recorded\) against 1$"):
        merged(whole, _run("later", ["native-3"], runs=1), ["native-3"])


def test_state_cost_of_classic_and_native_histograms() -> None:
    classic = state_cost(BY_ID["classic-10"], LINES)
    native = state_cost(BY_ID["native-3"], LINES)
    both = state_cost(BY_ID["both-3"], LINES)
    assert classic["series"] == native["series"] == both["series"] == 6  # one per service
    assert classic["rows_per_series"] <= 11  # 10 bounds and +Inf
    assert classic["column_bytes_per_series"] is None and classic["schemas_kept"] == []
    assert native["schemas_kept"] == [3]
    # classic and native: each series holds both kinds of rows
    assert both["rows_per_series"] == classic["rows_per_series"] + native["rows_per_series"]
    # the column form holds a count per bucket where the stored form holds a partial
    assert native["column_bytes_per_series"] < native["bytes_per_series"]


def test_the_bucket_limit_lowers_what_the_state_keeps_not_what_the_read_task_sends() -> None:
    fine = state_cost(BY_ID["native-5"], LINES)
    assert max(fine["schemas_kept"]) <= 5 and fine["rows_per_series"] <= 160 + 2
    rows = {v: task_rows(BY_ID[v], LINES, 1_000)["task_rows"] for v in ("classic-10",
                                                                       "native-5")}
    assert rows["native-5"] > rows["classic-10"]


def test_quantile_error_is_within_the_bound_of_the_schema_kept() -> None:
    error = quantile_error(BY_ID["gauge-quantiles-5"], LINES)
    assert error is not None and error["samples"] == 6 * 3 * 1  # services, quantiles, window
    assert error["max_relative_error"] <= error["bound_of_schema_kept"] + 1e-15
    assert error["bound_of_schema"] == exphist.relative_error_bound(5)
    assert quantile_error(BY_ID["classic-10"], LINES) is None


def test_the_results_section_is_replaced_in_place(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import benchmarks.histograms as histograms

    result = orjson.loads(orjson.dumps({
        "machine": {"date": "2026-12-02 08:00 UTC", "cpus": 2, "cpu": "test"},
        "load_average": {"before": 1.0, "after": 2.0}, "logs": 3_000, "drain_logs": 8_000,
        "partitions": 4, "per_task": 1_000, "runs": 1,
        "rules": [{"id": v.id, "label": v.label, "state": state_cost(v, LINES),
                   "read": {"task_rows": 1, "local_logs_per_s": 2},
                   "quantile_error": quantile_error(v, LINES)}
                  for v in (BY_ID["gauge-classic-10"], BY_ID["gauge-quantiles-5"])]}))
    section = markdown(result)
    assert section[0] == section[-1] == MARK
    assert "| gauge, classic, 10 bounds (`gauge-classic-10`) | " in "\n".join(section)
    monkeypatch.setattr(histograms, "ROOT", tmp_path)
    (tmp_path / "benchmarks").mkdir()
    copy = tmp_path / "benchmarks" / "RESULTS.md"
    copy.write_text("# Results\n\nbefore\n")
    record(result, tmp_path)  # no RESULTS.md in the folder itself: only the copy
    first = copy.read_text()
    assert first.startswith("# Results\n\nbefore\n\n" + MARK)
    assert "](results/histograms.png)" in first
    record(result, tmp_path)
    assert copy.read_text() == first
