"""A counter rule whose ``account`` changes restarts at 0 on state format 7 (docs/streaming.md,
"Rules and restarts"), on the stand-in state server (:mod:`tests.support.tws`): its state is
kept with its account's group, so its old entries stay where they were until the TTL drops
them, and none of them may be read as the rule's again — neither once its new entry has
moved its series out past the small size (same generation number). Back at its first account
within ``counter_ttl``, the rule continues that account's counts. A gauge window's series
entries are generations too."""

from __future__ import annotations

from dataclasses import replace

import pytest

import l2m.state.keycall as keycall_module
from l2m.engine.admission import RuleCaps
from l2m.state.counters import CounterState
from l2m.state.format import CUMULATIVE, dump_entry, load_entry
from l2m.state.gauges import GaugeState
from l2m.state.keycall import SMALL_RULE
from l2m.state.processor import MetricProcessor
from tests.support import tws
from tests.support.outputs import output_samples
from tests.unit.state.test_state_processor import BY_ID, TTL, W, row, rule_entry, values

A = {"c": BY_ID["c"]}  # a count by `s`, of account a's logs
B = {"c": replace(BY_ID["c"], account="b")}  # the same rule, of account b's logs
KEY = (0, CUMULATIVE)
OTHER_KEY = (1, CUMULATIVE)  # another shard's counter key


@pytest.fixture(autouse=True)
def _small_rule():
    yield
    keycall_module.SMALL_RULE = SMALL_RULE


def _processor(store: tws.Store, rules: dict, small: int, listed: bool) -> MetricProcessor:
    """A processor of ``rules`` on ``store``; ``small``: the series a rule keeps in its entry;
    ``listed``: a per-rule cap small enough that a moved-out rule's entry lists its series."""
    keycall_module.SMALL_RULE = small
    caps = {"c": RuleCaps(1_000, account_name=rules["c"].account)} if listed else None
    fn = MetricProcessor(CounterState(rules, ttl_ms=TTL), GaugeState({}), caps=caps)
    fn.init(tws.Handle(store))  # type: ignore[arg-type]
    return fn


def _count(fn: MetricProcessor, store: tws.Store, key: tuple, series: range, now: int
           ) -> dict[str, float]:
    """One log of each of ``series`` counted by rule c: its samples' values by series."""
    out = values(tws.call(fn, store, key, [row("c", i) for i in series], now=now))
    return {dict(labels)["s"]: v for (rule, labels), v in out.items() if rule == "c"}


def _ones(series: range, value: float = 1.0) -> dict[str, float]:
    return {f"s{i}": value for i in series}


def _moved_to_b(store: tws.Store, small: int, listed: bool) -> None:
    """Rule c counts 10 series of account a twice, then moves to account b in the same key:
    b's counts restart at 0, and none of a's entries (still live: the TTL is 128 s) is read
    as b's, before or after b's entry moves its series out."""
    fn_a = _processor(store, A, small, listed)
    assert _count(fn_a, store, KEY, range(10), W) == _ones(range(10))
    assert _count(fn_a, store, KEY, range(10), W + 1_000) == _ones(range(10), 2.0)
    fn_b = _processor(store, B, small, listed)
    assert _count(fn_b, store, KEY, range(1), W + 2_000) == _ones(range(1))
    assert _count(fn_b, store, KEY, range(6), W + 3_000) == {**_ones(range(6)), "s0": 2.0}
    assert _count(fn_b, store, KEY, range(6, 10), W + 4_000) == _ones(range(6, 10))
    assert _count(fn_b, store, KEY, range(10), W + 5_000) == \
        {**_ones(range(6), 2.0), "s0": 3.0, **_ones(range(6, 10), 2.0)}


# small=512: every entry in its account's group; 4: a's entry has moved its series out, b's
# does so in its second batch; 0: one entry per series from the first. listed: a per-rule cap
# whose entry lists its series (a batch reads only listed ones).
@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("small", [512, 4, 0])
def test_a_rule_moved_to_another_account_in_its_shard_restarts_at_0(small, listed):
    _moved_to_b(tws.Store(), small, listed)


@pytest.mark.parametrize("small", [512, 4, 0])
def test_a_rule_moved_to_another_shard_restarts_at_0(small):
    store = tws.Store()
    fn_a = _processor(store, A, small, False)
    assert _count(fn_a, store, KEY, range(10), W) == _ones(range(10), 1.0)
    fn_b = _processor(store, B, small, False)
    assert _count(fn_b, store, OTHER_KEY, range(10), W + 1_000) == _ones(range(10))
    assert _count(fn_b, store, OTHER_KEY, range(10), W + 2_000) == _ones(range(10), 2.0)


# A rule back at its first account within counter_ttl finds that account's series where it left
# them, and they continue: that account's counters count its logs for as long as they live,
# monotonic in its own tenant (a restart at 0 would be a counter reset there, for nothing).
# Small (512), its entry is a member of a's group, which b's use did not touch: a continues
# exactly (3.0). Moved out (4, 0), its own entry and its series entries are keyed by the rule
# alone, and b's overwrote them (the rule counted b's logs under the same keys): a's counts
# are gone from the state. That entry records b's account, so a starts a new generation, at
# 0 (1.0 after this batch) — a counter reset in a's tenant, never a count of b's logs (before,
# a read b's entry as its own and continued b's counts: s0 4.0, s1 to s9 3.0).
@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("small", [512, 4, 0])
def test_a_rule_back_at_its_first_account_in_its_shard_continues_that_account_s_counts(
        small, listed):
    store = tws.Store()
    _moved_to_b(store, small, listed)
    fn_a = _processor(store, A, small, listed)
    expected = 3.0 if small == 512 else 1.0
    assert _count(fn_a, store, KEY, range(10), W + 6_000) == _ones(range(10), expected)
    assert _count(fn_a, store, KEY, range(10), W + 7_000) == _ones(range(10), expected + 1)
    if small < 512:
        assert rule_entry(store, "counter_rules", KEY, "c")["gen"] == W + 6_000


# Within the small size under one of the two accounts, the rule's keys were never the other
# account's: a's counts are intact and continue exactly, a's entry in its group (a small: 2
# series) or its own entry and series entries (b small: b's in b's group).
@pytest.mark.parametrize(("at_a", "at_b"), [(2, 10), (10, 2)])
def test_a_rule_small_under_one_of_the_accounts_continues_its_first_account_s_counts(at_a, at_b):
    store = tws.Store()
    fn_a = _processor(store, A, 4, False)
    assert _count(fn_a, store, KEY, range(at_a), W) == _ones(range(at_a))
    fn_b = _processor(store, B, 4, False)
    assert _count(fn_b, store, KEY, range(at_b), W + 1_000) == _ones(range(at_b))
    assert _count(fn_b, store, KEY, range(at_b), W + 2_000) == _ones(range(at_b), 2.0)
    fn_a = _processor(store, A, 4, False)
    assert _count(fn_a, store, KEY, range(at_a), W + 3_000) == _ones(range(at_a), 2.0)


@pytest.mark.parametrize("small", [4, 0])
def test_a_moved_out_rule_s_entry_records_its_account_and_one_without_is_its_current_one(small):
    # Its own entry says whose counts it holds; one written before it did (a format 7
    # checkpoint of an earlier build) is the rule's current account's, and continues.
    store = tws.Store()
    fn_a = _processor(store, A, small, False)
    _count(fn_a, store, KEY, range(10), W)
    stored = store.data[("counter_rules", KEY, ("c",))]
    entry = load_entry(stored[0][0])
    assert entry["acct"] == "a"
    del entry["acct"]
    store.data[("counter_rules", KEY, ("c",))] = ((dump_entry(entry),), stored[1])
    assert _count(fn_a, store, KEY, range(10), W + 1_000) == _ones(range(10), 2.0)
    assert rule_entry(store, "counter_rules", KEY, "c")["acct"] == "a"


@pytest.mark.parametrize("small", [512, 4, 0])
def test_a_rule_back_at_its_first_account_s_shard_continues_that_account_s_counts(small):
    store = tws.Store()
    fn_a = _processor(store, A, small, False)
    assert _count(fn_a, store, KEY, range(10), W) == _ones(range(10))
    fn_b = _processor(store, B, small, False)
    assert _count(fn_b, store, OTHER_KEY, range(10), W + 1_000) == _ones(range(10))
    fn_a = _processor(store, A, small, False)
    assert _count(fn_a, store, KEY, range(10), W + 2_000) == _ones(range(10), 2.0)


def test_an_unchanged_rule_continues_whatever_the_other_accounts_rules_do():
    # The restart is the moved rule's alone: a rule that stays in its account continues
    # across the other's moves, small or moved out.
    store = tws.Store()
    both = {"c": BY_ID["c"], "d": replace(BY_ID["c"], id="d", account="b")}
    moved = {**both, "d": replace(both["d"], account="a")}
    fn = _processor(store, both, 4, False)
    tws.call(fn, store, KEY, [row("c", i) for i in range(10)] + [row("d", 0)], now=W)
    fn = _processor(store, moved, 4, False)
    out = values(tws.call(fn, store, KEY, [row("c", i) for i in range(10)] + [row("d", 0)],
                          now=W + 1_000))
    assert out == {**{("c", (("s", f"s{i}"),)): 2.0 for i in range(10)},
                   ("d", (("s", "s0"),)): 1.0}
    assert rule_entry(store, "counter_rules", KEY, "c")["sig"][0] == "count"


@pytest.mark.parametrize("small", [4, 0])
def test_a_gauge_rule_moved_to_another_account_within_a_window_starts_it_anew(small):
    # A window key's series entries are generations too: b's maximum is of b's logs only.
    keycall_module.SMALL_RULE = small
    store = tws.Store()
    window = (0, W)
    gauges_a = {"g": BY_ID["g"]}
    gauges_b = {"g": replace(BY_ID["g"], account="b")}
    for rules, value, at in ((gauges_a, 100.0, W), (gauges_b, 1.0, W + 1_000)):
        fn = MetricProcessor(CounterState({}, ttl_ms=TTL), GaugeState(rules))
        fn.init(tws.Handle(store))  # type: ignore[arg-type]
        tws.call(fn, store, window, [row("g", 0, value, window=W)], now=at)
        out = tws.call(fn, store, window, [row("g", i, value, window=W) for i in range(10)],
                       now=at + 500)
        assert values(out) == {("g", (("s", f"s{i}"),)): value for i in range(10)}


# A gauge rule moved to account b within a window (and back to a, ``back``): the window's
# samples, in the batch and published final, are of the rule's current account's logs only.
# Published final, the window reads the rule's entry as a batch does (the member of its
# account's group, or the own entry that group lists, if it is that account's), never the
# other account's left in the key (before, whichever entry the key's iteration gave last:
# here b's 1,000.0 published as a's). Back at a: a's entry in its group (512) is untouched
# and continues (a's maximum, 100.0); moved out (4, 0), b's own entry and series entries took
# the rule's keys, and a starts the window anew (5.0).
@pytest.mark.parametrize("back", [False, True])
@pytest.mark.parametrize("small", [512, 4, 0])
def test_a_gauge_rule_s_window_is_of_its_current_account_s_logs_only(small, back):
    keycall_module.SMALL_RULE = small
    store = tws.Store()
    window = (0, W)
    gauges_a = {"g": BY_ID["g"]}
    gauges_b = {"g": replace(BY_ID["g"], account="b")}
    moves = [(gauges_a, 100.0, W), (gauges_b, 1_000.0, W + 1_000)]
    if back:
        moves.append((gauges_a, 5.0, W + 2_000))
    for rules, value, at in moves:
        fn = MetricProcessor(CounterState({}, ttl_ms=TTL), GaugeState(rules, grace_ms=0))
        fn.init(tws.Handle(store))  # type: ignore[arg-type]
        tws.call(fn, store, window, [row("g", 0, value, window=W)], now=at)
        out = tws.call(fn, store, window, [row("g", i, value, window=W) for i in range(10)],
                       now=at + 500)
    expected = 1_000.0 if not back else 100.0 if small == 512 else 5.0
    assert values(out) == {("g", (("s", f"s{i}"),)): expected for i in range(10)}
    final = output_samples(tws.fire(fn, store, now=W + 60_000, watermark=W + 120_000))
    assert values(final) == {("g", (("s", f"s{i}"),)): expected for i in range(10)}
