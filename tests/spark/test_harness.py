"""Stateful semantics of the streaming job through the in-memory harness
(tests/support/streamtest.py, no broker): counters across batches and restarts, gauge windows
corrected by late data within the grace and closed beyond it (also across a restart), rules added,
changed and removed across a restart, the clock bound. Each test runs the real query and really
restarts it on its checkpoint; expected values are exact, from the pure-Python reference
(tests/support/reference.py, differentially tested against ``l2m backfill``) or by hand."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

import orjson

from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.rules.loader import load_text
from l2m.rules.model import Rule
from tests.support import reference
from tests.support.rulesets import COUNTER_RULES

T0 = 1795341600000  # 2026-11-22T10:00:00Z, where the generator starts
MIN = 60_000


def rules_of(text: str) -> list[Rule]:
    rules, errors = load_text(textwrap.dedent(text))
    assert not errors, errors
    return rules


def generated(n: int, seed: int) -> list[bytes]:
    return list(LogGenerator(GeneratorConfig(seed=seed, rate_per_s=20)).lines(n))


def log(ts: int, ms: float) -> bytes:
    return orjson.dumps({"@timestamp": ts, "ms": ms})


def expected(rules: list[Rule], lines: list[bytes], ids: tuple[str, ...] | None = None,
             ) -> list[dict[str, Any]]:
    """The final samples of ``rules`` over ``lines`` (only those of rules ``ids``)."""
    return [s for s in reference.backfill(rules, lines)  # type: ignore[arg-type]
            if ids is None or s["rule"] in ids]


def test_counters_continue_exactly_across_batches_and_a_restart(stream_test):
    rules = rules_of(COUNTER_RULES)
    lines = generated(1500, seed=8)
    st = stream_test(rules)
    st.add(lines[:500])
    st.process()
    st.add(lines[500:1000])
    st.process()  # the next micro-batch of the same query
    st.add(lines[1000:])
    st.restart()  # a new query on the checkpoint: totals reloaded, offsets not re-read
    st.check(expected(rules, lines))
    assert len(st.batches) == 3
    inputs = {labels: v for (labels, _), v in st.values("l2m-input").items()}
    assert inputs == {(("status", "ok"),): 1500.0}
    # Every sample of a batch carries the batch's own time, as its offset log records it
    # (so a replay writes the same record timestamps): what remote write stamps counters with.
    recorded = {}
    for batch in st.batches:
        log = Path(st.cfg.checkpoint) / "metrics" / "offsets" / str(batch)
        recorded[batch] = {orjson.loads(log.read_text().splitlines()[1])["batchTimestampMs"]}
    assert st.times == recorded
    times = [next(iter(recorded[b])) for b in st.batches]
    assert times == sorted(set(times))


GAUGE_AND_COUNTER = """\
    rules:
      - {id: avg, name: latency_avg, kind: gauge, query: "*", aggregation: avg, field: ms}
      - {id: n, name: timed_total, kind: counter, query: "_exists_:ms", aggregation: count}
    """


def test_late_data_corrects_open_windows_and_is_dropped_from_closed_ones(stream_test):
    st = stream_test(rules_of(GAUGE_AND_COUNTER))  # grace: 20 minutes
    w0 = T0
    # Batch 0: window w0 gets 10 and 20; event time reaches w0+10 min (watermark w0−10 min).
    st.add([log(w0 + 1000, 10), log(w0 + 2000, 20)])
    st.advance(w0 + 10 * MIN)
    st.process()
    assert st.values("avg") == {((), w0): 15.0}
    # Batch 1: a late log for w0, within the grace: w0 is corrected and re-emitted. Event
    # time reaches w0+40 min: after this batch the watermark (w0+20 min) has passed w0's end.
    st.add([log(w0 + 3000, 60), log(w0 + 40 * MIN, 2)])
    st.process()
    assert st.values("avg") == {((), w0): 30.0, ((), w0 + 40 * MIN): 2.0}
    # Batch 2: w0 is closed — a log for it is dropped by the gauge; w0+25 min ends after the
    # watermark, so a log for it (19 minutes late) still opens it.
    st.add([log(w0 + 4000, 1000), log(w0 + 25 * MIN, 7)])
    st.process()
    assert st.values("avg") == {((), w0): 30.0, ((), w0 + 25 * MIN): 7.0,
                                ((), w0 + 40 * MIN): 2.0}
    # Counters have no windows: every log is counted, late or not; the sample is dated by
    # the largest event time counted.
    assert st.values("n") == {((), w0 + 40 * MIN): 6.0}
    # The dropped log is counted once, in l2m's own counter, dated by its event time.
    assert st.values("l2m-late") == {((), w0 + 4000): 1.0}
    # A restart keeps the watermark and the open windows (both in the checkpoint): w0 stays
    # closed, w0+25 min continues from its state.
    st.add([log(w0 + 5000, 1000), log(w0 + 25 * MIN + 1, 9)])
    st.restart()
    assert st.values("avg") == {((), w0): 30.0, ((), w0 + 25 * MIN): 8.0,
                                ((), w0 + 40 * MIN): 2.0}
    assert st.values("n") == {((), w0 + 40 * MIN): 8.0}
    # The late count is state too: it continues across the restart.
    assert st.values("l2m-late") == {((), w0 + 5000): 2.0}


def test_a_log_from_a_wrong_clock_does_not_close_the_windows(stream_test):
    st = stream_test(rules_of(GAUGE_AND_COUNTER))
    now = int(time.time() * 1000)
    base = now // MIN * MIN - 5 * MIN
    st.add([log(base + 1000, 10), log(now + 86_400_000, 99)], record_ts=now)
    st.process()
    st.add([log(base + 2000, 30)], record_ts=now)  # late, had the day-ahead log counted
    st.process()
    assert st.values("avg") == {((), base): 20.0}
    assert st.values("n") == {((), base + 2000): 2.0}  # the future log is not routed at all
    inputs = {labels: v for (labels, _), v in st.values("l2m-input").items()}
    assert inputs == {(("status", "ok"),): 2.0, (("status", "future"),): 1.0}


BEFORE = """\
    rules:
      - {id: same, name: same_total, kind: counter, query: "*", aggregation: count}
      - {id: changed, name: changed_total, kind: counter, query: "service:web",
         aggregation: count}
      - {id: reshaped, name: reshaped_total, kind: counter, query: "*", aggregation: count}
      - {id: removed, name: removed_total, kind: counter, query: "*", aggregation: count}
      - {id: g, name: g_max, kind: gauge, query: "*", aggregation: max, field: http.bytes}
    """
AFTER = """\
    rules:
      - {id: added, name: added_total, kind: counter, query: "*", aggregation: count}
      - {id: same, name: same_total, kind: counter, query: "*", aggregation: count}
      - {id: changed, name: changed_total, kind: counter, query: "service:cart",
         aggregation: count}
      - {id: reshaped, name: reshaped_total, kind: counter, query: "*", aggregation: sum,
         field: http.bytes}
      - {id: g2, name: g2_min, kind: gauge, query: "*", aggregation: min, field: http.bytes,
         group_by: [service]}
    """


def test_rules_added_changed_and_removed_across_a_restart(stream_test):
    before, after = rules_of(BEFORE), rules_of(AFTER)
    first, second = generated(600, seed=21), generated(400, seed=22)
    st = stream_test(before)
    st.add(first)
    st.process()
    st.add(second)
    st.restart(after)  # the checkpoint loads with another rule set
    # A changed query continues the same metric: its total and date span both runs.
    web = expected(before, first, ("changed",))
    cart = expected(after, second, ("changed",))
    changed = {**cart[0], "value": web[0]["value"] + cart[0]["value"],
               "timestamp": max(web[0]["timestamp"], cart[0]["timestamp"])}
    st.check([
        # unchanged: continues from its total
        *expected(before, first + second, ("same",)),
        changed,
        # aggregation changed (count → sum): restarts at 0, with the same key
        *expected(after, second, ("reshaped", "added", "g2")),
        # removed: produces nothing more; downstream keeps its last samples
        *expected(before, first, ("removed", "g")),
    ])


def test_a_format_2_checkpoint_continues_in_its_own_layout(stream_test):
    """A checkpoint of 0.1.0 or 0.2.0 (state format 2) keeps its blobs — the job reads the
    format from l2m.json — and counts on exactly; a new one is written in format 7."""
    rules = rules_of(COUNTER_RULES)
    lines = generated(600, seed=9)
    old = stream_test(rules)
    marker = old.cfg.checkpoint + "/l2m.json"
    import pathlib

    pathlib.Path(old.cfg.checkpoint).mkdir(parents=True)
    pathlib.Path(marker).write_text('{"state_format": 2}\n')
    keys = {}
    for name in ("old", "new"):
        st = old if name == "old" else stream_test(rules)
        st.add(lines[:300])
        st.process()
        st.add(lines[300:])
        st.restart()
        st.check(expected(rules, lines))
        assert st.job is not None
        keys[name] = st.job.query.lastProgress["stateOperators"][0]["operatorName"]
        st.stop()
    # format 2 keeps its blobs; a new checkpoint keeps one map entry per series (format 7)
    assert keys == {"old": "applyInPandasWithState", "new": "transformWithStateInPandasExec"}
    assert orjson.loads(pathlib.Path(marker).read_text()) == {"state_format": 2}
