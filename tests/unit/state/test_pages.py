"""Format 9's pages (:mod:`l2m.state.pages`, the addressing in :mod:`l2m.state.format`): where a
series is stored must never change, growing splits only the pages it says, and a call reads
each page once and writes each changed page once."""

from __future__ import annotations

import random

import pytest

from l2m.state.format import (
    PAGE_SERIES,
    load_value,
    page_at,
    page_of,
    pages_for,
    series_hash,
    split_from,
)
from l2m.state.pages import Pages
from tests.support import tws


def test_the_page_of_a_series_is_pinned():
    """Stored pages are found by this: it must never change."""
    assert [series_hash(n) for n in ("3:web", "", "5:svc00", "2:é")] == [
        1438502093, 0, 2180933433, 491196593]
    assert [page_of("3:web", p) for p in (1, 2, 3, 4, 5, 32, 33, 1000)] == [
        0, 1, 1, 1, 1, 13, 13, 205]
    assert [pages_for(n) for n in (0, 1, 32, 33, 1000, 250_000)] == [1, 1, 1, 2, 32, 7813]
    assert PAGE_SERIES == 32


@pytest.mark.parametrize("seed", range(5))
def test_growing_moves_series_only_out_of_the_pages_it_splits(seed):
    rnd = random.Random(seed)
    print("seed", seed)
    hashes = [rnd.getrandbits(32) for _ in range(2000)]
    for _ in range(200):
        old = rnd.randint(1, 300)
        new = old + rnd.randint(1, 300)
        sources = set(split_from(old, new))
        for h in hashes:
            before, after = page_at(h, old), page_at(h, new)
            assert 0 <= before < old and 0 <= after < new
            assert after == before or (before in sources and (after >= old or
                                                              after in sources))


def test_pages_are_filled_evenly():
    """Linear hashing: between two powers of two the pages not split yet hold twice the
    others' share."""
    counts: dict[int, int] = {}
    for i in range(32_000):
        page = page_of(f"u{i}", 1000)
        counts[page] = counts.get(page, 0) + 1
    split = [counts[p] for p in range(1000) if p < 1000 - 512 or p >= 512]
    unsplit = [counts[p] for p in range(1000 - 512, 512)]
    assert len(counts) == 1000
    assert min(split) > 20 and max(split) < 48  # 32,000 / 1,024 ≈ 31 each
    assert min(unsplit) > 45 and max(unsplit) < 80  # ≈ 62 each


def _pages(store: tws.Store, fresh: bool = False, since: int | None = None) -> Pages:
    store.key = (0, -1)
    return Pages(tws.MapState(store, "counter_pages", None), fresh, since)


def test_a_call_reads_each_page_once_writes_each_changed_page_once_and_grows():
    store = tws.Store()
    pages = _pages(store, fresh=True)
    values = {f"s{i}": [100, {"": i}] for i in range(40)}
    pages.put("r", 3, 1, values)
    pages.grow("r", 3, 1, 2)
    pages.flush()
    assert store.reads == 0 and store.writes == 2  # a fresh key reads nothing
    assert store.paged("counter_pages") == {("r", n): v for n, v in values.items()}
    held = {k[2][1]: load_value(v[0]) for k, v in store.data.items()}
    assert {p: sorted(page["s"]) == sorted(n for n in values if page_of(n, 2) == p)
            for p, page in held.items()} == {0: True, 1: True}
    store.reset()
    later = _pages(store, since=50)
    assert later.fetch("r", 3, 2, ["s1", "s2", "s3", "nope"]) == {
        f"s{i}": [100, {"": i}] for i in (1, 2, 3)}
    assert later.fetch("r", 3, 2, ["s5"]) == {"s5": [100, {"": 5}]}
    assert store.reads == 2  # both pages, once each
    assert later.fetch("r", 4, 2, ["s1"]) == {"s1": [100, {"": 1}]}  # read as generation 3
    other = _pages(store)
    assert other.fetch("r", 4, 2, ["s1", "s2"]) == {}  # another generation's pages: none


def test_expired_counter_series_are_left_out_of_what_is_read_and_written():
    store = tws.Store()
    pages = _pages(store, fresh=True)
    pages.put("r", 0, 1, {"old": [10, {}], "new": [90, {}]})
    pages.flush()
    later = _pages(store, since=50)
    assert later.fetch("r", 0, 1, ["old", "new"]) == {"new": [90, {}]}
    later.put("r", 0, 1, {"new": [100, {}]})
    later.flush()
    assert store.paged("counter_pages") == {("r", "new"): [100, {}]}
    gone = _pages(store, since=200)
    gone.put("r", 0, 1, {"new": [100, {}]})  # expired as written: the page is removed
    gone.flush()
    assert store.paged("counter_pages") == {} and not store.data


def test_a_listed_rule_s_pages_without_listed_series_are_known_empty():
    store = tws.Store()
    pages = _pages(store)
    listed = {"a"}
    new = next(f"n{i}" for i in range(100) if page_of(f"n{i}", 4) != page_of("a", 4))
    pages.put("r", 0, 4, {new: [1, {}]}, listed)
    assert store.reads == 0
    pages.put("r", 0, 4, {"a": [1, {}]}, listed)
    assert store.reads == 1
