"""A large rule's series in pages (format 9): what one state call reads of them and writes back.

A rule past its small size (:data:`l2m.state.keycall.SMALL_RULE`) keeps its series in
``pages`` map entries (its entry's ``"pg"``), each holding the series whose name hashes to it
(:func:`l2m.state.format.page_of`, linear hashing): about :data:`~l2m.state.format.PAGE_SERIES`
a page, so a batch bringing 100,000 new series writes about 3,000 entries, not 100,000, and a
batch touching a few series reads and writes the few pages they are in. When a rule's series
outgrow its pages, the pages whose series move are read and split (:meth:`Pages.grow`): each
page's series are rewritten about once per doubling of the rule.

Input: a page map (``counter_pages`` or ``gauge_pages``, :mod:`l2m.state.variables`), whether
the key holds nothing yet, and for counters when a series last touched counts as expired.
Output: the stored values of the series a call asks for; the pages it changed, written once at
the end (:meth:`Pages.flush`), expired counter series left out. Layout:
:mod:`l2m.state.format`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from l2m.state.format import dump_value, load_value, page_at, series_hash, split_from
from l2m.state.mapio import MapIO

Page = tuple[str, int]  # (rule, page number): a page's key


class Pages:
    """The pages one call reads (each at most once) and writes back (module docstring).
    ``since``: counter series last touched before it are expired (None: gauges, which do not
    expire)."""

    def __init__(self, state: Any, fresh: bool, since: int | None) -> None:
        self.state = state
        self.fresh = fresh  # a key without meta holds nothing: no page is read
        self.since = since
        self.series: dict[Page, dict[str, Any]] = {}  # a page read (or known empty): its series
        self.gens: dict[str, int] = {}  # each rule's generation, the pages' it reads
        self.stored: set[Page] = set()  # pages the state holds (of any generation)
        self.dirty: set[Page] = set()
        self._hashes: dict[str, int] = {}  # each series' hash, computed once a call
        self._at: dict[int, dict[str, int]] = {}  # each series' page, by the pages' number

    def where(self, names: Iterable[str], pages: int) -> dict[str, int]:
        """The page of each of these series among a rule's ``pages`` (each computed once a
        call: a batch's series are looked up, then written)."""
        hashes = self._hashes
        at = self._at.setdefault(pages, {})
        out: dict[str, int] = {}
        for name in names:
            page = at.get(name)
            if page is None:
                h = hashes.get(name)
                if h is None:
                    h = hashes[name] = series_hash(name)
                page = at[name] = page_at(h, pages)
            out[name] = page
        return out

    def load(self, rule_id: str, gen: int, numbers: Iterable[int],
             empty: Iterable[int] = ()) -> None:
        """Read the rule's pages among ``numbers`` not read yet, in one pipelined exchange:
        the series of generation ``gen`` they hold (a page of another generation holds none).
        ``empty``: pages known to hold none of the rule's series, taken as such unread."""
        self.gens[rule_id] = gen
        for number in empty:
            self.series.setdefault((rule_id, number), {})
        wanted = sorted({n for n in numbers if (rule_id, n) not in self.series})
        if not wanted:
            return
        keys = [(rule_id, n) for n in wanted]
        raws = [None] * len(keys) if self.fresh else MapIO(self.state).get(keys)
        for key, raw in zip(keys, raws, strict=True):
            page = load_value(raw)
            if page is not None:
                self.stored.add(key)
            self.series[key] = page["s"] if page is not None and page["g"] == gen else {}

    def fetch(self, rule_id: str, gen: int, pages: int, names: Iterable[str]
              ) -> dict[str, Any]:
        """The stored values of these series of the rule (of ``pages`` pages, generation
        ``gen``), their pages read as needed; counters last touched before ``since`` are
        expired, whatever Spark's TTL has done yet."""
        where = self.where(names, pages)
        self.load(rule_id, gen, where.values())
        found: dict[str, Any] = {}
        since = self.since
        for name, number in where.items():
            value = self.series[rule_id, number].get(name)
            if value is not None and (since is None or value[0] >= since):
                found[name] = value
        return found

    def put(self, rule_id: str, gen: int, pages: int, values: dict[str, Any],
            listed: set[str] | None = None) -> None:
        """Store these series' values. Their pages not read yet are read first (one exchange);
        ``listed``: every series the rule holds, so a page none of them is in is known empty."""
        where = self.where(values, pages)
        unread = {n for n in where.values() if (rule_id, n) not in self.series}
        if unread and listed is not None:
            holding = set(self.where(listed, pages).values())
            self.load(rule_id, gen, unread & holding, unread - holding)
        else:
            self.load(rule_id, gen, unread)
        series = self.series
        for name, number in where.items():
            series[rule_id, number][name] = values[name]
        self.dirty.update((rule_id, number) for number in set(where.values()))

    def grow(self, rule_id: str, gen: int, old: int, new: int) -> None:
        """The rule's series spread over ``new`` pages instead of ``old``: the pages whose
        series may move read (if not yet) and split (:func:`~l2m.state.format.split_from`)."""
        if new <= old:
            return
        sources = split_from(old, new)
        self.load(rule_id, gen, sources)
        moving: dict[str, Any] = {}
        for number in sources:
            moving.update(self.series[rule_id, number])
            self.series[rule_id, number] = {}
            self.dirty.add((rule_id, number))
        for number in range(old, new):
            # A page of an older generation may be stored there: it is overwritten, or it
            # reads as holding nothing.
            self.series[rule_id, number] = {}
            self.dirty.add((rule_id, number))
        for name, number in self.where(moving, new).items():
            self.series[rule_id, number][name] = moving[name]

    def holds(self, rule_id: str, gen: int, pages: int, name: str) -> bool:
        """Whether the series ``name`` of the rule is stored (its page read if not yet)."""
        return bool(self.fetch(rule_id, gen, pages, (name,)))

    def flush(self) -> None:
        """Write every page this call changed, expired counter series left out; a page left
        with none is removed (or, never stored, not written)."""
        since = self.since
        puts = []
        for key in sorted(self.dirty):
            series = self.series[key]
            if since is not None:
                series = {n: v for n, v in series.items() if v[0] >= since}
            if series:
                puts.append((key, dump_value({"g": self.gens[key[0]],
                                              "s": dict(sorted(series.items()))})))
            elif key in self.stored:
                self.state.removeKey(key)
        MapIO(self.state).put(puts)
        self.dirty.clear()
