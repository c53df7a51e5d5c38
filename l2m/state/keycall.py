"""What a format 9 state call does for counter keys and window keys alike: the key's meta
read (and refused when not format 9's), its :class:`~l2m.state.rulebook.RuleBook` made, the
series its rows touch read and written, and one key's batch applied rule by rule
(:meth:`KeyCall.apply`), the caps deciding new series.

Input: the call's :class:`Call` (its rule set's counters, gauges and caps, passed explicitly),
the processor's state variables and handle. Output: the samples of the rules' rows, the entries
written. :class:`~l2m.state.counterkeys.CounterCall` and
:class:`~l2m.state.windowkeys.WindowCall` build on it.

A rule keeps its series inside its entry (read and written whole, and swept when touched)
until it has more than :data:`SMALL_RULE`; then in pages (:mod:`l2m.state.pages`), so that a
batch reads and writes only the pages of the series it touches, and a burst of new series
costs a request per page, about 32 series, not one per series. Most rules have a few dozen
series. A rule whose signature changes starts a new *generation*: its older entries read as
absent and expire by TTL (counters) or with their window, with no batch that rewrites them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import Accumulator
from pyspark.sql.streaming import StatefulProcessorHandle

from l2m.engine.admission import OVERFLOW_SERIES, Admission
from l2m.engine.rulesets import RuleVersion
from l2m.rules.model import Rule
from l2m.state.caps import CallCaps
from l2m.state.counters import REFUSED_RULE, CounterState
from l2m.state.format import STATE_FORMAT, check_key_meta, load_value, pages_for
from l2m.state.gauges import GaugeState
from l2m.state.output import refusal_rows
from l2m.state.pages import Pages
from l2m.state.rows import Rows
from l2m.state.rulebook import RuleBook, live_since
from l2m.state.tally import Tally
from l2m.state.variables import Variables

SMALL_RULE = 512  # series a rule keeps inside its entry, at most

# One rule's rows of a key applied: (rule, rows, stored series, generation, caps) → samples.
Update = Callable[[str, Rows, dict[str, Any], int, Admission | None], list[dict[str, Any]]]


@dataclass(frozen=True)
class Call:
    """What one state call runs with: the counters, gauges and series caps of the rule set
    its rows were planned with (``version``; None: fixed rules), the job's state shards, and
    where the per-rule samples are counted."""

    counters: CounterState
    gauges: GaugeState
    caps: CallCaps
    version: RuleVersion | None
    shards: int = 1
    activity: Accumulator[Tally] | None = None


def read_meta(variables: Variables) -> tuple[dict[str, Any], bool]:
    """A key's meta (a new key's as format 9 starts it), and whether the key is new: without
    one, it holds nothing (:attr:`RuleBook.fresh`). A stored meta not of format 9 is refused
    (:func:`~l2m.state.format.check_key_meta`)."""
    meta = load_value(variables.meta.get()) or {}
    if not meta:
        return {"v": STATE_FORMAT, "g": 1}, True
    check_key_meta(meta)
    return meta, False


class KeyCall:
    """One call on one state key (subclasses: counter keys, window keys)."""

    def __init__(self, call: Call, variables: Variables, handle: StatefulProcessorHandle
                 ) -> None:
        self.call = call
        self.vars = variables
        self.handle = handle
        self.pages = Pages(None, True, None)  # the call's, made by apply()

    def meta(self) -> tuple[dict[str, Any], bool]:
        """The key's meta, and whether the key is new (:func:`read_meta`)."""
        return read_meta(self.vars)

    def book(self, state: Any, now: int, bucket_ms: int | None, ttl_ms: int, shard: int,
             rules: Mapping[str, Rule], meta: dict[str, Any], fresh: bool) -> RuleBook:
        """The call's rule entries of ``state`` (a rule map), in the key's buckets: a new key
        (``fresh``) is made with buckets sized by the rule set, which its meta then
        records."""
        if fresh:
            meta["nb"] = self.call.caps.bucket_count(shard, self.call.shards, rules)
        return RuleBook(state, now, bucket_ms, ttl_ms, meta["nb"], fresh)

    def lookup(self, state: Any, book: RuleBook, rule_id: str, names: set[str], gen: int,
               since: int | None = None) -> tuple[dict[str, Any], bool]:
        """The stored entries of the rule's series among ``names`` (for a listed rule only
        the listed ones are read), its overflow series' too when some are new; and whether
        some are. ``since``: counters last touched before it count as expired. A rule with an
        entry keeps its series in pages (:attr:`pages`), l2m's own rules one entry each in
        ``state``."""
        listed = book.listed(rule_id)
        lookup = names if listed is None else names & listed
        found = self.stored(state, book, rule_id, sorted(lookup), gen, since)
        if listed is not None and len(found) < len(lookup):
            book.listing(rule_id, (), lookup - found.keys())  # expired meanwhile
        new = not names <= found.keys()
        if new:
            found.update(self.stored(state, book, rule_id, (OVERFLOW_SERIES,), gen, since))
        return found, new

    def stored(self, state: Any, book: RuleBook, rule_id: str, names: Iterable[str], gen: int,
               since: int | None) -> dict[str, Any]:
        """The stored entries of these series (:meth:`fetch`): a paged rule's from its pages."""
        entry = book.entries.get(rule_id)
        if entry is None:
            return self.fetch(state, book, rule_id, names, gen, since)
        return self.pages.fetch(rule_id, gen, entry["pg"], names)

    def write_series(self, book: RuleBook, rule_id: str, gen: int, values: dict[str, Any]
                     ) -> None:
        """A paged rule's written series in their pages, which are spread over more once the
        rule's series outgrow them (:meth:`~l2m.state.pages.Pages.grow`)."""
        entry = book.entries[rule_id]
        pages = entry["pg"]
        self.pages.put(rule_id, gen, pages, values, book.listed(rule_id))
        wanted = pages_for(book.bound(rule_id, None))
        if wanted > pages:
            self.pages.grow(rule_id, gen, pages, wanted)
            entry["pg"] = wanted
            book.changed.add(rule_id)

    def keep_small(self, rule_id: str, book: RuleBook, state: Any, gen: int,
                   series: dict[str, Any]) -> None:
        """A small rule's updated series back in its entry; past :data:`SMALL_RULE` they move
        to one entry each (:meth:`spill`)."""
        book.entries[rule_id]["s"] = series
        book.changed.add(rule_id)
        if len(series) > SMALL_RULE:
            self.spill(rule_id, book, state, gen)

    def spill(self, rule_id: str, book: RuleBook, state: Any, gen: int) -> None:
        """A rule outgrew :data:`SMALL_RULE`: its series move from its entry to its pages
        (once per generation), counted and listed as such rules are."""
        entry = book.entries[rule_id]
        small = entry.pop("s")
        pages = entry["pg"] = pages_for(len(small))
        # Pages of an older generation read as holding nothing: none is read.
        self.pages.load(rule_id, gen, (), range(pages))
        self.pages.put(rule_id, gen, pages, small)
        names = sorted(n for n in small if n != OVERFLOW_SERIES)
        if book.bucket_ms is not None:
            n: dict[str, int] = {}
            for name in names:
                bucket = str(small[name][0] // book.bucket_ms)
                n[bucket] = n.get(bucket, 0) + 1
            entry["n"] = n
        else:
            entry["n"] = len(names)
        if self.call.caps.listed(rule_id):
            book.list_from(rule_id, names)
        book.changed.add(rule_id)

    def holds(self, book: RuleBook) -> Callable[[str, str, int], bool]:
        """Whether a series of a paged rule's generation is stored (its page read if not
        yet): what prunes a rule's list of its series."""
        def holds(rule_id: str, name: str, gen: int) -> bool:
            return self.pages.holds(rule_id, gen, book.entries[rule_id]["pg"], name)
        return holds

    @staticmethod
    def fetch(state: Any, book: RuleBook, rule_id: str, names: Iterable[str], gen: int,
              since: int | None = None) -> dict[str, Any]:
        """The stored entries of these series of the rule, of its current generation, without
        the generation: counters ``[last_seen, {le: partial}]`` (none last touched before
        ``since``: expired, whatever Spark's TTL has done yet), gauges ``{le: partial}``."""
        found: dict[str, Any] = {}
        names = list(names)
        for name, stored in zip(names, book.read(state, [(rule_id, n) for n in names]),
                                strict=True):
            entry = load_value(stored)
            if entry is None or entry[0] != gen:
                continue
            if len(entry) == 2:
                found[name] = entry[1]
            elif since is None or live_since(entry[1], since):
                found[name] = entry[1:]
        return found

    def apply(self, state: Any, page_state: Any, book: RuleBook, rows: dict[str, Rows],
              rules: Mapping[str, Rule], internal: Iterable[str], update: Update
              ) -> list[dict[str, Any]]:
        """One key's batch, counters' or a window's: each rule's entry and the stored series
        its rows touch read, the caps of the rules bringing new series looked up, ``update``
        called per rule (then for the refusals the caps made), the rule entries and pages
        written back. ``state``: the series entries of ``internal``, l2m's own rules among
        ``rows`` (generation 0, no caps); ``page_state``: the pages of every other rule.
        Returns the samples."""
        self.pages = Pages(page_state, book.fresh, book.since)
        fetched: dict[str, dict[str, Any]] = {}
        gens: dict[str, int] = {}
        new: dict[str, int] = {}  # rule → its series this call may start, at most
        internal = set(internal)
        caps = self.call.caps
        book.bind(rules)
        book.prefetch(r for r in rows if r in rules)
        for rule_id in sorted(rows):
            names = {name for name, _le, _p in rows[rule_id]}
            if rule_id in internal:
                gens[rule_id] = 0
                fetched[rule_id], _ = self.lookup(state, book, rule_id, names, 0, book.since)
                continue
            if rule_id not in rules:
                continue  # a removed rule
            entry = book.entry(rule_id, rules[rule_id])
            if "m" in entry and not caps.listed(rule_id):
                book.unlist(rule_id)
            gens[rule_id] = entry["gen"]
            small = entry.get("s")
            if small is not None:
                since = book.since
                if since is not None:  # counters: a small rule's idle series swept here
                    for name in [n for n, v in small.items() if not live_since(v[0], since)]:
                        del small[name]
                fetched[rule_id] = small
                some_new = not names <= small.keys()
            else:
                fetched[rule_id], some_new = self.lookup(state, book, rule_id, names,
                                                         gens[rule_id], book.since)
            if some_new:
                new[rule_id] = len(names - fetched[rule_id].keys())
        admission = caps.admission(new, book, rules)
        samples: list[dict[str, Any]] = []
        for rule_id in sorted(fetched):
            samples += update(rule_id, rows[rule_id], fetched[rule_id], gens[rule_id],
                              admission)
        refusals = refusal_rows(admission, self.call.activity)
        if refusals:
            stored = self.fetch(state, book, REFUSED_RULE,
                                {name for name, _le, _p in refusals}, 0)
            samples += update(REFUSED_RULE, refusals, stored, 0, None)
        book.write(self.holds(book) if book.bucket_ms is not None else None)
        self.pages.flush()
        return samples
