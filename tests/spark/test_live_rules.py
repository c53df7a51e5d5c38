"""Live rules in the streaming job (issue 23), through the in-memory harness: a micro-batch
replayed after a crash is processed with the rule set it was planned with, even when the job
comes back with other rules; a rule set published while the query runs is used from the next
planned batch. Expected values from the pure-Python reference, segment by segment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.spark.test_harness import generated, rules_of
from tests.support import reference
from tests.support.streamtest import StreamTest

BEFORE = """
rules:
  - {id: x, name: x_total, kind: counter, query: "*", aggregation: count, group_by: [service]}
"""
# x's query changed (the same metric: it continues), y added.
AFTER = """
rules:
  - {id: x, name: x_total, kind: counter, query: "level:error", aggregation: count,
     group_by: [service]}
  - {id: y, name: y_total, kind: counter, query: "*", aggregation: count}
"""


# These tests count batches: no idle source's tick between them (one is due when a multiple of
# the recheck has passed since the last batch; with this one, never while they run).
NO_TICKS = 10**12


def _totals(segments: list[tuple[str, list[bytes]]]) -> dict[tuple[str, Any], float]:
    """Each series' value when every segment's logs are counted with its own rules."""
    out: dict[tuple[str, Any], float] = {}
    for text, lines in segments:
        for s in reference.backfill(rules_of(text), [x.decode() for x in lines]):
            key = (s["rule"], tuple(sorted(s["labels"].items())))
            out[key] = out.get(key, 0) + s["value"]
    return out


def _got(st: StreamTest) -> dict[tuple[str, Any], float]:
    return {(s["rule"], tuple(sorted(s["labels"].items()))): s["value"] for s in st.samples()}


def _uncommit(checkpoint: Path, batch: int) -> None:
    """As a crash after the batch's samples were written and before Spark logged its commit:
    the next start replays it."""
    commits = checkpoint / "metrics" / "commits"
    (commits / str(batch)).unlink()
    (commits / f".{batch}.crc").unlink(missing_ok=True)


def test_a_replayed_batch_uses_the_rules_it_was_planned_with(spark, tmp_path):
    st = StreamTest(spark, rules_of(BEFORE), tmp_path, recheck_ms=NO_TICKS)
    logs = [generated(200, seed=61), generated(200, seed=62), generated(200, seed=63)]
    st.add(logs[0])
    st.process()
    st.add(logs[1])
    st.process()
    st.stop()
    _uncommit(tmp_path / "checkpoint", 1)
    st.add(logs[2])
    # Back with other rules: batch 1 is replayed with the rules it was planned with, only
    # batch 2 (new data) with the new ones.
    st.restart(rules_of(AFTER))
    assert st.batches == [0, 1, 1, 2]
    assert _got(st) == _totals([(BEFORE, logs[0] + logs[1]), (AFTER, logs[2])])
    # The rule set a replay needs is kept in the checkpoint until no replay can need it:
    # batch 2 committed, the driver's next tidy leaves the running set alone.
    folder = tmp_path / "checkpoint" / "rulesets"
    assert len(list(folder.glob("*.json"))) == 2
    assert st.job is not None and st.job.rulesets is not None
    st.job.rulesets.tidy(now=True)
    assert [p.stem for p in folder.glob("*.json")] == [st.job.rulesets.version]
    st.stop()


def test_a_rule_set_published_while_the_query_runs_applies_from_the_next_batch(spark,
                                                                             tmp_path):
    st = StreamTest(spark, rules_of(BEFORE), tmp_path, recheck_ms=NO_TICKS)
    logs = [generated(200, seed=64), generated(200, seed=65)]
    st.add(logs[0])
    job = st.process()
    assert job.rulesets is not None
    version = job.rulesets.publish(rules_of(AFTER))
    assert (tmp_path / "checkpoint" / "rulesets" / f"{version}.json").is_file()
    st.add(logs[1])
    st.process()
    assert _got(st) == _totals([(BEFORE, logs[0]), (AFTER, logs[1])])
    # The same query, never restarted.
    assert st.job is job and st.batches == [0, 1]
    st.stop()


def test_batches_planned_while_a_rule_set_is_published_are_replayed_after_a_crash(spark,
                                                                                  tmp_path):
    """Issue 53: the query plans and runs batches while the new rules compile; the last of
    them crashes. The next start, with the new rules, replays it with the rules it was planned
    with — their snapshot was kept (it was dropped once the batch before had committed, and
    the start failed with RuleSnapshotError)."""
    st = StreamTest(spark, rules_of(BEFORE), tmp_path, recheck_ms=NO_TICKS)
    logs = [generated(200, seed=66), generated(200, seed=67), generated(200, seed=68)]
    st.add(logs[0])
    job = st.process()
    publisher = job.rulesets
    assert publisher is not None
    compile_ = publisher.compile

    def planning_meanwhile(rules: Any) -> str:
        st.add(logs[1])
        st.process()  # batch 1, planned with BEFORE, committed
        st.add(logs[2])
        st.process()  # batch 2, planned with BEFORE: it crashes below
        return compile_(rules)

    publisher.compile = planning_meanwhile  # type: ignore[method-assign]
    publisher.publish(rules_of(AFTER))
    st.stop()
    _uncommit(tmp_path / "checkpoint", 2)
    st.restart(rules_of(AFTER))
    assert st.batches == [0, 1, 2, 2]
    assert _got(st) == _totals([(BEFORE, logs[0] + logs[1] + logs[2])])
    st.stop()
