"""Format 9's counter keys: one state call on a counter key (window
:data:`~l2m.state.format.CUMULATIVE`) — every rule's rows of the key counted
(:class:`~l2m.state.counters.CounterState`'s semantics, fed one rule at a time with the entries
it fetched), the input statuses' late-log count kept beside their series, and every
:data:`~l2m.state.counters.SWEEP_MS` a sweep that re-counts every rule's live series for the
driver's metrics, drops the entries of rules with none left, and re-buckets the key when the
rule set's accounts in its shard have changed fourfold.

Input: the key's partials by rule, the call's time and watermark. Output: the samples of the
series the batch touched (first ones marked :data:`~l2m.engine.samples.NEW`); the key's
entries written; its live series per rule added to the driver's metrics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd

from l2m.engine.admission import OVERFLOW_SERIES, Admission
from l2m.engine.status import STATUS_RULE
from l2m.rules.model import Rule
from l2m.state.buckets import bucket_entries, bucket_of, rebucket
from l2m.state.counters import INTERNAL_RULES, REFUSED_RULE, SWEEP_MS, signature, tallied
from l2m.state.format import CUMULATIVE, GROUP_PREFIX, LATE_SERIES, dump_value, load_value
from l2m.state.keycall import KeyCall
from l2m.state.mapio import MapIO
from l2m.state.output import emitted
from l2m.state.rows import Rows
from l2m.state.rulebook import RuleBook, groups_in
from l2m.state.tally import SeriesCount, Tally
from l2m.state.variables import bucket_ms

# l2m's own counter rules whose series are stored (the refusals' are applied after the caps).
COUNTED_INTERNAL = tuple(sorted(set(INTERNAL_RULES) - {REFUSED_RULE}))


class CounterCall(KeyCall):
    """One call on a counter key."""

    def rule(self, rule_id: str) -> Rule | None:
        """A counter rule of the call's rule set, or l2m's own; None for a removed rule."""
        return INTERNAL_RULES.get(rule_id) or self.call.counters.rules.get(rule_id)

    def rows(self, shard: int, rows: dict[str, Rows], now: int, watermark: int
             ) -> Iterator[pd.DataFrame]:
        """The key's rows counted (``watermark``: read only when the input statuses have
        rows), swept when due."""
        counters = self.call.counters
        meta, fresh = self.meta()
        ttl = counters.ttl_ms
        book = self.book(self.vars.counter_rules, now, bucket_ms(ttl), ttl, shard,
                         counters.rules, meta, fresh)
        tally: Tally = {}

        def update(rule_id: str, rule_rows: Rows, stored: dict[str, Any], gen: int,
                   admission: Admission | None) -> list[dict[str, Any]]:
            return self.count(shard, rule_id, rule_rows, stored, gen, book, now, watermark,
                              admission, tally)

        samples = self.apply(self.vars.counter_series, self.vars.counter_pages, book, rows,
                             counters.rules, COUNTED_INTERNAL, update)
        # A new key's meta is written whatever the clock: RuleBook.fresh relies on it.
        if fresh or now - meta.get("swept", 0) >= SWEEP_MS:
            tally.update(self.recount(shard, book, meta))
            meta["swept"] = now
            self.vars.meta.update(dump_value(meta))
        if counters.tally is not None and tally:
            counters.tally.add(tally)
        return emitted(samples, self.call.activity, now)

    def count(self, shard: int, rule_id: str, rows: Rows, stored: dict[str, Any], gen: int,
              book: RuleBook, now: int, watermark: int, admission: Admission | None,
              tally: Tally) -> list[dict[str, Any]]:
        """One rule's rows of a counter key: its entries updated and written, its samples."""
        user = rule_id not in INTERNAL_RULES
        small = book.entries[rule_id].get("s") if user else None
        seen = {} if small is not None else {name: entry[0] for name, entry in stored.items()}
        status = rule_id == STATUS_RULE
        rule = self.rule(rule_id)
        assert rule is not None
        content: dict[str, Any] = {"sig": signature(rule), "series": stored}
        if status:
            late = load_value(book.read(self.vars.counter_series,
                                        [(STATUS_RULE, LATE_SERIES)])[0])
            if late is not None:
                content["late"] = late[2]
        counters = self.call.counters
        updated, samples = counters.update(rule_id, content, rows, now, watermark,
                                           sweep=False, admission=admission, marked=True)
        assert updated is not None  # rows were given
        if small is not None:
            self.keep_small(rule_id, book, self.vars.counter_series, gen, updated["series"])
            tally[SeriesCount(rule_id, shard, CUMULATIVE)] = \
                book.live(rule_id, counters.rules.get(rule_id))
            return samples
        added = []
        written: dict[str, Any] = {}
        for name, value in updated["series"].items():
            if value[0] != now:
                continue  # fetched, not touched (an overflow series nothing went to)
            written[name] = value
            if user and name != OVERFLOW_SERIES:
                book.add(rule_id, seen.get(name))
                if name not in seen:
                    added.append(name)
            elif user:
                book.touch(rule_id)
        if user:
            self.write_series(book, rule_id, gen, written)
            book.listing(rule_id, added, ())
        else:
            MapIO(self.vars.counter_series).put(
                [((rule_id, name), dump_value([gen, *value]))
                 for name, value in sorted(written.items())])
        if status and "late" in updated:  # rewritten each batch: it lives while logs come
            self.vars.counter_series.updateValue((STATUS_RULE, LATE_SERIES),
                                                 dump_value([0, now, updated["late"]]))
        if rule_id in INTERNAL_RULES:
            if rule_id != REFUSED_RULE:
                tally.update(tallied(rule_id, shard, CUMULATIVE, updated))
        else:
            tally[SeriesCount(rule_id, shard, CUMULATIVE)] = \
                book.live(rule_id, counters.rules.get(rule_id))
        return samples

    def recount(self, shard: int, book: RuleBook, meta: dict[str, Any]) -> Tally:
        """Every rule's live series in this key, for the driver's metrics (series expire
        without a call); the entries of rules with none left are dropped, and so are the
        groups' listings of own entries gone (a bucket outlives an idle account's own entries:
        its group would stay). Having read every group, the key is re-bucketed
        (:meth:`rebucket`) if its buckets are :data:`~l2m.state.buckets.REBUCKET` times off
        the rule set's."""
        tally: Tally = {}
        groups: dict[str, dict[str, Any]] = {}  # every account's group left
        stored_in: list[str] = []  # the keys holding them
        rule_map = self.vars.counter_rules
        stored = list(rule_map.iterator())
        own: set[str] = set()  # the own entries left
        for (key,), value in stored:
            if not key.startswith(GROUP_PREFIX):
                entry = book.entries.get(key) or load_value(value)
                book.entries[key] = entry
                live = book.live(key, None)
                tally[SeriesCount(key, shard, CUMULATIVE)] = live
                if live:
                    own.add(key)
                else:
                    rule_map.removeKey((key,))
        for (key,), value in stored:
            if not key.startswith(GROUP_PREFIX):
                continue
            content = load_value(value)  # written by this call already, if it changed
            held = groups_in(content)
            changed = False
            for account, group in list(held.items()):
                dead = []
                for rule_id, entry in group["r"].items():
                    book.entries[rule_id] = entry
                    live = book.live(rule_id, None)
                    tally[SeriesCount(rule_id, shard, CUMULATIVE)] = live
                    if not live:
                        dead.append(rule_id)
                for rule_id in dead:
                    del group["r"][rule_id]
                listed = [r for r in group["own"] if r in own]
                changed = changed or bool(dead) or len(listed) < len(group["own"])
                group["own"] = listed
                if not group["r"] and not group["own"]:
                    del held[account]
            groups.update(held)
            stored_in.append(key)
            if not held:
                rule_map.removeKey((key,))
            elif changed:
                rule_map.updateValue((key,), dump_value(content))
        wanted = self.call.caps.bucket_count(shard, self.call.shards, self.call.counters.rules)
        if rebucket(book.buckets, wanted):
            self.rebucket(groups, stored_in, wanted, book)
            meta["nb"] = wanted
        return tally

    def rebucket(self, groups: dict[str, dict[str, Any]], stored_in: list[str],
                 buckets: int, book: RuleBook) -> None:
        """Store every account's group of this counter key anew in ``buckets`` buckets (when
        the rule set's accounts in its shard have changed
        :data:`~l2m.state.buckets.REBUCKET`-fold: a write of every group, as rare as that)."""
        assert book.bucket_ms is not None
        rule_map = self.vars.counter_rules
        made: dict[int, dict[str, Any]] = {}
        for account, group in sorted(groups.items()):
            made.setdefault(bucket_of(account, buckets), {"a": {}})["a"][account] = group
        for key in stored_in:
            rule_map.removeKey((key,))
        own: dict[str, dict[str, Any]] = {}
        w = book.now // book.bucket_ms
        puts, _ = bucket_entries(made, own, w)  # none empty: every group here has entries
        MapIO(rule_map).put(puts + [((r,), dump_value({**e, "w": w}))
                                    for r, e in sorted(own.items())])
