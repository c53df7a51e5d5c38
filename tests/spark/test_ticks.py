"""Windows published without traffic (issue 53, deliverable 5), on the real query fed from
memory: when logs stop, a window final by the last batch's watermark is published by the
idle source's tick within a recheck and a trigger, and the job then runs no more batches;
``l2m run --once`` publishes every window final at its end, counters marked new."""

from __future__ import annotations

import time

import orjson

from tests.spark.test_harness import MIN, T0, log, rules_of

RULES = rules_of("""\
    rules:
      - {id: g, name: g_max, kind: gauge, query: "*", aggregation: max, field: ms}
      - {id: c, name: c_total, kind: counter, query: "*", aggregation: count}
    """)
RECHECK = 1_000


def finals(harness) -> list[tuple[int, float]]:
    """(window, value) of every gauge sample written marked final, in order."""
    return [(s["timestamp"], s["value"]) for s in
            (orjson.loads(v) for _k, v, mark in harness.marked if mark == "final")
            if s["rule"] == "g"]


def test_a_window_final_when_logs_stop_is_published_by_a_tick(stream_test):
    harness = stream_test(RULES, recheck_ms=RECHECK, grace_ms=2 * MIN, publish_delay_ms=0)
    # T0's window gets logs; a log in the next minute makes it final — by the watermark that
    # batch moves, which only a later batch sees. No log comes after them.
    harness.add([log(T0 + 1_000, 3.0), log(T0 + 2_000, 7.0), log(T0 + MIN, 1.0)],
                record_ts=T0 + MIN)
    harness.process()
    stopped = time.monotonic()
    deadline = stopped + RECHECK / 1000 + 60  # a recheck, a trigger, and a slow batch
    while not finals(harness) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert finals(harness) == [(T0, 7.0)], time.monotonic() - stopped
    [data] = [b for b, rows in harness.by_batch.items()
              if any(orjson.loads(v)["rule"] == "c" for _k, v, _m in rows)]
    [published] = [b for b, rows in harness.by_batch.items()
                   if any(m == "final" for _k, _v, m in rows)]
    assert published > data  # by a batch without logs: a tick
    assert not any(orjson.loads(v)["rule"] == "c" for _k, v, _m in harness.by_batch[published])
    # idle: at most two ticks after the data, then no batch at all (the watermark stands):
    # quiet for two rechecks and a second after the last batch (a third tick would come
    # within one), bounded.
    settled, quiet_since = max(harness.by_batch), time.monotonic()
    while time.monotonic() - quiet_since < 2 * RECHECK / 1000 + 1:
        assert time.monotonic() < deadline, "batches did not stop"
        if max(harness.by_batch) != settled:
            settled, quiet_since = max(harness.by_batch), time.monotonic()
        time.sleep(0.1)
    assert settled - data <= 2
    assert finals(harness) == [(T0, 7.0)]  # once


def test_run_once_publishes_every_window_final_at_its_end(stream_test):
    harness = stream_test(RULES, grace_ms=2 * MIN, publish_delay_ms=0)
    harness.add([log(T0 + 1_000, 3.0), log(T0 + 2_000, 7.0), log(T0 + MIN, 1.0)],
                record_ts=T0 + MIN)
    harness.run_once()
    assert finals(harness) == [(T0, 7.0)]
    marks = {(orjson.loads(v)["rule"], mark) for _k, v, mark in harness.marked}
    assert ("c", "new") in marks and ("c", None) not in marks
    # a later run: the next window becomes final with newer logs, and T0's is not sent again
    harness.add([log(T0 + 2 * MIN, 2.0)], record_ts=T0 + 2 * MIN)
    harness.run_once()
    assert finals(harness) == [(T0, 7.0), (T0 + MIN, 1.0)]
    counts = [orjson.loads(v)["value"] for _k, v, _m in harness.marked
              if orjson.loads(v)["rule"] == "c"]
    assert counts == [3.0, 4.0]
    # a run with nothing new publishes nothing again, and ends
    before = len(harness.marked)
    harness.run_once()
    assert finals(harness) == [(T0, 7.0), (T0 + MIN, 1.0)]
    assert len(harness.marked) == before


def test_run_once_right_after_a_continuous_run_publishes_windows_without_new_logs(
        stream_test):
    """A window key with no logs in a ``--once`` run keeps the continuous run's timer (the
    next recheck boundary, up to a recheck ahead), and a timer runs only once due: the
    run's tick waits for it, so the window final by the run's logs is published."""
    recheck = 10_000
    harness = stream_test(RULES, recheck_ms=recheck, grace_ms=2 * MIN, publish_delay_ms=0)
    harness.process()  # the query started, no logs yet
    # Just past a boundary: T0's key gets its timer a whole recheck ahead, so the once run
    # below (a query stopped and started, a batch: a few seconds) plans its tick before the
    # timer is due — the case the wait is for, whatever the machine's load.
    while time.time() * 1000 % recheck > 300:
        time.sleep(0.05)
    harness.add([log(T0 + 1_000, 3.0), log(T0 + 2_000, 7.0)], record_ts=T0 + 2_000)
    harness.process()  # T0's window key: its timer at the next 10 s boundary
    looked = time.time() * 1000
    # the once run's only log is in the next window: T0's key gets no rows, only the tick
    harness.add([log(T0 + MIN, 1.0)], record_ts=T0 + MIN)
    started = time.monotonic()
    harness.run_once()
    took = time.monotonic() - started
    assert finals(harness) == [(T0, 7.0)], (took, looked % recheck)
    assert took < recheck / 1000 + 15  # waited a recheck at most, plus the run
    # the next --once run finds every timer on its own 1 ms clock: no wait
    started = time.monotonic()
    harness.run_once()
    assert finals(harness) == [(T0, 7.0)]
    assert time.monotonic() - started < 15
