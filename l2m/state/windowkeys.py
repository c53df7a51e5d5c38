"""Format 9's window keys: one state call on a gauge key (shard, one-minute window) — every
gauge rule's rows of the window applied (:class:`~l2m.state.gauges.GaugeState`'s semantics,
fed one rule at a time with the entries it fetched) — and, in one place, the key's timers and
its publication.

Timers and publication: a window key is looked at again on a processing-time timer due at the
next multiple of ``recheck_ms`` (:meth:`WindowCall.schedule`; an idle source ticks then,
docs/streaming.md "Ticks"), with rows or without (:meth:`WindowCall.expired`). Once final
(:meth:`l2m.state.gauges.GaugeState.final`: the newest event time past the window's end by
the publish delay) the window's value is published once, every series the key holds, marked
:data:`~l2m.engine.samples.FINAL` (:meth:`WindowCall.publish`); later updates are marked
corrections. When the watermark passes the window, everything of the key goes
(:meth:`WindowCall.close`). A call with timers only runs under the rule set the key's last
input was planned with (its meta's ``"rs"``).

Input: the key's partials by rule (or none: a timer), the call's time and watermark. Output:
the samples of the series the batch touched, and the window's final samples once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pandas as pd

from l2m.engine.admission import OVERFLOW_SERIES, Admission
from l2m.engine.samples import CORRECTION, FINAL
from l2m.rules.model import Rule
from l2m.state.counters import REFUSED_RULE, same_signature, signature
from l2m.state.format import GROUP_PREFIX, RULE_ACCOUNT, dump_value, load_value
from l2m.state.gauges import REFUSED_GAUGE_RULE, GaugeState
from l2m.state.keycall import KeyCall
from l2m.state.mapio import MapIO
from l2m.state.output import emitted
from l2m.state.rows import Frame, Rows, by_rule
from l2m.state.rulebook import RuleBook, groups_in
from l2m.state.tally import SeriesCount, Tally


class WindowCall(KeyCall):
    """One call on a window key."""

    def rule(self, rule_id: str) -> Rule | None:
        """A gauge rule of the call's rule set, or l2m's refusal gauge; None for a removed
        rule."""
        return REFUSED_GAUGE_RULE if rule_id == REFUSED_RULE \
            else self.call.gauges.rules.get(rule_id)

    def rows(self, shard: int, window: int, frames: Iterator[Frame], now: int, watermark: int
             ) -> Iterator[pd.DataFrame]:
        """The window's rows applied (read from ``frames`` once the window is known open),
        its timer kept, and its final value published when due."""
        gauges = self.call.gauges
        meta, fresh = self.meta()
        # Made before the meta's first write (a window key keeps the buckets it is made with).
        book = self.book(self.vars.gauge_rules, now, None, 0, shard, gauges.rules, meta, fresh)
        version = self.call.version
        if version is not None and meta.get("rs") != version.version:
            # The key's timers run in tasks that may have no rows to say which rules the
            # window is under: they read it here (docs/streaming.md "Live rule changes").
            meta["rs"] = version.version
            self.vars.meta.update(dump_value(meta))
        if GaugeState.closed(window, watermark):
            for _ in frames:  # logs of a closed window: counted late by the input statuses
                pass
            out = self.publish(window, watermark, now, meta)
            self.close(shard, window)
            return iter(out)
        published = "published" in meta  # before this batch: its updates are corrections
        if "timer" not in meta:
            self.schedule(now, meta)
        elif meta["timer"] > self.next_check(now):
            # Set by a run with a longer recheck (a continuous run before `run --once`):
            # looked at on this run's clock instead. (A key without rows in that run is
            # looked at when its timer is due: the run's tick waits for it, Ticker.due.)
            self.handle.deleteTimer(meta["timer"])
            self.schedule(now, meta)
        rules = gauges.rules
        tally: Tally = {}

        def update(rule_id: str, rule_rows: Rows, stored: dict[str, Any], gen: int,
                   admission: Admission | None) -> list[dict[str, Any]]:
            out = self.gauge(rule_id, window, rule_rows, stored, gen, book, admission)
            if rule_id in rules:
                tally[SeriesCount(rule_id, shard, window)] = book.live(rule_id, rules[rule_id])
            return out

        samples = self.apply(self.vars.gauge_series, self.vars.gauge_pages, book,
                             by_rule(frames), rules, (), update)
        if gauges.tally is not None and tally:
            gauges.tally.add(tally)
        out = list(emitted(samples, self.call.activity, now,
                           CORRECTION if published else None))
        return iter(out + self.publish(window, watermark, now, meta))

    def expired(self, shard: int, window: int, now: int, watermark: int,
                meta: dict[str, Any]) -> Iterator[pd.DataFrame]:
        """The key's timer (``meta``: the key's, as read): its final value published when
        due, the key closed once the watermark has passed the window, else looked at again
        at the next recheck."""
        out = self.publish(window, watermark, now, meta)
        if GaugeState.closed(window, watermark):
            self.close(shard, window)
        else:
            self.schedule(now, meta)
        return iter(out)

    def gauge(self, rule_id: str, window: int, rows: Rows, stored: dict[str, Any], gen: int,
              book: RuleBook, admission: Admission | None) -> list[dict[str, Any]]:
        """One rule's rows of a window key: its entries updated and written, its samples."""
        rule = self.rule(rule_id)
        assert rule is not None
        gauges = self.call.gauges
        small = book.entries[rule_id].get("s") if rule_id != REFUSED_RULE else None
        if small is not None:
            updated, samples = gauges.update(rule_id, window,
                                             {"sig": signature(rule), "series": small},
                                             rows, admission)
            self.keep_small(rule_id, book, self.vars.gauge_series, gen, updated["series"])
            return samples
        before = {name: orjson.dumps(value) for name, value in stored.items()}
        updated, samples = gauges.update(rule_id, window,
                                         {"sig": signature(rule), "series": stored}, rows,
                                         admission)
        added = []
        written: dict[str, Any] = {}
        for name, buckets in updated["series"].items():
            if before.get(name) == orjson.dumps(buckets):
                continue  # fetched, not touched (an overflow series nothing went to)
            written[name] = buckets
            if rule_id != REFUSED_RULE and name != OVERFLOW_SERIES:
                book.add(rule_id, None if name not in before else 0)
                if name not in before:
                    added.append(name)
        if rule_id != REFUSED_RULE:
            self.write_series(book, rule_id, gen, written)
            book.listing(rule_id, added, ())
        else:
            MapIO(self.vars.gauge_series).put([((rule_id, name), dump_value([gen, buckets]))
                                               for name, buckets in sorted(written.items())])
        return samples

    def publish(self, window: int, watermark: int, now: int,
                 meta: dict[str, Any]) -> list[pd.DataFrame]:
        """A window's final value, once (:meth:`GaugeState.final`): every series the key
        holds, marked :data:`~l2m.engine.samples.FINAL` — what remote write sends of it
        (docs/prometheus.md); its later updates are marked as corrections."""
        if "published" in meta or not self.call.gauges.final(window, watermark):
            return []
        samples = self.window_samples(window)
        if not samples and "timer" not in meta:
            return []  # a key without state (a late log's closed window)
        meta["published"] = now
        self.vars.meta.update(dump_value(meta))
        return list(emitted(samples, self.call.activity, now, FINAL))

    def window_samples(self, window: int) -> list[dict[str, Any]]:
        """The samples of every current series of this window key, rules in id order."""
        gens: dict[str, int] = {REFUSED_RULE: 0}  # l2m's refusal gauge: no rule entry
        small: dict[str, dict[str, Any]] = {}
        for rule_id, rule, entry in self.current_entries():
            if not same_signature(entry.get("sig"), rule):
                continue  # changed since: nothing current
            gens[rule_id] = entry["gen"]
            if "s" in entry:
                small[rule_id] = entry["s"]
        series: dict[str, dict[str, Any]] = {**small}
        for (rule_id, name), stored in list(self.vars.gauge_series.iterator()):
            value = load_value(stored)  # l2m's refusal gauge's
            if gens.get(rule_id) == value[0]:
                series.setdefault(rule_id, {})[name] = value[1]
        for (rule_id, _number), stored in list(self.vars.gauge_pages.iterator()):
            page = load_value(stored)
            if rule_id not in small and gens.get(rule_id) == page["g"]:
                series.setdefault(rule_id, {}).update(page["s"])
        samples: list[dict[str, Any]] = []
        for rule_id in sorted(series):
            of = self.rule(rule_id)
            if of is not None and series[rule_id]:
                samples += GaugeState.samples(of, window, series[rule_id])
        return samples

    def current_entries(self) -> Iterator[tuple[str, Rule, dict[str, Any]]]:
        """Each rule of the call's rule set with its entry in this window key, as
        :class:`~l2m.state.rulebook.RuleBook` finds it: the member of its account's group, else
        the own entry that group lists, if it is that account's. A rule moved to another
        account within the window leaves entries that are not its account's: never its
        samples."""
        groups: dict[str, dict[str, Any]] = {}
        own: dict[str, dict[str, Any]] = {}
        for (key,), stored in list(self.vars.gauge_rules.iterator()):
            if key.startswith(GROUP_PREFIX):
                groups.update(groups_in(load_value(stored)))
            else:
                own[key] = load_value(stored)
        for rule_id, rule in sorted(self.call.gauges.rules.items()):
            group = groups.get(rule.account) if rule.account is not None else None
            entry = group["r"].get(rule_id) if group is not None else None
            if entry is None and rule_id in own and (
                    rule.account is None or (group is not None and rule_id in group["own"])):
                entry = own[rule_id]
                if entry.get(RULE_ACCOUNT, rule.account) != rule.account:
                    entry = None
            if entry is not None:
                yield rule_id, rule, entry

    def rule_entries(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every rule entry of this window key, own or in a group, with its rule's id."""
        for (key,), stored in list(self.vars.gauge_rules.iterator()):
            if key.startswith(GROUP_PREFIX):
                for group in groups_in(load_value(stored)).values():
                    yield from group["r"].items()
            else:
                yield key, load_value(stored)

    def next_check(self, now: int) -> int:
        """When a window key looked at ``now`` is looked at again: the next multiple of
        ``recheck_ms``. On multiples, every key's timer is due at the one moment after a
        batch, so one batch without rows then (an idle source's tick,
        :class:`l2m.kafka.source.Ticker`) runs them all."""
        recheck = max(1, self.call.gauges.recheck_ms)
        return (now // recheck + 1) * recheck

    def schedule(self, now: int, meta: dict[str, Any]) -> None:
        """Look at this window key again at the next recheck (:meth:`next_check`): to publish
        it once final and close it, without data."""
        at = self.next_check(now)
        self.handle.registerTimer(at)
        meta["timer"] = at
        self.vars.meta.update(dump_value(meta))

    def close(self, shard: int, window: int) -> None:
        """The watermark has passed the window: everything of its key goes."""
        tally = self.call.gauges.tally
        if tally is not None:
            tally.add({SeriesCount(rule_id, shard, window): 0
                       for rule_id, _ in self.rule_entries()})
        for at in list(self.handle.listTimers()):
            self.handle.deleteTimer(at)
        self.vars.gauge_series.clear()
        self.vars.gauge_pages.clear()
        self.vars.gauge_rules.clear()
        self.vars.meta.clear()
