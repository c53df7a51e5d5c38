"""The gauges without Spark, one rule's window in a format 2 window key
(:class:`l2m.state.format2.MetricState`): windows accumulate and re-emit corrected values,
close when the watermark passes their end, and count what arrives after that."""

from __future__ import annotations

import decimal

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StructField, StructType

from l2m.rules.loader import load_text
from l2m.state.counters import CounterState
from l2m.state.format2 import MetricState
from l2m.state.gauges import GaugeState
from tests.support.outputs import output_samples

RULES, _ = load_text("""\
rules:
  - {id: a, name: a_avg, kind: gauge, query: "*", aggregation: avg, field: v, group_by: [s]}
  - {id: m, name: m_max, kind: gauge, query: "*", aggregation: max, field: v}
  - {id: h, name: h, kind: gauge, query: "*", aggregation: histogram, field: v,
     buckets: [1, 10]}
""")
SCHEMA = StructType([StructField("blob", BinaryType())])
W = 1_795_341_600_000  # a window start


def group_state(blob: bytes | None, watermark: int, timed_out: bool = False) -> GroupState:
    return GroupState(
        Row(blob) if blob is not None else None, 0, watermark,
        GroupStateTimeout.ProcessingTimeTimeout, timed_out, True,
        blob is not None, False, False, -1, b"", SCHEMA,
    )


def partial(series: str, le: str | None, values: list[float], ts: int) -> dict:
    exact = sum((decimal.Decimal(repr(v)) for v in values), decimal.Decimal(0))
    return {"rule": "x", "series": series, "le": le, "window": W, "matches": len(values),
            "n": len(values), "sum": float(sum(values)), "exact_sum": exact if values else None,
            "exact_n": len(values), "min": min(values, default=None),
            "max": max(values, default=None), "ts": ts}


def run(fn: GaugeState, key: tuple, rows: list[dict], state: GroupState) -> list[dict]:
    """The rows of rule ``key[0]`` in the window key (``key[1]``, ``key[2]``)."""
    frames = [pd.DataFrame([{**r, "rule": key[0]} for r in rows])] if rows else []
    fn2 = MetricState(CounterState({}, ttl_ms=60_000), fn)
    return output_samples(fn2((key[1], key[2]), iter(frames), state))


def test_a_window_accumulates_and_re_emits_its_corrected_value():
    fn = GaugeState({r.id: r for r in RULES})
    state = group_state(None, watermark=0)
    out = run(fn, ("a", 0, W), [partial("1:x", None, [0.1, 0.2], W + 5),
                                partial("1:y", None, [], W + 6)], state)
    # y had no values: nothing to say about it
    assert [(s["labels"], s["value"], s["timestamp"]) for s in out] == [
        ({"s": "x"}, 0.15, W)]  # exact: (0.1 + 0.2) / 2
    later = group_state(state.get[0], watermark=W)  # still open: the end is W + 60 s
    out = run(fn, ("a", 0, W), [partial("1:x", None, [0.6], W + 9)], later)
    assert [(s["labels"], s["value"]) for s in out] == [({"s": "x"}, 0.3)]  # (0.1+0.2+0.6)/3


def test_min_and_max_survive_the_state_and_histograms_emit_the_whole_family():
    fn = GaugeState({r.id: r for r in RULES})
    state = group_state(None, watermark=0)
    run(fn, ("m", 1, W), [partial("", None, [3.0, 7.5], W)], state)
    out = run(fn, ("m", 1, W), [partial("", None, [5.0], W)],
              group_state(state.get[0], watermark=0))
    assert [s["value"] for s in out] == [7.5]
    hist = group_state(None, watermark=0)
    out = run(fn, ("h", 0, W), [partial("", "1", [0.5], W), partial("", "+Inf", [20.0], W)],
              hist)
    assert [(s["name"], s["labels"].get("le"), s["value"]) for s in out] == [
        ("h_bucket", "1", 1.0), ("h_bucket", "10", 1.0), ("h_bucket", "+Inf", 2.0),
        ("h_sum", None, 20.5), ("h_count", None, 2.0)]


def test_a_window_past_the_watermark_closes_and_late_logs_are_dropped():
    fn = GaugeState({r.id: r for r in RULES})
    state = group_state(None, watermark=0)
    run(fn, ("m", 0, W), [partial("", None, [1.0], W)], state)
    # a timeout while the window is open keeps it, and emits nothing
    kept = group_state(state.get[0], watermark=W + 59_999, timed_out=True)
    assert run(fn, ("m", 0, W), [], kept) == []
    assert kept.exists
    # the watermark reaches the end: the window goes; logs for it are dropped (counted by the
    # input-status key, tests/unit/state/test_counter_state.py)
    closed = group_state(kept.get[0], watermark=W + 60_000)
    assert run(fn, ("m", 0, W), [partial("", None, [9.0, 9.5], W)], closed) == []
    assert not closed.exists
