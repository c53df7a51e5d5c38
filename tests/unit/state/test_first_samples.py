"""Every counter series' first sample carries ``l2m-mark: new`` (issue 53, deliverable 4), so
remote write writes a 0 just before it and PromQL's ``increase()`` counts its first value:
a series started by logs without a value (a missing or non-numeric ``field``) is marked in the
batch that gives it its first sample, not in the one that started it; ``l2m_late_logs_total``'s
first sample is marked; l2m's per-account counters written from the driver are marked once and
carry their own time."""

from __future__ import annotations

import decimal

import pytest

import l2m.state.keycall as keycall_module
from l2m.engine.samples import MARK_KEY, NEW
from l2m.engine.status import STATUS_RULE
from l2m.rules.loader import load_text
from l2m.state.counters import CounterState
from l2m.state.format import CUMULATIVE
from l2m.state.keycall import SMALL_RULE
from tests.unit.state.test_counter_state import partial
from tests.unit.state.test_state_processor import W, _marked, processor, row

RULES, _ = load_text("""\
rules:
  - {id: d, name: d_total, kind: counter, query: "*", aggregation: sum, field: v,
     group_by: [s]}
  - {id: h, name: h, kind: counter, query: "*", aggregation: histogram, field: v,
     buckets: [1, 10]}
""")
BY_ID = {r.id: r for r in RULES}


@pytest.fixture(autouse=True)
def _small_rule():
    yield
    keycall_module.SMALL_RULE = SMALL_RULE


def valueless(rule: str, i: int) -> dict:
    """A partial of logs the rule matched whose field was missing: no value (``n`` 0)."""
    return {**row(rule, i), "n": 0, "exact_n": 0, "sum": 0.0,
            "exact_sum": decimal.Decimal(0), "min": None, "max": None}


@pytest.mark.parametrize("small", [0, 512])
def test_a_series_born_without_a_value_is_marked_new_with_its_first_sample(small):
    fn, store = processor(small=small)
    key = (0, CUMULATIVE)
    # s0 starts with no value: stored, nothing emitted; s1 starts with one: new at once.
    assert _marked(fn, store, key, [valueless("d", 0), row("d", 1, 2.0)], now=W) == [
        ("new", "d", (("s", "s1"),), 2.0)]
    assert _marked(fn, store, key, [valueless("d", 0)], now=W + 1) == []
    # s0's first value, two batches after it started: its first sample, so new.
    assert _marked(fn, store, key, [row("d", 0, 5.0), row("d", 1, 1.0)], now=W + 2) == [
        ("new", "d", (("s", "s0"),), 5.0), (None, "d", (("s", "s1"),), 3.0)]
    assert _marked(fn, store, key, [row("d", 0, 1.0)], now=W + 3) == [
        (None, "d", (("s", "s0"),), 6.0)]


def test_a_histogram_born_without_a_value_is_marked_new_with_its_first_family():
    fn = CounterState(BY_ID, ttl_ms=60_000)
    empty = {**partial("-", "1", 0, 0.0, W), "matches": 1}
    rows = [(p["series"], p["le"], _partial(p)) for p in [empty]]
    content, out = fn.update("h", {}, rows, W, 0, marked=True)
    assert out == [] and content is not None
    rows = [("-", "10", _partial(partial("-", "10", 2, 7.0, W + 5)))]
    content, out = fn.update("h", content, rows, W + 1, 0, marked=True)
    assert [(s["name"], s["labels"].get("le"), s["value"], s.get(MARK_KEY)) for s in out] == [
        ("h_bucket", "1", 0.0, NEW), ("h_bucket", "10", 2.0, NEW),
        ("h_bucket", "+Inf", 2.0, NEW), ("h_sum", None, 7.0, NEW), ("h_count", None, 2.0, NEW)]
    rows = [("-", "1", _partial(partial("-", "1", 1, 0.5, W + 6)))]
    _, out = fn.update("h", content, rows, W + 2, 0, marked=True)
    assert {s.get(MARK_KEY) for s in out} == {None} and len(out) == 5


def test_without_marks_nothing_is_marked():
    """State formats 1 to 3 (``marked`` False) write no marks, as before."""
    fn = CounterState(BY_ID, ttl_ms=60_000)
    rows = [("1:a", "", _partial(partial("1:a", None, 1, 1.0, W)))]
    _, out = fn.update("d", {}, rows, W, 0)
    assert [MARK_KEY in s for s in out] == [False]


@pytest.mark.parametrize("small", [0, 512])
def test_the_late_log_count_s_first_sample_is_marked_new(small):
    fn, store = processor(small=small)
    key = (0, CUMULATIVE)

    def status(n: int, window: int) -> dict:
        return {**partial("2:ok", str(window), n, float(n), window + 5), "rule": STATUS_RULE,
                "window": None}

    # W's window closed by the watermark: 3 late logs, the count's first sample.
    out = _marked(fn, store, key, [status(3, W), status(2, W + 120_000)], now=W + 200_000,
                  watermark=W + 120_000)
    assert out == [("new", "l2m-input", (("status", "ok"),), 5.0),
                   ("new", "l2m-late", (), 3.0)]
    out = _marked(fn, store, key, [status(4, W)], now=W + 200_001, watermark=W + 120_000)
    assert out == [(None, "l2m-input", (("status", "ok"),), 9.0),
                   (None, "l2m-late", (), 7.0)]


def _partial(p: dict):
    from l2m.engine.partials import Partial

    return Partial(p["matches"], p["n"], p["sum"], p["exact_sum"], p["min"], p["max"], p["ts"])


def test_the_driver_s_per_account_counters_are_marked_new_once_and_dated_strictly_later(
        monkeypatch):
    """l2m's per-account samples (written from the driver): each counter series' first
    delivered sample is new — a failed write leaves it new for the next — gauges never are;
    each snapshot's time is strictly after the previous one's, whatever the clock says."""
    import l2m.streaming.accountmetrics as module
    from l2m.state.accounts import AccountBook
    from l2m.state.tally import MatchCount, SeriesCount
    from l2m.streaming.accountmetrics import AccountMetrics

    monkeypatch.setattr(module.time, "time", lambda: 1_795_341_600.0)  # a clock standing still
    written: list[list[dict]] = []
    fail = [True]

    def produce(samples: list[dict]) -> None:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("broker down")
        written.append(samples)

    metrics = AccountMetrics(AccountBook(top=10), produce)
    accounts = {"r1": "acme"}
    for batch in range(4):
        latest = {SeriesCount("r1", 0, -1): 2} if batch < 2 else \
            {SeriesCount("r1", 0, -1): 2, SeriesCount("r2", 0, -1): 1}
        metrics.batch_done(batch, {**accounts, "r2": "globex"} if batch >= 2 else accounts,
                           latest, {MatchCount("r1"): batch})
        metrics.close() if batch == 3 else _settle(metrics)

    def marks(samples: list[dict]) -> list[tuple]:
        return [(s["labels"]["account"], s["name"], s.get(MARK_KEY)) for s in samples
                if s["name"] in ("l2m_account_logs_matched_total", "l2m_account_series")]

    acme, globex = ("acme", "l2m_account_series", None), ("globex", "l2m_account_series", None)
    assert [marks(s) for s in written] == [  # batch 0's write failed
        [acme, ("acme", "l2m_account_logs_matched_total", NEW)],
        [acme, ("acme", "l2m_account_logs_matched_total", None),
         globex, ("globex", "l2m_account_logs_matched_total", NEW)],
        [acme, ("acme", "l2m_account_logs_matched_total", None),
         globex, ("globex", "l2m_account_logs_matched_total", None)]]
    assert [{s["timestamp"] for s in samples} for samples in written] == [
        {1_795_341_600_001}, {1_795_341_600_002}, {1_795_341_600_003}]


def _settle(metrics) -> None:
    """Wait until the metrics' thread has written what was handed over."""
    import time

    for _ in range(500):
        with metrics._cond:
            if metrics._pending is None and not metrics._busy:
                return
        time.sleep(0.01)
