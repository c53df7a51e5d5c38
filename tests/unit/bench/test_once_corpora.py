"""The `once` scenario over both corpora (issue 58): each run's job reads its corpus's rules,
and each corpus is graded against the ceiling of its own backlog."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from benchmarks.__main__ import PROFILES, corpus_targets
from benchmarks.once import RULES, job_file


def test_each_corpus_is_read_with_its_own_rules(tmp_path: Path) -> None:
    topics = SimpleNamespace(logs="l", metrics="m", dead_letters="d")
    text = job_file(tmp_path, "127.0.0.1:9", topics, 200_000, 100_000,
                    RULES["varied"]).read_text()
    assert f"rules: [{RULES['varied']}]" in text
    assert "source: {max_records_per_trigger: 200000, max_records_per_task: 100000}" in text
    assert "source:" not in job_file(tmp_path, "127.0.0.1:9", topics, None, None).read_text()
    assert RULES["varied"].name == "rules_text.yaml" and RULES["varied"].exists()


def test_the_full_profile_reads_both_corpora_in_micro_batches_of_200000() -> None:
    once = PROFILES["full"]["once"]
    assert (once["records"], once["per_batch"], once["per_task"]) == (1_000_000, 200_000,
                                                                      100_000)
    assert once["varied"] == {"records": 1_000_000}
    assert PROFILES["smoke"]["once"]["varied"]["shipped"] is False


def _run(corpus: str, steady: int | None, whole: int, shipped: int | None) -> dict:
    run = {"corpus": corpus, "rules": RULES[corpus].name, "records": 1_000_000,
           "per_batch": 200_000, "steady_logs_per_s": steady, "whole_logs_per_s": whole,
           "whole_s": 20.0, "ceiling": {"before": 180_000, "after": 200_000, "per_s": 200_000}}
    if shipped is not None:
        run["shipped"] = {"whole_logs_per_s": shipped, "whole_s": 14.0,
                          "batches": [{"batch": 0, "logs": 1_000_016, "ms": 9_000}]}
    return run


def test_both_corpora_are_graded_steady_and_whole_against_their_own_ceiling() -> None:
    once = {**_run("harness", 130_000, 72_000, 60_000), "varied": _run("varied", 110_000,
                                                                       50_000, None)}
    lines = corpus_targets({"once": once})
    assert [(t["goal"], t["measured"], t["met"]) for t in lines] == [
        (">= 0.6", 0.65, True), (">= 0.35", 0.36, True), (">= 0.35", 0.3, False),
        (">= 0.6", 0.55, False), (">= 0.35", 0.25, False)]
    assert lines[0]["name"] == ("harness corpus (rules.yaml), 1,000,000 logs: steady "
                                "micro-batches of 200,000 (after the first) / consume + orjson "
                                "ceiling")
    assert lines[0]["note"] == "130,000 logs/s; ceiling 180,000 before, 200,000 after"
    assert lines[2]["name"].endswith("as shipped (1 batch), start-up included / ceiling")
    assert lines[3]["name"].startswith("varied corpus (rules_text.yaml)")
    # a result from before issue 58 (no corpus named) adds no line
    assert corpus_targets({"once": {"records": 1}}) == [] == corpus_targets({})
