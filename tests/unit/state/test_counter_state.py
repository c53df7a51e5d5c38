"""The counters without Spark, one rule's series in a format 2 counter key
(:class:`l2m.state.format2.MetricState`): merging partials, histogram families, rule signature
changes, idle-series TTL. GroupState is PySpark's own class, constructed as the worker
constructs it."""

from __future__ import annotations

import decimal

import orjson
import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StructField, StructType

from l2m.rules.loader import load_text
from l2m.state.counters import CounterState
from l2m.state.format import CUMULATIVE
from l2m.state.format2 import MetricState
from l2m.state.gauges import GaugeState
from tests.support.outputs import output_samples

RULES, _ = load_text("""\
rules:
  - {id: c, name: c_total, kind: counter, query: "*", aggregation: count, group_by: [s]}
  - {id: h, name: h, kind: counter, query: "*", aggregation: histogram, field: v,
     buckets: [1, 10]}
""")
SCHEMA = StructType([StructField("blob", BinaryType())])


def group_state(blob: bytes | None, now: int, timed_out: bool = False,
                watermark: int = -1) -> GroupState:
    return GroupState(
        Row(blob) if blob is not None else None, now, watermark,
        GroupStateTimeout.ProcessingTimeTimeout, timed_out, watermark >= 0,
        blob is not None, False, False, -1, b"", SCHEMA,
    )


def partial(series: str, le: str | None, n: int, total: float, ts: int) -> dict:
    return {"rule": "x", "series": series, "le": le, "window": 0, "matches": n, "n": n,
            "sum": total, "exact_sum": decimal.Decimal(repr(total)), "exact_n": n,
            "min": None, "max": None, "ts": ts}


def run(fn: CounterState, key: tuple, rows: list[dict], state: GroupState) -> list[dict]:
    """The rows of rule ``key[0]`` in the counter key of shard ``key[1]``."""
    frames = [pd.DataFrame([{**r, "rule": key[0]} for r in rows])] if rows else []
    out = list(MetricState(fn, GaugeState({}))((key[1], CUMULATIVE), iter(frames), state))
    return output_samples(out)


def stored(state: GroupState, rule: str = "c") -> dict:
    """Rule ``rule``'s section of the key's blob."""
    return orjson.loads(state.get[0])["rules"][rule]


def test_counts_accumulate_across_batches_and_only_touched_series_are_emitted():
    fn = CounterState({r.id: r for r in RULES}, ttl_ms=60_000)
    state = group_state(None, now=1000)
    out = run(fn, ("c", 0), [partial("1:a", None, 2, 2.0, 10),
                             partial("1:a", None, 1, 1.0, 30),
                             partial("1:b", None, 5, 5.0, 20)], state)
    assert [(s["labels"], s["value"], s["timestamp"]) for s in out] == [
        ({"s": "a"}, 3.0, 30), ({"s": "b"}, 5.0, 20)]
    state2 = group_state(state.get[0], now=2000)
    out = run(fn, ("c", 0), [partial("1:a", None, 4, 4.0, 25)], state2)
    assert [(s["labels"], s["value"], s["timestamp"]) for s in out] == [({"s": "a"}, 7.0, 30)]


def test_histogram_family_is_cumulative_with_exact_sum():
    fn = CounterState({r.id: r for r in RULES}, ttl_ms=60_000)
    state = group_state(None, now=1000)
    out = run(fn, ("h", 1), [partial("", "1", 2, 0.3, 5), partial("", "+Inf", 1, 20.1, 9)],
              state)
    assert [(s["name"], s["labels"].get("le"), s["value"]) for s in out] == [
        ("h_bucket", "1", 2.0), ("h_bucket", "10", 2.0), ("h_bucket", "+Inf", 3.0),
        ("h_sum", None, 20.4), ("h_count", None, 3.0)]


def test_idle_series_expire_and_changed_rules_restart():
    fn = CounterState({r.id: r for r in RULES}, ttl_ms=1000)
    state = group_state(None, now=0)
    run(fn, ("c", 0), [partial("1:a", None, 1, 1.0, 1)], state)
    state = group_state(state.get[0], now=500)
    run(fn, ("c", 0), [partial("1:b", None, 1, 1.0, 2)], state)
    # a timeout at 1200: "a" (last seen 0) is idle past the TTL, "b" (500) is not
    state = group_state(state.get[0], now=1200, timed_out=True)
    assert run(fn, ("c", 0), [], state) == []
    assert list(stored(state)["series"]) == ["1:b"]
    # the same id with another aggregation: totals restart at 0
    changed, _ = load_text("""\
rules:
  - {id: c, name: c_total, kind: counter, query: "*", aggregation: sum, field: v,
     group_by: [s]}
""")
    fn2 = CounterState({r.id: r for r in changed}, ttl_ms=1000)
    state = group_state(state.get[0], now=1300)
    out = run(fn2, ("c", 0), [partial("1:b", None, 1, 2.5, 3)], state)
    assert [(s["labels"], s["value"]) for s in out] == [({"s": "b"}, 2.5)]


def test_state_of_a_removed_rule_is_kept_until_it_expires_and_emits_nothing():
    fn = CounterState({}, ttl_ms=1000)
    blob = orjson.dumps({"v": 2, "swept": 0, "rules": {"gone": {
        "sig": ["count", None, [], ["s"]],
        "series": {"1:a": [0, {"": [1, 1, 1.0, "1", None, None, 1]}]}}}})
    state = group_state(blob, now=10, timed_out=True)
    assert run(fn, ("gone", 0), [], state) == []
    assert state.exists
    state = group_state(blob, now=5000, timed_out=True)
    run(fn, ("gone", 0), [], state)
    assert not state.exists


class Count:
    """Stands in for the Spark accumulator of late logs (the progress line)."""

    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


W = 1_795_341_600_000  # a window start


def test_input_statuses_count_logs_whose_window_the_watermark_closed_once_and_exactly():
    late = Count()
    fn = CounterState({}, ttl_ms=60_000, late=late)
    # status partials carry each routed log's minute in `le`; unrouted statuses carry none
    state = group_state(None, now=1000, watermark=W + 60_000)
    out = run(fn, ("__status__", 0), [partial("2:ok", str(W), 3, 3.0, W + 5),
                                     partial("2:ok", str(W + 60_000), 2, 2.0, W + 60_001),
                                     partial("9:malformed", None, 1, 1.0, W + 70_000)], state)
    by_name = {(s["name"], tuple(s["labels"].items())): (s["value"], s["timestamp"])
               for s in out}
    assert by_name == {
        ("l2m_input_logs_total", (("status", "ok"),)): (5.0, W + 60_001),
        ("l2m_input_logs_total", (("status", "malformed"),)): (1.0, W + 70_000),
        ("l2m_late_logs_total", ()): (3.0, W + 5),  # only the window that had closed
    }
    assert late.value == 3
    # the late count is state: it continues across batches (and restarts), and is emitted
    # only when it grows
    state2 = group_state(state.get[0], now=2000, watermark=W + 120_000)
    out = run(fn, ("__status__", 0), [partial("2:ok", str(W + 120_000), 1, 1.0, W + 120_000)],
              state2)
    assert [s["name"] for s in out] == ["l2m_input_logs_total"]
    state3 = group_state(state2.get[0], now=3000, watermark=W + 120_000)
    out = run(fn, ("__status__", 0), [partial("2:ok", str(W), 4, 4.0, W + 7)], state3)
    assert {s["name"]: s["value"] for s in out} == {"l2m_input_logs_total": 10.0,
                                                   "l2m_late_logs_total": 7.0}
    assert late.value == 7
    assert orjson.loads(state3.get[0])["v"] == 2  # the format the checkpoint started with
