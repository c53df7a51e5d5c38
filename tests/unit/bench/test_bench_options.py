"""The benchmark harness's options (benchmarks/__main__.py): where results go, and that the
quick profile's tiny-data figures are not graded against the full profile's targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.__main__ import QUICK_GOAL, RESULTS, render_markdown, results_folder, ungraded


def test_results_go_where_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert results_folder(None, quick=True) == tmp_path / "bench-results"
    assert results_folder(None, quick=False) == RESULTS  # the committed results
    assert results_folder("elsewhere", quick=True) == Path("elsewhere")
    assert results_folder("elsewhere", quick=False) == Path("elsewhere")


def targets() -> list[dict[str, object]]:
    return [{"name": "end-to-end drain / machine limit (read + parse)", "goal": ">= 0.40",
             "measured": 0.05, "met": False},
            {"name": "validate 200 rules, s", "goal": "< 10", "measured": 0.4, "met": True},
            {"name": "reference", "goal": "≈ 11 (reference)", "measured": 3, "met": None}]


def test_quick_targets_are_not_graded() -> None:
    quick = ungraded(targets())
    assert [t["met"] for t in quick] == [None, None, None]
    assert {t["goal"] for t in quick} == {QUICK_GOAL}
    assert [t["full_goal"] for t in quick] == [">= 0.40", "< 10", "≈ 11 (reference)"]
    assert [t["measured"] for t in quick] == [0.05, 0.4, 3]


def result(profile: str, graded: list[dict[str, object]]) -> dict[str, object]:
    machine = {"date": "today", "cpus": 2, "memory_gib": 24, "platform": "linux",
               "python": "3.11", "pyspark": "4.3.0", "pyarrow": "20"}
    limit = {"consume": {"per_s": 1, "processes": 2, "records": 1},
             "parse": {"per_s": 1, "mb_per_s": 1, "avg_log_bytes": 1}, "read_parse_per_s": 1}
    return {"profile": profile, "machine": machine, "targets": graded, "limit": limit,
            "drain": []}


def test_the_quick_report_says_it_is_a_smoke_test() -> None:
    text = render_markdown(result("quick", ungraded(targets())))
    assert "smoke test" in text and "not comparable" in text and "not graded" in text
    assert "**no**" not in text and "| yes |" not in text
    assert "| end-to-end drain / machine limit (read + parse) | n/a (quick) | 0.05 | " \
           "n/a (quick) | >= 0.40 |" in text
    full = render_markdown(result("full", targets()))
    assert "smoke test" not in full
    assert "| end-to-end drain / machine limit (read + parse) | >= 0.40 | 0.05 | **no** |" \
        in full


def test_the_once_targets_are_graded_on_the_shipped_plan() -> None:
    """Issue 21's `--once` goals are graded on the source as shipped (the plan def2d50's
    figures reproduce); the profile's micro-batches are shown beside them, not graded."""
    from benchmarks.__main__ import REFERENCE_GOAL, state_targets
    from benchmarks.once import batches_rate

    once = {"records": 1_000_000, "per_batch": 160_000, "whole_s": 20.0,
            "whole_logs_per_s": 50_000, "steady_logs_per_s": 90_000,
            "ceiling": {"per_s": 200_000},
            "shipped": {"logs": 1_000_016, "whole_s": 15.0, "whole_logs_per_s": 66_668,
                        "batches": [{"batch": 0, "logs": 1_000_016, "ms": 8_000}]}}
    assert batches_rate(once["shipped"]["batches"]) == 125_002
    assert batches_rate([{"logs": 100, "ms": 500}, {"logs": 300, "ms": 1_500}]) == 200
    lines = state_targets({"once": once}, {})
    assert [(t["goal"], t["measured"], t["met"]) for t in lines] == [
        (">= 0.5", 0.625, True), (">= 0.3", 0.333, True),
        (REFERENCE_GOAL, 0.45, None), (REFERENCE_GOAL, 0.25, None)]
    assert "as shipped (1 batch, the first's cold start included)" in lines[0]["name"]
    assert lines[2]["name"].startswith("reference: steady micro-batches of 160,000 logs")
    slow = {**once, "shipped": {**once["shipped"], "whole_logs_per_s": 50_000,
                                "batches": [{"batch": 0, "logs": 1_000_016, "ms": 12_000}]}}
    assert [t["met"] for t in state_targets({"once": slow}, {})] == [False, False, None, None]


def test_the_smoke_profile_runs_every_scenario_of_the_quick_one() -> None:
    """The harness's own test runs the smoke profile: a scenario the quick profile has and
    the smoke one lacks would go untested."""
    from benchmarks.__main__ import PROFILES

    smoke, quick = PROFILES["smoke"], PROFILES["quick"]
    assert set(quick) <= set(smoke)
    assert "cluster" not in smoke and "cluster" not in quick  # the full profile's alone
    assert [s.label for s in smoke["skews"]] == [s.label for s in quick["skews"]]
    assert smoke["best_of"] == 1 and smoke["overlap"] and not smoke["warm_up"]
    for small in (smoke, quick):  # the backlog in one micro-batch of two tasks
        assert small["per_batch"] == small["records"] == 2 * small["per_task"]


def test_the_smoke_report_has_its_own_files_and_goal() -> None:
    from benchmarks.__main__ import SMOKE_GOAL, outputs

    assert outputs("full") == ("latest.json", "RESULTS.md", "")
    assert outputs("quick") == ("quick.json", "QUICK.md", "quick-")
    assert outputs("smoke") == ("smoke.json", "SMOKE.md", "smoke-")
    smoke = ungraded(targets(), "smoke")
    assert {t["goal"] for t in smoke} == {SMOKE_GOAL} == {"n/a (smoke)"}
    assert [t["met"] for t in smoke] == [None, None, None]
    text = render_markdown(result("smoke", smoke))
    assert text.startswith("# Benchmark results (smoke profile: a smoke test)")
    assert "python -m benchmarks --smoke" in text and "not graded" in text
    assert "| end-to-end drain / machine limit (read + parse) | n/a (smoke) | 0.05 | " \
           "n/a (smoke) | >= 0.40 |" in text


def test_quick_and_smoke_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--quick", "--smoke"])
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
