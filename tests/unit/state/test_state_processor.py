"""State format 7 (:mod:`l2m.state.processor`) without a JVM, on a stand-in state server
(:mod:`tests.support.tws`): a batch reads and writes only the series it touches; it decides
exactly as one blob per key does (:mod:`tests.support.cappedblobs`: same samples, same caps);
idle counters expire by TTL without a
rewrite and stop counting against caps; a signature change restarts a rule without touching its
old entries; a gauge window goes when the watermark passes it."""

from __future__ import annotations

import base64
import gc
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pytest
from pyspark import cloudpickle

import l2m.state.buckets as buckets_module
import l2m.state.keycall as keycall_module
from l2m.engine.admission import OVERFLOW_SERIES, RuleCaps
from l2m.errors import StateFormatError
from l2m.rules.loader import load_text
from l2m.rules.model import Aggregation
from l2m.state.buckets import GROUP_SERIES, bucket_count, bucket_of
from l2m.state.caps import CallCaps
from l2m.state.counters import CounterState
from l2m.state.format import CUMULATIVE, bucket_key, page_of
from l2m.state.gauges import GaugeState
from l2m.state.keycall import SMALL_RULE
from l2m.state.processor import MetricProcessor
from l2m.state.variables import BUCKETS
from tests.support import tws
from tests.support.cappedblobs import CappedBlobs
from tests.support.outputs import output_rows, output_samples
from tests.unit.state.test_counter_state import group_state, partial
from tests.unit.state.test_gauge_state import group_state as gauge_group_state

W = 1_795_341_600_000
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "golden"
TTL = 128_000  # BUCKETS buckets of 1 s
RULES, _ = load_text("""\
rules:
  - {id: c, account: a, name: c_total, kind: counter, query: "*", aggregation: count,
     group_by: [s]}
  - {id: d, account: a, name: c_total, kind: counter, query: "*", aggregation: sum,
     field: v, group_by: [s]}
  - {id: g, account: a, name: g, kind: gauge, query: "*", aggregation: max, field: v,
     group_by: [s]}
""")
BY_ID = {r.id: r for r in RULES}
COUNTERS = {k: v for k, v in BY_ID.items() if v.kind == "counter"}
GAUGES = {k: v for k, v in BY_ID.items() if v.kind == "gauge"}


def name(i: int) -> str:
    text = f"s{i}"
    return f"{len(text)}:{text}"


def row(rule: str, i: int, value: float = 1.0, window: int | None = None, ts: int = W) -> dict:
    return {**partial(name(i), None, 1, value, ts), "rule": rule, "window": window,
            "min": value, "max": value}


@pytest.fixture(autouse=True)
def _small_rule():
    yield
    keycall_module.SMALL_RULE = SMALL_RULE
    buckets_module.GROUP_SERIES = GROUP_SERIES


def processor(caps: dict[str, RuleCaps] | None = None, rules: dict | None = None,
              small: int = 0) -> tuple[MetricProcessor, tws.Store]:
    """A processor on a fresh stand-in store; ``small``: the series a rule keeps inside its
    own entry before it has one entry per series (0: one per series from the first)."""
    keycall_module.SMALL_RULE = small
    store = tws.Store()
    fn = MetricProcessor(CounterState(rules or COUNTERS, ttl_ms=TTL),
                         GaugeState(rules or GAUGES, recheck_ms=60_000), caps=caps)
    fn.init(tws.Handle(store))  # type: ignore[arg-type]
    return fn, store


def group_of(store: tws.Store, state: str, key: tuple, account: str = "a") -> dict:
    """An account's group, in its bucket (by the key's meta)."""
    live = store.live(state)
    buckets = store.live("meta")[key, None]["nb"]
    return live[key, (bucket_key(bucket_of(account, buckets)),)]["a"][account]


def rule_entry(store: tws.Store, state: str, key: tuple, rule: str, account: str = "a"
               ) -> dict:
    """A rule's entry: its own, or its account's group's member."""
    live = store.live(state)
    if (key, (rule,)) in live:
        return live[key, (rule,)]
    return group_of(store, state, key, account)["r"][rule]


def values(samples: list[dict]) -> dict:
    return {(s["rule"], tuple(sorted(s["labels"].items()))): s["value"] for s in samples}


def test_a_batch_reads_and_writes_only_the_series_it_touches():
    fn, store = processor()
    call = tws.call
    call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(1000)], now=W)
    store.reset()
    out = call(fn, store, (0, CUMULATIVE), [row("c", 3), row("c", 7)], now=W + 500)
    assert values(out) == {("c", (("s", "s3"),)): 2.0, ("c", (("s", "s7"),)): 2.0}
    # the pages of the two series read and written (1,000 series: 32 pages); the account's
    # group (which lists the rule as having an entry of its own), the rule's entry and the
    # key's meta read
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["pg"] == 32
    assert [page_of(name(i), 32) for i in (3, 7)] == [19, 10]
    assert (store.reads, store.writes) == (5, 2)
    assert len(store.paged("counter_pages")) == 1000
    assert len(store.live("counter_pages")) == 32
    store.reset()  # in the next last-touch bucket the rule's counts move: its entry written,
    # and its account's group, which must outlive it (once per bucket)
    call(fn, store, (0, CUMULATIVE), [row("c", 3)], now=W + 1000)
    assert (store.reads, store.writes) == (4, 3)
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["n"] == {
        str(W // 1000): 999, str(W // 1000 + 1): 1}


@pytest.mark.parametrize("small", [0, 512])
def test_a_new_key_reads_nothing_but_its_meta(small):
    # Every key with entries has a meta, written in the call that wrote its first entries:
    # without one there is nothing to read (a new gauge window, a new checkpoint's keys).
    caps = {r: RuleCaps(2, account_name="a") for r in ("c", "d")}
    fn, store = processor(caps=caps, small=small)
    call = tws.call
    out = call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(5)] + [row("d", 1)],
               now=W)
    assert store.reads == 1  # the meta
    # caps still decide: two series admitted, the rest to the rule's overflow series
    assert sorted(s["labels"].get("s", "") for s in out if s["rule"] == "c") == \
        ["", "s0", "s1"]
    store.reset()
    out = call(fn, store, (0, CUMULATIVE), [row("c", 0), row("c", 9)], now=W + 100)
    assert store.reads > 1  # no longer new: what it holds is read
    assert values(out)[("c", (("s", "s0"),))] == 2.0


def _random_batches(seed: int) -> list[list[dict]]:
    rnd = random.Random(seed)
    batches = []
    for b in range(6):
        rows = []
        for _ in range(rnd.randint(1, 30)):
            rule = rnd.choice(["c", "d"])
            rows.append(row(rule, rnd.randint(0, 40), float(rnd.randint(1, 9)),
                            ts=W + b * 1000))
        batches.append(rows)
    return batches


@pytest.mark.parametrize("small", [0, 512, 4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counters_and_caps_decide_exactly_as_one_blob_per_key(seed, small):
    """In either layout of a rule's series, and across the move from one to the other."""
    print("seed", seed)
    caps = {"c": RuleCaps(6, 9, 11, "a", "c_total"), "d": RuleCaps(8, 9, 11, "a", "c_total")}
    fn, store = processor(caps, small=small)
    overflowed = False
    old = CappedBlobs(CounterState(COUNTERS, ttl_ms=TTL), GaugeState(GAUGES), caps=caps)
    blob = None
    for b, rows in enumerate(_random_batches(seed)):
        now = W + b * 1000
        state = group_state(blob, now=now)
        expected = output_samples(old((0, CUMULATIVE), iter([pd.DataFrame(rows)]), state))
        blob = state.get[0]
        got = tws.call(fn, store, (0, CUMULATIVE), rows, now=now)
        assert values(got) == values(expected), b
        overflowed |= any(s["labels"].get("l2m_overflow") for s in got)
    assert overflowed
    paged = {series for _rule, series in store.paged("counter_pages")}
    assert (OVERFLOW_SERIES in paged) == (small < 6)  # moved to pages


@pytest.mark.parametrize("small", [0, 512, 4])
@pytest.mark.parametrize("seed", range(40))
def test_the_caps_shortcut_admits_exactly_what_counting_every_series_admits(
        seed, small, monkeypatch):
    # Bounds on the live counts (expired series not yet swept count) decide only when no cap
    # can be reached; near the caps, and with series expiring between batches, the exact
    # counts decide: the same samples and refusals either way. The two rules' account and
    # metric caps differ (rule_caps never makes them so, but Admission checks each rule's).
    rnd = random.Random(seed)
    print("seed", seed)
    caps = {"c": RuleCaps(rnd.randint(1, 9), rnd.randint(0, 12), rnd.randint(0, 15), "a",
                          "c_total"),
            "d": RuleCaps(rnd.randint(1, 9), rnd.randint(0, 12), rnd.randint(0, 15), "a",
                          "c_total")}
    batches = [(W + b * rnd.choice([300, 1000, TTL // 2]),
                [row(rnd.choice(["c", "d"]), rnd.randint(0, 25), 1.0) for _ in
                 range(rnd.randint(1, 12))]) for b in range(8)]
    batches = [(sum(t - W for t, _ in batches[:i + 1]) + W, rows)
               for i, (_t, rows) in enumerate(batches)]
    outs = []
    for exact in (False, True):
        if exact:
            monkeypatch.setattr(CallCaps, "below_caps", lambda *a: False)
        fn, store = processor(caps, small=small)
        outs.append([sorted(orjson.dumps(s, option=orjson.OPT_SORT_KEYS)
                            for s in tws.call(fn, store, (0, CUMULATIVE), rows, now=now))
                     for now, rows in batches])
    assert outs[0] == outs[1]


@pytest.mark.parametrize("small", [0, 512])
def test_gauges_decide_exactly_as_one_blob_per_key_and_close_with_the_watermark(small):
    caps = {"g": RuleCaps(3, 0, 0, "a", "g")}
    fn, store = processor(caps, small=small)
    old = CappedBlobs(CounterState(COUNTERS, ttl_ms=TTL), GaugeState(GAUGES), caps=caps)
    blob = None
    for b in range(3):
        rows = [row("g", i, float(b + i), window=W) for i in range(b, b + 3)]
        state = gauge_group_state(blob, watermark=0)
        expected = output_samples(old((0, W), iter([pd.DataFrame(rows)]), state))
        blob = state.get[0]
        assert values(tws.call(fn, store, (0, W), rows, now=W + b)) == values(expected)
    assert store.timers[(0, W)] == {W + 60_000}
    tws.fire(fn, store, now=W + 60_000, watermark=W + 30_000)  # not closed yet: again later
    assert store.timers[(0, W)] == {W + 120_000}
    assert store.live("gauge_pages" if not small else "gauge_rules")
    tws.fire(fn, store, now=W + 120_000, watermark=W + 60_000)
    assert not store.live("gauge_pages") and not store.live("gauge_rules")
    assert not store.timers[(0, W)] and not store.live("meta")


def test_idle_series_expire_by_ttl_and_stop_counting_against_the_cap_a_bucket_later():
    caps = {"c": RuleCaps(2, 0, 0, "a", "c_total")}
    fn, store = processor(caps)  # one entry per series: Spark's TTL
    bucket = TTL // BUCKETS
    tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("c", 2)], now=W)
    store.reset()
    # expired for reads (no rewrite happened), but counted until its bucket has gone by
    later = W + TTL
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 3)], now=later)
    assert values(out) == {("c", (("l2m_overflow", "true"),)): 1.0,
                           ("l2m-series-refused", (("account", "a"), ("limit", "rule"),
                                                   ("rule", "c"))): 1.0}
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 1)], now=W + TTL + bucket)
    assert values(out) == {("c", (("s", "s1"),)): 1.0}  # restarted at 0: a counter reset


def test_a_small_rule_s_idle_series_expire_when_it_is_next_touched():
    caps = {"c": RuleCaps(2, 0, 0, "a", "c_total")}
    fn, store = processor(caps, small=512)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("c", 2)], now=W)
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 2), row("c", 3)], now=W + TTL + 1)
    assert values(out) == {("c", (("s", "s2"),)): 1.0, ("c", (("s", "s3"),)): 1.0}
    assert sorted(rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["s"]) == [
        name(2), name(3)]


def test_a_small_rule_is_one_read_and_one_write_per_batch_whatever_it_touches():
    fn, store = processor(small=512)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(100)], now=W)
    store.reset()
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 3), row("c", 7)], now=W + 500)
    assert values(out) == {("c", (("s", "s3"),)): 2.0, ("c", (("s", "s7"),)): 2.0}
    assert (store.reads, store.writes) == (2, 1)  # the rule's entry (and the key's meta)
    assert not store.live("counter_pages")
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(100, 600)],
             now=W + 600)  # past SMALL_RULE: in pages from now on
    assert len(store.paged("counter_pages")) == 600
    assert len(store.live("counter_pages")) == 19  # 600 series, 32 a page
    entry = rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")
    assert "s" not in entry and entry["n"] == {str(W // 1000): 600} and entry["pg"] == 19


def test_a_changed_signature_restarts_the_rule_without_rewriting_its_entries():
    fn, store = processor()
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(50)], now=W)
    changed = {**COUNTERS, "c": replace(BY_ID["c"], aggregation=Aggregation.SUM,
                                          field="v")}
    fn2 = MetricProcessor(CounterState(changed, ttl_ms=TTL), GaugeState(GAUGES))
    fn2.init(tws.Handle(store))  # type: ignore[arg-type]
    store.reset()
    out = tws.call(fn2, store, (0, CUMULATIVE), [row("c", 1, 5.0)], now=W + 1000)
    assert values(out) == {("c", (("s", "s1"),)): 5.0}
    assert store.writes == 3  # the series, the rule's entry, its group (a new bucket)
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["gen"] == 1


def test_an_untouched_rule_restarted_by_its_signature_counts_none_of_its_old_series():
    # Bounded as stored (its old 6 series keep the caps' shortcut off), counted exactly as
    # its new generation (none): the account's other rule gets all 9 series the cap allows.
    caps = {r: RuleCaps(0, 0, 9, "a", "c_total") for r in ("c", "d")}
    fn, store = processor(caps, small=512)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(6)], now=W)
    changed = {**COUNTERS, "c": replace(BY_ID["c"], aggregation=Aggregation.SUM,
                                          field="v")}
    fn2 = MetricProcessor(CounterState(changed, ttl_ms=TTL), GaugeState(GAUGES), caps=caps)
    fn2.init(tws.Handle(store))  # type: ignore[arg-type]
    out = tws.call(fn2, store, (0, CUMULATIVE), [row("d", i) for i in range(9)],
                   now=W + 1000)
    assert values(out) == {("d", (("s", f"s{i}"),)): 1.0 for i in range(9)}
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["gen"] == 1


def test_an_entry_of_another_format_is_refused():
    fn, store = processor()
    store.data[("meta", (0, CUMULATIVE), None)] = ((b'{"v": 10}',), None)
    with pytest.raises(StateFormatError, match="format 10"):
        tws.call(fn, store, (0, CUMULATIVE), [row("c", 1)], now=W)


@pytest.mark.parametrize(("meta", "found"), [
    (b'{"v": 6, "g": 1, "nb": 1}', 6), (b'{"v": 5, "g": 1}', 5), (b'{"v": 4}', 4),
    # continued by a development build, which rewrote the version but not the layout
    (b'{"v": 7, "g": 1}', 5), (b'{"v": 7, "nb": 1}', 4), (b'{"v": 7, "g": 1, "nb": 1}', 7)])
def test_a_key_of_a_development_build_s_format_is_refused_naming_it(meta, found):
    fn, store = processor()
    store.data[("meta", (0, CUMULATIVE), None)] = ((meta,), None)
    with pytest.raises(StateFormatError) as err:
        tws.call(fn, store, (0, CUMULATIVE), [row("c", 1)], now=W)
    assert str(err.value).startswith(
        f"a state key of the checkpoint holds state format {found}, which only 0.3.0 "
        "development builds wrote; this l2m continues format 2 (releases 0.1.0 and 0.2.0) "
        "and format 9. Start this release on a new `checkpoint:` path")


# The golden state's first account (acme): small rules (c, g) in its group, rules past the
# small size (d, k) in entries of their own that the group lists; and a rule without an
# account (b) in its own entry.
ACME_RULES = {r.id: r for r in load_text("""\
rules:
  - {id: b, name: bytes_total, kind: counter, query: "*", aggregation: sum, field: b,
     group_by: [svc]}
  - {id: c, account: acme, name: c_total, kind: counter, query: "*", aggregation: count,
     group_by: [svc]}
  - {id: d, account: acme, name: d_total, kind: counter, query: "*", aggregation: sum,
     field: v, group_by: [svc]}
  - {id: g, account: acme, name: g, kind: gauge, query: "*", aggregation: max, field: v,
     group_by: [svc]}
  - {id: k, account: acme, name: k, kind: gauge, query: "*", aggregation: count,
     group_by: [svc]}
""")[0]}
ACME_CAPS = {"b": RuleCaps(0), "c": RuleCaps(0, 0, 100, "acme", "c_total"),
             "d": RuleCaps(4, 0, 100, "acme", "d_total"),
             "g": RuleCaps(0, 0, 100, "acme", "g"), "k": RuleCaps(0, 0, 100, "acme", "k")}


def golden_row(rule: str, series: str, value: float, window: int | None = None,
               ts: int = W + 100) -> dict:
    return {**partial(series, None, 1, value, ts), "rule": rule, "window": window,
            "min": value, "max": value}


def _golden_store(kind: str) -> tuple[tws.Store, tuple[int, int], int]:
    """A store holding one key's format 9 state as pinned in tests/golden (written with a
    7-day TTL by :data:`GOLDEN_RULES`), every value as its stored bytes (base64: some are LZ4
    frames)."""
    doc = orjson.loads(GOLDEN_DIR.joinpath(f"state-v9-{kind}.json").read_bytes())
    key = tuple(doc["key"])
    store = tws.Store()
    for name, entries in doc["state"].items():
        if name == "timers":
            store.timers[key] = set(entries)
            continue
        for user, value in entries:
            raw = base64.b64decode(value)
            store.data[(name, key, tuple(user) if user is not None else None)] = ((raw,), None)
    return store, key, doc["now"]  # type: ignore[return-value]


def test_a_full_capped_rule_fed_unique_ids_reads_only_its_own_series():
    caps = {"c": RuleCaps(3, 0, 0, "a", "c_total")}
    fn, store = processor(caps)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(3)], now=W)
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["m"] == [
        name(0), name(1), name(2)]
    store.reset()
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 1)] + [row("c", 1000 + i)
                                                               for i in range(200)], now=W + 500)
    assert values(out) == {("c", (("s", "s1"),)): 2.0,
                           ("c", (("l2m_overflow", "true"),)): 200.0,
                           ("l2m-series-refused", (("account", "a"), ("limit", "rule"),
                                                   ("rule", "c"))): 200.0}
    # the account's group, the rule's entry, its one page (its listed series' and its overflow
    # series'), the refusal count, meta
    assert store.reads == 5


def test_a_listed_series_that_expired_is_new_again_and_the_list_is_pruned():
    caps = {"c": RuleCaps(100, 0, 0, "a", "c_total")}
    fn, store = processor(caps)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(80)], now=W)
    later = W + TTL + TTL // BUCKETS  # all 80 expired, their bucket gone, the entry kept
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("c", 500)], now=later)
    assert values(out) == {("c", (("s", "s1"),)): 1.0, ("c", (("s", "s500"),)): 1.0}
    entry = rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")
    assert entry["m"] == [name(1), name(500)]  # 79 expired names pruned (79 > 2 × 2 + 64)


def test_counting_an_account_s_other_rules_keeps_their_series_lists():
    caps = {"c": RuleCaps(5, 0, 50, "a", "c_total"), "d": RuleCaps(5, 0, 50, "a", "c_total")}
    fn, store = processor(caps)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("d", 2)], now=W)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", 3)], now=W + 10)  # counts d's series too
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")["m"] == [name(1), name(3)]
    assert rule_entry(store, "counter_rules", (0, CUMULATIVE), "d")["m"] == [name(2)]


def _golden_rules_processor(store: tws.Store, rules: dict, caps: dict, shards: int = 1
                            ) -> MetricProcessor:
    """A processor on ``store`` with the rules its golden state was written by (a 7-day TTL,
    a minute's grace)."""
    fn = MetricProcessor(
        CounterState({k: v for k, v in rules.items() if v.kind == "counter"},
                     ttl_ms=7 * 86_400_000),
        GaugeState({k: v for k, v in rules.items() if v.kind == "gauge"}, grace_ms=60_000),
        caps=caps, shards=shards)
    fn.init(tws.Handle(store))  # type: ignore[arg-type]
    return fn


def test_an_account_s_small_rules_are_one_read_and_one_write_per_batch_together():
    fn, store = processor(small=512)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("d", 2)], now=W)
    store.reset()
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("d", 3)], now=W + 500)
    assert values(out) == {("c", (("s", "s1"),)): 2.0, ("d", (("s", "s3"),)): 1.0}
    assert (store.reads, store.writes) == (2, 1)  # meta and the group; the group
    assert sorted(store.live("counter_rules")) == [((0, CUMULATIVE), (bucket_key(0),))]


def test_caps_over_an_account_read_its_group_once():
    caps = {r: RuleCaps(0, 0, 3, "a", "c_total") for r in ("c", "d")}
    fn, store = processor(caps, small=512)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", 1), row("d", 2)], now=W)
    store.reset()
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 3), row("c", 4)], now=W + 500)
    assert values(out) == {("c", (("s", "s3"),)): 1.0, ("c", (("l2m_overflow", "true"),)): 1.0,
                           ("l2m-series-refused", (("account", "a"), ("limit", "account"),
                                                   ("rule", "c"))): 1.0}
    assert store.reads == 3  # meta, the group (c's overflow series is in it), refusal count


def test_a_group_past_its_bound_moves_its_largest_rules_to_entries_of_their_own():
    buckets_module.GROUP_SERIES = 5
    fn, store = processor(small=512)
    tws.call(fn, store, (0, CUMULATIVE), [row("c", i) for i in range(4)]
             + [row("d", i) for i in range(3)], now=W)
    group = group_of(store, "counter_rules", (0, CUMULATIVE))
    assert sorted(group["r"]) == ["d"] and group["own"] == ["c"]
    own = rule_entry(store, "counter_rules", (0, CUMULATIVE), "c")
    assert own["o"] == 1 and len(own["s"]) == 4  # still small, in its own entry for good
    out = tws.call(fn, store, (0, CUMULATIVE), [row("c", 0), row("d", 0)], now=W + 500)
    assert values(out) == {("c", (("s", "s0"),)): 2.0, ("d", (("s", "s0"),)): 2.0}
    assert group_of(store, "counter_rules", (0, CUMULATIVE))["own"] == ["c"]


def _marked(fn, store, key, rows=None, now=0, watermark=0, timer=False) -> list[tuple]:
    """(mark, rule, labels, value) of every sample a call emits, in order."""
    store.key, store.now = key, now
    tv = tws.TimerValues(now, watermark)
    if timer:
        frames = fn.handleExpiredTimer(key, tv, tws.ExpiredTimerInfo(now))
    else:
        frames = fn.handleInputRows(key, iter([pd.DataFrame(rows)] if rows else []), tv)
    out = []
    for _key, value, _time, mark in output_rows(frames):
        s = orjson.loads(value)
        out.append((mark, s["rule"], tuple(sorted(s["labels"].items())), s["value"]))
    return out


@pytest.mark.parametrize("small", [0, 512])
def test_a_gauge_window_is_published_once_final_and_later_updates_are_corrections(small):
    """Published when the newest event time (watermark + grace) passes the window's end by
    the publish delay: every series of the key — the overflow series and l2m's refusal gauge
    too — marked final, once; updates after that are marked corrections; a window that gets
    no more logs is published by its timer."""
    caps = {"g": RuleCaps(2, 0, 0, "a", "g")}
    keycall_module.SMALL_RULE = small
    store = tws.Store()
    grace, delay = 1_200_000, 120_000
    fn = MetricProcessor(CounterState(COUNTERS, ttl_ms=TTL),
                         GaugeState(GAUGES, recheck_ms=60_000, grace_ms=grace,
                                    publish_delay_ms=delay), caps=caps)
    fn.init(tws.Handle(store))  # type: ignore[arg-type]
    before = W + 60_000 + delay - grace - 1  # the watermark just short of publishing
    rows = [row("g", i, float(i + 1), window=W) for i in range(3)]
    first = _marked(fn, store, (0, W), rows, now=W, watermark=before)
    assert {m for m, *_ in first} == {None}
    s = (("s", "s1"),)
    out = _marked(fn, store, (0, W), [row("g", 1, 9.0, window=W)], now=W + 1,
                  watermark=before + 1)
    assert out[0] == (None, "g", s, 9.0)  # the batch's own update, then the window, final
    finals = {(r, labels): v for m, r, labels, v in out[1:] if m == "final"}
    assert len(finals) == len(out) - 1
    assert finals == {("g", (("s", "s0"),)): 1.0, ("g", s): 9.0,
                      ("g", (("l2m_overflow", "true"),)): 3.0,
                      ("l2m-series-refused-window",
                       (("account", "a"), ("limit", "rule"), ("rule", "g"))): 1.0}
    later = _marked(fn, store, (0, W), [row("g", 0, 5.0, window=W)], now=W + 2,
                    watermark=before + 2)
    assert later == [("correction", "g", (("s", "s0"),), 5.0)]
    # Another window: published by its timer, with no more logs.
    w2 = W + 60_000
    _marked(fn, store, (0, w2), [row("g", 0, 7.0, window=w2)], now=W + 3, watermark=before + 2)
    assert _marked(fn, store, (0, w2), now=W + 60_003, watermark=before + 2, timer=True) == []
    assert _marked(fn, store, (0, w2), now=W + 120_003, watermark=before + 60_001,
                   timer=True) == [("final", "g", (("s", "s0"),), 7.0)]
    assert _marked(fn, store, (0, w2), now=W + 180_003, watermark=before + 60_002,
                   timer=True) == []


def test_a_counter_series_first_sample_is_marked_new():
    fn, store = processor()
    first = _marked(fn, store, (0, CUMULATIVE), [row("c", 0), row("c", 1)], now=W)
    assert [(m, labels) for m, _, labels, _ in first] == [
        ("new", (("s", "s0"),)), ("new", (("s", "s1"),))]
    again = _marked(fn, store, (0, CUMULATIVE), [row("c", 1), row("c", 2)], now=W + 1)
    assert [(m, labels) for m, _, labels, _ in again] == [
        (None, (("s", "s1"),)), ("new", (("s", "s2"),))]


def test_the_query_is_given_a_deferred_processor_that_decides_exactly_as_the_processor():
    """Spark's driver runs only the wrapper's init (the variables); each task unpickles the
    wrapper, and its first call rebuilds the processor on the variables init declared."""
    caps = {"c": RuleCaps(5, 0, 0, "a", "c"), "g": RuleCaps(3, 0, 0, "a", "g")}
    direct, expected = processor(caps)
    made = MetricProcessor(CounterState(COUNTERS, ttl_ms=TTL),
                           GaugeState(GAUGES, recheck_ms=60_000), caps=caps)
    wrapped = cloudpickle.loads(cloudpickle.dumps(made.deferred()))
    store = tws.Store()
    wrapped.init(tws.Handle(store))
    assert wrapped._impl is None  # nothing rebuilt until a call needs it
    for b in range(3):
        counters = [row("c", i, ts=W + b) for i in range(b, b + 4)]
        gauges = [row("g", i, float(b + i), window=W) for i in range(b, b + 3)]
        for key, rows in (((0, CUMULATIVE), counters), ((0, W), gauges)):
            assert tws.call(wrapped, store, key, rows, now=W + b) == \
                tws.call(direct, expected, key, rows, now=W + b)
    assert tws.fire(wrapped, store, now=W + 120_000, watermark=W + 60_000) == \
        tws.fire(direct, expected, now=W + 120_000, watermark=W + 60_000)
    assert store.data == expected.data and store.timers == expected.timers
    # paused from the task's first call (l2m.process.collector.task_paused)…
    assert not gc.isenabled()
    wrapped.close()
    assert gc.isenabled()  # … to its end
    assert store.ttls == expected.ttls == {
        "counter_series": TTL, "counter_pages": TTL, "counter_rules": TTL + 2 * (TTL // BUCKETS),
        "gauge_series": None, "gauge_pages": None, "gauge_rules": None, "meta": None}


# The rules format 7's golden state was written by: two accounts (acme: c, d, g, k; zeta: e,
# h) whose groups share one bucket, and a rule without an account (b).
GOLDEN_RULES = {**ACME_RULES, **{r.id: r for r in load_text("""\
rules:
  - {id: e, account: zeta, name: e_total, kind: counter, query: "*", aggregation: count,
     group_by: [svc]}
  - {id: h, account: zeta, name: h, kind: gauge, query: "*", aggregation: max, field: v,
     group_by: [svc]}
""")[0]}}
GOLDEN_CAPS = {**ACME_CAPS, "e": RuleCaps(0, 0, 100, "zeta", "e_total"),
               "h": RuleCaps(0, 0, 100, "zeta", "h")}


def _golden_processor(store: tws.Store) -> MetricProcessor:
    return _golden_rules_processor(store, GOLDEN_RULES, GOLDEN_CAPS)


def test_bucket_of_is_pinned_and_bucket_count_a_power_of_two_near_one_per_8_accounts():
    """Stored buckets are found by this hash: it must never change."""
    assert [bucket_of(a, 1024) for a in ("acme", "zeta", "tenant-0001", "")] == [
        706, 918, 747, 274]
    assert [bucket_count(n) for n in (0, 1, 8, 12, 24, 100, 2_500, 25_000)] == [
        1, 1, 1, 2, 4, 16, 256, 4_096]


# Format 9's golden state (tests/golden/state-v9-*.json, every value as its stored bytes): a
# counter key with zeta's rule e's 24 series and more, and acme's rule d in a page of its own;
# a gauge window with 24 series of g and of h, and acme's rule k in a page — each key's bucket
# past 1 KiB, stored as an LZ4 frame.
GOLDEN_SERIES = [f"5:svc{i:02d}" for i in range(24)]


def test_v9_counter_state_continues_exactly_from_a_framed_bucket_and_a_page():
    store, key, now = _golden_store("counter")
    bucket = (bucket_key(0),)
    assert store.data[("counter_rules", key, bucket)][0][0][:1] == b"\x00"  # framed
    fn = _golden_processor(store)
    rows = [golden_row("e", "5:svc00", 1.0, ts=now + 100),
            golden_row("e", "3:web", 1.0, ts=now + 100),
            golden_row("c", "3:web", 1.0, ts=now + 100)]
    store.reset()
    out = tws.call(fn, store, key, rows, now=now + 1000)
    assert values(out) == {("c", (("svc", "web"),)): 2.0, ("e", (("svc", "web"),)): 2.0,
                           ("e", (("svc", "svc00"),)): 2.0}
    assert (store.reads, store.writes) == (2, 1)  # meta and the bucket; the bucket
    assert store.data[("counter_rules", key, bucket)][0][0][:1] == b"\x00"  # framed again
    assert sorted(group_of(store, "counter_rules", key, "zeta")["r"]["e"]["s"]) == sorted(
        ["3:web", *GOLDEN_SERIES])
    store.reset()
    out = tws.call(fn, store, key, [golden_row("d", "2:db", 3.0, ts=now + 100)],
                   now=now + 2000)
    assert values(out) == {("d", (("svc", "db"),)): 5.0}
    # meta, the bucket (acme's group lists d's own entry), d's entry, its page; the page
    assert (store.reads, store.writes) == (4, 1)
    assert store.paged("counter_pages", key) == {
        ("d", n): [now + 2000 if n == "2:db" else W + 1000, {"": [
            *([2, 2, 5.0, "5.0", 2.0, 3.0, now + 100] if n == "2:db" else [1, 1, v, str(v),
                                                                           v, v, W + 100])]}]
        for n, v in (("!overflow", 1.0), ("2:db", 2.0), ("2:mq", 1.0), ("3:api", 1.0),
                     ("3:dns", 4.0))}


def test_v9_gauge_state_publishes_every_series_of_a_framed_bucket_and_a_page_once():
    store, key, now = _golden_store("gauge")
    fn = _golden_processor(store)
    out = tws.call(fn, store, key, [golden_row("h", "5:svc03", 9.0, window=key[1],
                                                ts=now + 100)], now=now + 1000)
    assert values(out) == {("h", (("svc", "svc03"),)): 9.0}
    final = tws.fire(fn, store, now=now + 60_000, watermark=key[1] + 120_000)
    published = output_samples(final)
    expected = {("g", (("svc", s[2:]),)): 7.0 for s in GOLDEN_SERIES}
    expected |= {("h", (("svc", s[2:]),)): 5.0 for s in GOLDEN_SERIES}
    expected |= {("h", (("svc", "svc03"),)): 9.0}
    expected |= {("k", (("svc", s),)): 1.0 for s in ("web", "api", "db")}
    assert len(published) == 51 and values(published) == expected
    assert store.data == {}


def test_a_counter_key_re_buckets_on_its_sweep_when_the_accounts_grow_fourfold():
    """A key made with 1 bucket; the rule set grows to 41 accounts in the key's shard (of 2):
    4 buckets wanted. The next sweep moves every group to its new bucket, and the values go
    on exactly."""
    store, key, now = _golden_store("counter")
    more = {f"x{i}": replace(GOLDEN_RULES["e"], id=f"x{i}", account=f"t{i}")
            for i in range(80)}
    fn = _golden_rules_processor(store, {**GOLDEN_RULES, **more}, {
        **GOLDEN_CAPS, **{r: RuleCaps(0, 0, 100, more[r].account, r) for r in more}}, shards=2)
    out = tws.call(fn, store, key, [golden_row("e", "3:web", 1.0, ts=now + 100)],
                   now=now + 1000)
    assert values(out) == {("e", (("svc", "web"),)): 2.0}
    assert store.live("meta")[key, None]["nb"] == 1  # not swept yet
    tws.call(fn, store, key, [golden_row("c", "3:web", 1.0, ts=now + 100)], now=now + 61_000)
    assert store.live("meta")[key, None]["nb"] == 4
    buckets = sorted(u[0] for (n, _k, u) in store.data if n == "counter_rules"
                     and u[0].startswith("@"))
    assert buckets == sorted({bucket_key(bucket_of(a, 4)) for a in ("acme", "zeta")})
    out = tws.call(fn, store, key, [golden_row("e", "3:web", 1.0, ts=now + 100),
                                    golden_row("c", "3:web", 1.0, ts=now + 100)],
                   now=now + 62_000)
    assert values(out) == {("e", (("svc", "web"),)): 3.0, ("c", (("svc", "web"),)): 3.0}


def _fuzz_rules(rnd: random.Random, accounts: list[str], start: int
                ) -> tuple[dict[str, Any], dict[str, RuleCaps]]:
    """Random small rules of ``accounts`` (1–3 each, counters and gauges, random caps) and a
    rule without an account."""
    specs = []
    for n, account in enumerate(accounts):
        for k in range(rnd.randint(1, 3)):
            kind = rnd.choice(["counter", "counter", "gauge"])
            agg = rnd.choice(["count", "sum"]) if kind == "counter" else rnd.choice(["max", "sum"])
            field = "" if agg == "count" else ", field: v"
            specs.append((f"r{start + n}x{k}", account, kind, agg, field))
    text = "rules:\n" + "".join(
        f"  - {{id: {i}, account: '{a}', name: m_{i}, kind: {kind}, query: '*', "
        f"aggregation: {agg}{field}, group_by: [s]}}\n" for i, a, kind, agg, field in specs)
    text += f"  - {{id: free{start}, name: free_{start}, kind: counter, query: '*', " \
            "aggregation: count, group_by: [s]}\n"
    rules = {r.id: r for r in load_text(text)[0]}
    caps = {r.id: RuleCaps(rnd.choice([0, 0, rnd.randint(1, 8)]), 0,
                           rnd.choice([0, rnd.randint(3, 30)]), r.account, r.name)
            for r in rules.values() if r.account is not None}
    caps[f"free{start}"] = RuleCaps(rnd.choice([0, 5]))
    return rules, caps


@pytest.mark.parametrize("seed", range(12))
def test_a_key_emits_exactly_the_same_whatever_its_buckets_and_across_re_bucketing(seed, capsys):
    """A key made with one bucket and kept so (the rule set's accounts spread over 64 shards)
    against one the rule set's accounts in a single shard make and grow eightfold
    (re-bucketing), over random rule sets, batches past sweeps and the TTL, counters and gauge
    windows with their timers, small bounds: the same samples, marks included, every call."""
    with capsys.disabled():
        print(f"seed {seed}")
    rnd = random.Random(seed)
    keycall_module.SMALL_RULE = rnd.choice([0, 2, 8, 512])
    buckets_module.GROUP_SERIES = rnd.choice([3, 12, 2_048])
    accounts = [rnd.choice([f"t{i}", str(i)]) for i in range(40)]
    first = _fuzz_rules(rnd, accounts[:4], 0)
    grown = _fuzz_rules(rnd, accounts[4:], 100)
    shards = {"spread": 64, "together": 1}
    stores = {name: tws.Store() for name in shards}

    def made(name: str, batch: int) -> MetricProcessor:
        rules, caps = first if batch < 6 else ({**first[0], **grown[0]}, {**first[1], **grown[1]})
        fn = MetricProcessor(
            CounterState({k: v for k, v in rules.items() if v.kind == "counter"}, ttl_ms=TTL),
            GaugeState({k: v for k, v in rules.items() if v.kind == "gauge"},
                       recheck_ms=60_000, grace_ms=60_000), caps=caps, shards=shards[name])
        fn.init(tws.Handle(stores[name]))  # type: ignore[arg-type]
        return fn

    now = W
    for batch in range(14):
        now += rnd.choice([300, 20_000, 61_000, TTL // 2, TTL + 3_000])
        rules = first[0] if batch < 6 else {**first[0], **grown[0]}
        window = now // 60_000 * 60_000
        rows = {(0, CUMULATIVE): [], (0, window): []}
        for _ in range(rnd.randint(1, 60)):
            rule = rules[rnd.choice(sorted(rules))]
            if rule.kind == "gauge":
                rows[0, window].append(row(rule.id, rnd.randint(0, 9), float(rnd.randint(1, 5)),
                                           window=window, ts=now - 100))
            else:
                rows[0, CUMULATIVE].append(row(rule.id, rnd.randint(0, 9), ts=now - 100))
        outs = {}
        for name, store in stores.items():
            fn = made(name, batch)
            out = [_marked(fn, store, key, key_rows, now=now, watermark=now - 90_000)
                   for key, key_rows in sorted(rows.items()) if key_rows]
            out.append(_marked_timers(fn, store, now, now - 90_000))
            outs[name] = out
        assert outs["spread"] == outs["together"], (seed, batch)
    assert stores["spread"].live("meta")[(0, CUMULATIVE), None]["nb"] == 1
    meta = stores["together"].live("meta")
    assert meta[(0, CUMULATIVE), None]["nb"] >= 2  # re-bucketed as the accounts grew


def _marked_timers(fn: MetricProcessor, store: tws.Store, now: int, watermark: int
                   ) -> list[tuple]:
    """(mark, rule, labels, value) of every sample the timers due at ``now`` emit."""
    out = []
    for _key, value, _time, mark in output_rows(tws.fire(fn, store, now=now,
                                                          watermark=watermark)):
        s = orjson.loads(value)
        out.append((mark, s["rule"], tuple(sorted(s["labels"].items())), s["value"]))
    return out
