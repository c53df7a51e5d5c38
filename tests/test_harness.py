"""Stateful semantics of the streaming job through the in-memory harness (no broker):
counters across restarts, late data and the watermark, rule changes, the clock bound. Each
test stops and restarts the real query on its checkpoint; values are exact."""

from __future__ import annotations

import textwrap
import time

import orjson
import pytest

from l2m.rules import load_text

from .streamtest import StreamTest
from .test_streaming import COUNTER_RULES, GAUGE_RULES, backfill_samples, generated

pytestmark = pytest.mark.spark
T0 = 1795341600000  # 2026-11-22T10:00:00Z


def log(ts: int, ms: float, **extra: object) -> bytes:
    return orjson.dumps({"@timestamp": ts, "ms": ms, **extra})


def test_counters_continue_exactly_across_restarts(spark, tmp_path):
    rules, _ = load_text(COUNTER_RULES)
    lines = generated(1500, seed=8)
    st = StreamTest(spark, rules, tmp_path)
    for chunk in (lines[:500], lines[500:1100], lines[1100:]):
        st.add(chunk)
        st.restart()  # a new query on the same checkpoint each time
    st.stop()
    st.check(backfill_samples(spark, rules, lines, tmp_path))
    assert [v for (labels, _), v in st.values("l2m-input").items()] == [1500.0]


def test_late_data_corrects_open_windows_and_closed_windows_count_it_once(spark, tmp_path):
    rules, _ = load_text(GAUGE_RULES)
    st = StreamTest(spark, rules, tmp_path, partitions=1)
    w0 = T0
    st.add([log(w0 + 1000, 10), log(w0 + 2000, 20)])
    st.process()
    st.advance(w0 + 10 * 60_000)  # watermark w0 - 10 min: w0 still open
    st.process()
    st.add([log(w0 + 3000, 60)])  # late, within the grace: corrected and re-emitted
    st.process()
    assert st.values("avg")[((), w0)] == 30.0
    st.add([log(w0 + 40 * 60_000, 2)])  # the watermark passes w0's end
    st.process()
    st.add([log(w0 + 4000, 1000), log(w0 + 5000, 1000)])  # too late: dropped, counted
    job = st.process()
    assert job.counts is not None and job.counts.late.value == 2  # the progress line's
    assert st.values("avg") == {((), w0): 30.0, ((), w0 + 40 * 60_000): 2.0}
    assert st.values("l2m-late") == {((), w0 + 5000): 2.0}
    st.add([log(w0 + 6000, 1000)])  # the late count is state: it continues after a restart
    st.restart()
    st.stop()
    assert st.values("l2m-late") == {((), w0 + 6000): 3.0}


def test_a_log_from_a_wrong_clock_does_not_close_the_windows(spark, tmp_path):
    rules, _ = load_text(GAUGE_RULES)
    st = StreamTest(spark, rules, tmp_path, partitions=1)
    now = int(time.time() * 1000)
    base = now // 60_000 * 60_000 - 5 * 60_000
    st.add([log(base + 1000, 10), log(now + 86_400_000, 99)], record_ts=now)
    st.process()
    st.add([log(base + 2000, 30)], record_ts=now)  # would be late had the day-ahead log counted
    st.process()
    st.stop()
    assert st.values("avg") == {((), base): 20.0}
    inputs = st.values("l2m-input")
    assert {labels: v for (labels, _), v in inputs.items()} == {
        (("status", "ok"),): 2.0, (("status", "future"),): 1.0}
    assert st.values("l2m-late") == {}


def test_rules_added_changed_and_removed_across_a_restart(spark, tmp_path):
    before, _ = load_text(textwrap.dedent("""\
        rules:
          - {id: same, name: same_total, kind: counter, query: "*", aggregation: count}
          - {id: changed, name: changed_total, kind: counter, query: "service:web",
             aggregation: count}
          - {id: removed, name: removed_total, kind: counter, query: "*", aggregation: count}
        """))
    after, _ = load_text(textwrap.dedent("""\
        rules:
          - {id: added, name: added_total, kind: counter, query: "*", aggregation: count}
          - {id: same, name: same_total, kind: counter, query: "*", aggregation: count}
          - {id: changed, name: changed_total, kind: counter, query: "service:cart",
             aggregation: count}
          - {id: g2, name: g2_min, kind: gauge, query: "*", aggregation: min,
             field: http.bytes, group_by: [service]}
        """))
    first, second = generated(600, seed=21), generated(400, seed=22)

    def count(lines: list[bytes], service: str) -> int:
        return sum(1 for x in lines if orjson.loads(x).get("service") == service)

    st = StreamTest(spark, before, tmp_path)
    st.add(first)
    st.process()
    st.add(second)
    st.restart(after)
    st.stop()
    totals = {s["rule"]: s["value"] for s in st.samples() if s["kind"] == "counter"}
    assert totals == {"same": 1000.0, "removed": 600.0, "added": 400.0,
                      "changed": float(count(first, "web") + count(second, "cart"))}
    g2 = [s for s in st.samples() if s["rule"] == "g2"]
    assert sorted(map(repr, g2)) == sorted(
        repr(s) for s in backfill_samples(spark, after, second, tmp_path) if s["rule"] == "g2")
