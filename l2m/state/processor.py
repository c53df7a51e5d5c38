"""The state stage of state formats 4 to 6: ``transformWithStateInPandas``, one map entry per
series, so a micro-batch reads and writes the series it touches and nothing else.

Input: the partials of one micro-batch (:data:`~l2m.engine.partials.PARTIAL_SCHEMA`, plus
``shard`` and ``window``), grouped by the state key (shard, window) as in format 3 — every
series of an account in one shard (:func:`l2m.engine.admission.placement_shard`), so series
caps are counted in one key — and that key's state variables. Output: the samples of every
series the batch touched (:data:`~l2m.state.function.OUTPUT_SCHEMA`), the same rows format 3
gives; the per-series semantics are :class:`~l2m.state.counters.CounterState` and
:class:`~l2m.state.gauges.GaugeState`'s, which this module feeds one rule at a time with the
entries it fetched.

Why (benchmarks/README.md, "State layouts"): format 3 kept one blob per (shard, window)
holding every series of the shard, decoded and rewritten whenever any of them changed, so a
batch cost followed the live series. Here a touched series costs one ``getValue`` and one
``updateValue`` (≈ 55 µs, two socket round trips to the JVM's RocksDB) whatever the state
holds, and the changelog grows by what changed.

State variables per key (their stored layouts: :mod:`l2m.state.format`, version 4):

* ``counter_series`` (counter keys): (rule, series) → entry, with a TTL of ``counter_ttl``:
  Spark drops a series idle that long without calling Python. The input statuses' late-log
  count is the entry (``__status__``, :data:`LATE_SERIES`).
* ``counter_rules``: rule → its signature, generation and live series counted per bucket of
  last-touch time (:data:`~l2m.state.variables.BUCKETS` buckets per TTL), same TTL. A rule's
  entry is written whenever one of its series is, and kept two buckets longer, so it outlives
  them all. A *small* rule (at most :data:`SMALL_RULE` series) keeps its series inside this
  entry instead, read and written whole like a format 3 section and swept when touched: a
  batch touching 10,000 small rules makes 10,000 state calls, not one per series.
* ``gauge_series`` / ``gauge_rules`` (window keys): the same without TTL, cleared when the
  watermark passes the window (checked on input and on a processing-time timer due at the
  next multiple of ``recheck_ms``; an idle source ticks then, docs/streaming.md "Ticks").
* ``meta``: the format version, and when the key last re-counted every rule's live series
  (counters) or its timer (gauges).

Format 5 keeps an account's small rules together, in one entry per key (its *group*, see
:class:`_Rules`): with thousands of accounts' rules touched per batch, a rule entry per
touched rule and the reads of the accounts' other rules for their caps were most of the
state calls. Format 4's checkpoints continue: each rule there is in an entry of its own.
Format 6 keeps several accounts' groups in one entry, a *bucket* (:func:`bucket_of`): a
request's fixed cost is worth ≈ 3 KB of value, and a batch touching most accounts of a key
made one request per account; format 5's keys keep a group per account until their sweep
(:meth:`MetricProcessor._recount`) buckets them.

A rule whose signature changes starts a new *generation*: its older entries read as absent
and expire by TTL (counters) or with their window, with no batch that rewrites them.

Series caps need each rule's live series. Spark expires entries silently, so a rule's entry
counts its series by the bucket of their last touch; a bucket is dropped once its newest
possible entry has expired. Until then an expired series still counts (at most
``counter_ttl / BUCKETS`` late, 79 minutes at 7 days) — the count never falls below the live
entries, so a cap is never exceeded. The counts of a rule's account and metric are the sums
over the account's current rules, read only when one of them brings a new series."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson
import pandas as pd
from pyspark import Accumulator
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from l2m.engine.admission import OVERFLOW_SERIES, Admission, RuleCaps, account_shard
from l2m.engine.partials import Partial
from l2m.engine.rulesets import select_key
from l2m.engine.samples import CORRECTION, FINAL
from l2m.engine.status import STATUS_RULE
from l2m.errors import StateFormatError
from l2m.process.collector import collector_paused
from l2m.rules.model import Rule
from l2m.state.counters import (
    INTERNAL_RULES,
    REFUSED_RULE,
    CounterState,
    same_signature,
    signature,
    tallied,
)
from l2m.state.format import UPGRADE_HINT, dump_entry, load_entry
from l2m.state.function import (
    CUMULATIVE,
    SWEEP_MS,
    Reduction,
    by_rule,
    counted,
    emitted,
    refusal_rows,
    unpacked,
    versioned,
)
from l2m.state.gauges import REFUSED_GAUGE_RULE, GaugeState
from l2m.state.mapio import MapIO
from l2m.state.tally import SeriesCount, Tally
from l2m.state.variables import Deferred, Variables, bucket_ms, declare

FORMAT = 7  # the state format this processor writes (l2m.state.format)
READ_FORMATS = (4, 5, 6, 7)  # … and those it continues (format 4: own entries only)
LATE_SERIES = "!late"  # the input statuses' late-log count, beside their series
# A rule keeps its series inside its entry (read and written whole, like a format 3 section,
# but per rule; format 5: in its account's group) until it has more than this many; then one
# entry per series. Most rules have a few dozen series, and a batch touching 10,000 of them
# then makes 10,000 state calls at most, not one per series (benchmarks/README.md, "State
# layouts").
SMALL_RULE = 512
# A rule whose per-rule cap is at most this keeps the list of its series in its entry (at most
# ≈ 40 bytes a series: 800 KB at this cap), so that a batch reads only the series it lists.
LISTED_CAP = 20_000
# Format 5: an account's small rules share one entry per key (_Rules), so a batch touching
# 10,000 accounts' rules makes about 10,000 calls, not one per rule and more for the caps
# (benchmarks/README.md, "State layouts"). A rule id never starts with "@".
GROUP_PREFIX = "@"
GROUP_SERIES = 2_048  # series of small rules one group (format 6: bucket) entry holds at most
# Format 6: the groups of several accounts share one entry, a *bucket* (``"@" + number``,
# :func:`bucket_of`), so a batch touching most accounts of a key makes a request per few
# accounts: a request's fixed cost is worth ≈ 3 KB of value (benchmarks/README.md, "Session
# 20"). A key has a power of two of buckets, about one per this many accounts placed in its
# shard by the rule set (bucket_count); a counter key re-buckets on its sweep once that is
# REBUCKET-fold off.
BUCKET_ACCOUNTS = 8
REBUCKET = 4  # how far a counter key's buckets may drift from the rule set's before re-bucketing

Rows = dict[str, list[tuple[str, str, Partial]]]
Put = tuple[tuple[str], tuple[bytes]]  # a rule map entry to write: its key and value


def _live(last_seen: int, since: int) -> bool:
    """Whether a counter series last touched at ``last_seen`` is live in a call at ``now``,
    ``since`` being ``now - counter_ttl``: the one rule for a small rule's series, a series
    entry Spark's TTL has not removed yet, and the live count. Spark's TTL removes an entry
    no sooner, so what Python reads as live, the state has."""
    return last_seen >= since


def _plain(table: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A rule table of the version at hand as a plain mapping (a RoutingTable's ``now()``):
    hot loops look rules up hundreds of thousands of times a call."""
    now = getattr(table, "now", None)
    return now() if now is not None else table


def _dump(value: Any) -> tuple[bytes]:
    return (dump_entry(value),)


def _load(stored: tuple[Any, ...] | None) -> Any:
    return None if stored is None else load_entry(stored[0])


def group_key(account: str) -> str:
    """The key of an account's group entry in a rule map (:data:`GROUP_PREFIX`)."""
    return GROUP_PREFIX + account


# Accounts per shard, by the rule table they were counted from (kept alive here, so that its
# id stays its own): a processor is rebuilt per task, the tables are the worker's.
_SHARD_ACCOUNTS: dict[tuple[int, int], tuple[Any, dict[int, int]]] = {}


def _shard_accounts(source: Any, shards: int, accounts: Mapping[str, Any]) -> dict[int, int]:
    """How many of ``accounts`` (those of the rule table ``source``) each shard holds."""
    found = _SHARD_ACCOUNTS.get((id(source), shards))
    if found is not None and found[0] is source:
        return found[1]
    counts: dict[int, int] = {}
    for account in accounts:
        shard = account_shard(account, shards)
        counts[shard] = counts.get(shard, 0) + 1
    if len(_SHARD_ACCOUNTS) >= 4:  # the rule sets of batches in flight
        _SHARD_ACCOUNTS.pop(next(iter(_SHARD_ACCOUNTS)))
    _SHARD_ACCOUNTS[id(source), shards] = (source, counts)
    return counts


def _series_in(entry: dict[str, Any]) -> int:
    return len(entry.get("s", ()))


_BUCKET_HASHES: dict[str, int] = {}


def bucket_of(account: str, buckets: int) -> int:
    """The bucket of an account's group in a key of ``buckets`` buckets (format 6): a hash
    stable across processes and releases, and not the shard's (which is a CRC-32 modulo the
    shards: its low bits would leave most buckets of a key empty)."""
    found = _BUCKET_HASHES.get(account)
    if found is None:
        if len(_BUCKET_HASHES) > 1_000_000:
            _BUCKET_HASHES.clear()
        found = int.from_bytes(hashlib.blake2b(account.encode(), digest_size=4).digest(),
                               "little")
        _BUCKET_HASHES[account] = found
    return found % buckets


def bucket_count(accounts: int) -> int:
    """The buckets of a key whose shard holds ``accounts`` accounts: the power of two nearest
    to one per :data:`BUCKET_ACCOUNTS` (≈ 6 to 11 accounts a bucket), at least 1."""
    wanted = accounts / BUCKET_ACCOUNTS
    return 1 << round(math.log2(wanted)) if wanted > 1 else 1


def _groups_in(value: dict[str, Any], key: str) -> dict[str, dict[str, Any]]:
    """The account groups a stored group entry holds: a bucket's (format 6, ``"a"``) or,
    format 5's, the one of the account in its key."""
    return value["a"] if "a" in value else {key[len(GROUP_PREFIX):]: value}


class _Rules:
    """The rule entries one call reads (each at most once) and writes back: a rule's
    signature, generation and live series (counters: per last-touch bucket; gauges: a count).

    Where an entry is stored (format 5): a small rule of an account (its series inside its
    entry) is a member of the account's *group* entry (``"@" + account``: ``{"r": {rule:
    entry}, "own": [rule…]}``), read and written whole with the account's other small rules;
    every other rule has its own entry, keyed by its id. A group lists the account's rules
    with an own entry (``"own"``), so a rule in neither is known to be new without a read.
    An account without a group (its rules' entries expired, or a checkpoint of format 4,
    which has none) has its rules' own entries read, all of them, before a group is made.
    Members past :data:`GROUP_SERIES` series in all move to own entries, marked ``"o"`` (they
    stay there); an own small entry without the mark (written by format 4) joins the group."""

    def __init__(self, state: Any, now: int, bucket_ms: int | None, ttl_ms: int) -> None:
        self.state = state
        self.now = now
        self.bucket_ms = bucket_ms  # None: gauges
        self.ttl_ms = ttl_ms
        # Counters last touched before it have expired (_live); gauges do not expire: None.
        self.since = now - ttl_ms if bucket_ms is not None else None
        self.entries: dict[str, dict[str, Any]] = {}
        self.changed: set[str] = set()
        self.members: dict[str, set[str]] = {}
        self._raw: dict[str, tuple[Any, ...] | None] = {}
        self._rules: Mapping[str, Rule] = {}
        self._accounts: Mapping[str, list[str]] = {}
        self.account: dict[str, str | None] = {}  # a loaded rule's account (None: own only)
        self.groups: dict[str, dict[str, Any]] = {}  # by account, once read (or made)
        self._groups_changed: set[str] = set()
        self._removed: set[str] = set()  # own entries that moved into their group
        # Whether every account of the key with an own entry has a group (the key's meta
        # says so: not a key of a format 4 checkpoint); then an account without a group has
        # no entries at all.
        self.complete = False
        # Whether the key held nothing before this call (no meta: every key with entries has
        # one, written in the call that wrote its first entries): nothing to read (read()).
        # A new gauge window's first batch, every key of a new checkpoint's.
        self.fresh = False
        # Format 6: the key's buckets (its meta's "nb"), each group in bucket_of(account);
        # None: a key continued from format 5 or 4, a group per account.
        self.buckets: int | None = None
        self._buckets: dict[int, dict[str, Any]] = {}  # by number, once read (or made)

    def bind(self, rules: Mapping[str, Rule], accounts: Mapping[str, list[str]]) -> None:
        """The call's rules of this kind, and each account's current rules (of any kind):
        which group a rule's entry is in, and whose own entries an account without a group
        may have."""
        self._rules, self._accounts = rules, accounts

    def _account_of(self, rule_id: str) -> str | None:
        rule = self._rules.get(rule_id)
        return rule.account if rule is not None else None

    def _rules_of(self, account: str) -> list[str]:
        return [r for r in self._accounts.get(account, ()) if r in self._rules]

    def read(self, state: Any, keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...] | None]:
        """What this key stored under ``keys`` in ``state`` (None: absent), as it was before
        the call — every read of stored entries goes through here; a fresh key is not read."""
        return [None] * len(keys) if self.fresh else MapIO(state).get(keys)

    def prefetch(self, rule_ids: Iterable[str]) -> None:
        """Read these rules' entries at once (pipelined), ahead of :meth:`entry`: their
        accounts' groups, then the own entries a group does not answer for."""
        wanted = sorted(r for r in set(rule_ids) if r not in self.entries and r not in self._raw
                        and r not in self.account)
        if not wanted:
            return
        accounts = {r: self._account_of(r) for r in wanted}
        unread = sorted({a for a in accounts.values() if a is not None} - self.groups.keys())
        unknown: set[str] = set()
        for acct, found in zip(unread, self._read_groups(unread), strict=True):
            if found is not None or self.complete:
                self.groups[acct] = found or {"r": {}, "own": []}
            else:  # every rule of the account may have an own entry: read them
                unknown.add(acct)
                more = [r for r in self._rules_of(acct) if r not in self.entries
                        and r not in self._raw and r not in accounts]
                wanted += more
                accounts.update({r: acct for r in more})
        own = []
        for rule_id in sorted(set(wanted)):
            owner = accounts.get(rule_id)
            self.account[rule_id] = owner
            group = self.groups.get(owner) if owner is not None else None  # None: unknown
            if group is None or rule_id in group["own"]:
                own.append(rule_id)
            else:
                self._raw[rule_id] = None  # a member (entry() takes it from the group), or new
        for rule_id, raw in zip(own, self.read(self.state, [(r,) for r in own]), strict=True):
            self._raw[rule_id] = raw
            owner = self.account[rule_id]
            group = self.groups.get(owner) if owner is not None else None
            if raw is None and owner is not None and group is not None \
                    and rule_id in group["own"]:
                group["own"].remove(rule_id)  # expired: the group stops listing it
                self._groups_changed.add(owner)
        for acct in unknown:  # now known: the group it gets lists the own entries found
            self.groups[acct] = {"r": {}, "own": []}
        for rule_id in own:  # one pass (a scan per account was quadratic: 10 s a batch)
            owner = self.account[rule_id]
            if owner in unknown and self._raw[rule_id] is not None:
                self.groups[owner]["own"].append(rule_id)

    def _read_groups(self, accounts: list[str]) -> list[dict[str, Any] | None]:
        """These accounts' groups as stored (None: none): from their buckets (each read at
        most once a call), or format 5's entries of their own."""
        if self.buckets is None:
            return [_load(raw) for raw in
                    self.read(self.state, [(group_key(a),) for a in accounts])]
        buckets = self.buckets
        numbers = sorted({bucket_of(a, buckets) for a in accounts} - self._buckets.keys())
        for number, raw in zip(numbers, self.read(self.state,
                                                  [(bucket_key(n),) for n in numbers]),
                               strict=True):
            self._buckets[number] = _load(raw) or {"a": {}}
        return [self._buckets[bucket_of(a, buckets)]["a"].get(a) for a in accounts]

    def _written_in(self, account: str) -> Any:
        """The last-write bucket (``"w"``) of the entry holding the account's group."""
        if self.buckets is None:
            return self.groups[account].get("w")
        return self._buckets[bucket_of(account, self.buckets)].get("w")

    def _member(self, rule_id: str) -> dict[str, Any] | None:
        """The rule's entry as its account's group holds it (None: not a member), as read."""
        account = self.account.get(rule_id)
        group = self.groups.get(account) if account is not None else None
        return group["r"].get(rule_id) if group is not None else None

    def entry(self, rule_id: str, rule: Rule | None) -> dict[str, Any]:
        """The rule's entry, a new generation if its signature is not the rule's (a removed
        rule, ``rule`` None, keeps what it has)."""
        found = self.entries.get(rule_id)
        if found is not None:
            return found
        if rule_id not in self._raw:
            self.prefetch([rule_id])
        raw = self._raw.pop(rule_id)
        member = self._member(rule_id)
        found = member if member is not None else _load(raw)
        found = found or {"sig": None, "gen": 0, "n": {} if self.bucket_ms else 0, "s": {}}
        if rule is not None and not same_signature(found["sig"], rule):
            if found["sig"] is not None:
                found["gen"] += 1
                self.changed.add(rule_id)
            found["sig"] = signature(rule)
            found["n"] = {} if self.bucket_ms else 0
            found.pop("m", None)
            found["s"] = {}  # a new generation starts small, its series in the entry
        if "m" in found:
            self.members[rule_id] = set(found["m"])
        self.entries[rule_id] = found
        return found

    def list_from(self, rule_id: str, names: Iterable[str]) -> None:
        """The rule's series move out of its entry (:meth:`MetricProcessor._spill`): from now
        on its entry lists them, complete because it starts from all of them."""
        self.members[rule_id] = set(names)
        self.changed.add(rule_id)

    def unlist(self, rule_id: str) -> None:
        """The rule's cap no longer keeps its list small: it is dropped, and never trusted
        again (it is not kept up meanwhile)."""
        if self.entries[rule_id].pop("m", None) is not None:
            self.changed.add(rule_id)
        self.members.pop(rule_id, None)

    def listed(self, rule_id: str) -> set[str] | None:
        """The series the rule's entry lists — every live one, and expired ones not yet
        dropped — or None when it keeps no list. A batch reads only these of its series: the
        others are new without a read, which spares a capped rule fed unique ids one read per
        log."""
        return self.members.get(rule_id)

    def listing(self, rule_id: str, added: Iterable[str], gone: Iterable[str]) -> None:
        """New series of a listed rule written, and listed ones found expired."""
        members = self.members.get(rule_id)
        if members is None:
            return
        before = len(members)
        members.difference_update(gone)
        members.update(added)
        if len(members) != before or added:
            self.changed.add(rule_id)

    def live(self, rule_id: str, rule: Rule | None) -> int:
        """The rule's series counted as live now (overflow series excluded)."""
        entry = self.entry(rule_id, rule)
        small = entry.get("s")
        if small is not None:
            since = self.since
            if since is None:  # gauges
                return len(small) - (OVERFLOW_SERIES in small)
            return sum(1 for name, v in small.items()
                       if _live(v[0], since) and name != OVERFLOW_SERIES)
        n = entry["n"]
        if self.bucket_ms is None:
            return int(n)
        return sum(count for bucket, count in n.items() if self._alive(int(bucket)))

    def bound(self, rule_id: str, rule: Rule | None) -> int:
        """At least :meth:`live`, without looking at each series: every series the entry
        holds (a small rule's) or counts (any bucket, dead or alive)."""
        entry = self.entries.get(rule_id)
        if entry is None:
            if rule_id in self._raw and self._raw[rule_id] is None:
                # A member of its group not taken up yet: bounded as stored. A stored
                # signature that is not the rule's would start a new generation of none;
                # what it held bounds that too, and an untouched rule keeps its entry as is.
                entry = self._member(rule_id)
                if entry is None:
                    return 0  # new: entry() would make it empty
            else:
                entry = self.entry(rule_id, rule)
        small = entry.get("s")
        if small is not None:
            return len(small)
        n = entry["n"]
        return sum(n.values()) if self.bucket_ms is not None else int(n)

    def _alive(self, bucket: int) -> bool:
        assert self.bucket_ms is not None
        return (bucket + 1) * self.bucket_ms + self.ttl_ms > self.now

    def touch(self, rule_id: str) -> None:
        """A series of the rule was written. Its entry is rewritten at least once per bucket
        in which any of its series is (a counter rule's, to refresh its TTL), so it outlives
        them all; more often only when its counts change."""
        if self.bucket_ms is not None and \
                self.entries[rule_id].get("w") != self.now // self.bucket_ms:
            self.changed.add(rule_id)

    def add(self, rule_id: str, seen: int | None) -> None:
        """One series of the rule written now, last touched at ``seen`` (None: new)."""
        entry = self.entries[rule_id]
        if self.bucket_ms is None:
            if seen is None:
                entry["n"] += 1
                self.changed.add(rule_id)
            return
        n = entry["n"]
        now = str(self.now // self.bucket_ms)
        if seen is not None:
            old = str(seen // self.bucket_ms)
            if old == now:
                self.touch(rule_id)
                return
            if old in n:
                n[old] -= 1
                if not n[old]:
                    del n[old]
        n[now] = n.get(now, 0) + 1
        self.changed.add(rule_id)

    def write(self, exists: Callable[[str, str, int], bool] | None = None) -> None:
        """Write back every entry this call changed: dead buckets dropped, the bucket of the
        write noted (``"w"``). A list grown past twice its live series (expired ones pile up
        under the TTL) is checked against the series entries (``exists``) and pruned. Small
        rules of an account go in its group, the others in their own entries (class
        docstring); each changed group is written once."""
        own: dict[str, dict[str, Any]] = {}
        for rule_id in sorted(self.changed):
            entry = self.entries[rule_id]
            members = self.members.get(rule_id)
            if members is not None:
                if exists is not None and len(members) > 2 * self.live(rule_id, None) + 64:
                    members = {m for m in members if exists(rule_id, m, entry["gen"])}
                    self.members[rule_id] = members
                entry["m"] = sorted(members)
            if self.bucket_ms is not None:
                entry["n"] = {b: c for b, c in entry["n"].items() if self._alive(int(b))}
                entry["w"] = self.now // self.bucket_ms
            account = self.account.get(rule_id)
            if account is None:
                own[rule_id] = entry
                continue
            group = self.groups[account]  # prefetched with the rule
            if "s" in entry and "o" not in entry:
                group["r"][rule_id] = entry
                if rule_id in group["own"]:  # a format 4 entry, or a new generation
                    group["own"].remove(rule_id)
                    self._removed.add(rule_id)
                self._groups_changed.add(account)
            else:
                own[rule_id] = entry
                if rule_id in group["r"] or rule_id not in group["own"]:
                    group["r"].pop(rule_id, None)
                    group["own"].append(rule_id)
                    self._groups_changed.add(account)
                elif self.bucket_ms is not None and self._written_in(account) != entry["w"]:
                    # A group outlives its rules' own entries (each written at least once per
                    # bucket while its series are): an account without a group has none.
                    self._groups_changed.add(account)
        puts, gone = self._stored_groups(own)
        MapIO(self.state).put(puts + [((r,), _dump(e)) for r, e in sorted(own.items())])
        for key in gone + [(r,) for r in sorted(self._removed - own.keys())]:
            self.state.removeKey(key)

    def _stored_groups(self, own: dict[str, dict[str, Any]]
                       ) -> tuple[list[Put], list[tuple[str]]]:
        """The entries to write (and to remove) for the groups this call changed: each in its
        bucket (format 6), or its own entry (format 5's layout); members past the bound go to
        ``own``."""
        w = self.now // self.bucket_ms if self.bucket_ms is not None else None
        if self.buckets is None:
            puts: list[Put] = []
            for account in sorted(self._groups_changed):
                group = self.groups[account]
                bounded([group], own)
                if w is not None:
                    group["w"] = w
                puts.append(((group_key(account),), _dump(group)))
            return puts, []
        touched: dict[int, dict[str, Any]] = {}
        for account in sorted(self._groups_changed):
            number = bucket_of(account, self.buckets)
            held = self._buckets[number]["a"]
            group = self.groups[account]
            if group["r"] or group["own"]:
                held[account] = group
            else:  # nothing left: an account without a group has no entries
                held.pop(account, None)
            touched[number] = self._buckets[number]
        return bucket_entries(touched, own, w)


def bucket_key(number: int) -> str:
    """The key of a bucket entry in a rule map (format 6; a rule id never starts with
    :data:`GROUP_PREFIX`)."""
    return GROUP_PREFIX + str(number)


def bucket_entries(buckets: Mapping[int, dict[str, Any]], own: dict[str, dict[str, Any]],
                   w: int | None) -> tuple[list[Put], list[tuple[str]]]:
    """The entries to write for these buckets by number (each :func:`bounded`, members past
    the bound going to ``own``, and stamped with ``w``, the bucket of the write: counters),
    and the keys of those left without a group, to remove."""
    puts: list[Put] = []
    gone: list[tuple[str]] = []
    for number, bucket in sorted(buckets.items()):
        if not bucket["a"]:
            gone.append((bucket_key(number),))
            continue
        bounded(list(bucket["a"].values()), own)
        if w is not None:
            bucket["w"] = w
        puts.append(((bucket_key(number),), _dump(bucket)))
    return puts, gone


def bounded(groups: list[dict[str, Any]], own: dict[str, dict[str, Any]]) -> None:
    """Groups stored in one entry, bounded: past :data:`GROUP_SERIES` series in all, their
    largest members go to entries of their own for good (marked ``"o"``, added to ``own``)."""
    total = sum(_series_in(e) for group in groups for e in group["r"].values())
    # Sorted only when some must go: most buckets are well within the bound, and sorting
    # every member of every written bucket was 2% of a 100,000-rule state call.
    members = [] if total <= GROUP_SERIES else sorted(
        ((-_series_in(e), rule_id, group) for group in groups
         for rule_id, e in group["r"].items()), key=lambda m: (m[0], m[1]))
    for minus, rule_id, group in members:
        if total <= GROUP_SERIES:
            break
        total += minus
        entry = group["r"].pop(rule_id)
        entry["o"] = 1
        group["own"].append(rule_id)
        own[rule_id] = entry
    for group in groups:
        group["own"].sort()


# One rule's rows of a key applied: (rule, rows, stored series, generation, caps) → samples.
_Update = Callable[[str, list[tuple[str, str, Partial]], dict[str, Any], int,
                    Admission | None], list[dict[str, Any]]]
# l2m's own counter rules whose series are stored (the refusals' are applied after the caps).
COUNTED_INTERNAL = tuple(sorted(set(INTERNAL_RULES) - {REFUSED_RULE}))


class MetricProcessor(StatefulProcessor):
    """Formats 4 to 6's state function (module docstring): counter keys (window
    :data:`~l2m.state.function.CUMULATIVE`) and gauge window keys. ``caps``: each rule's
    series caps (always enforced: formats 4 to 6 place whole accounts in one shard);
    ``reduction``/``activity``: as :class:`~l2m.state.function.MetricState`'s; ``shards``:
    the job's state shards (how many accounts a key's buckets are sized for)."""

    def __init__(self, counters: CounterState, gauges: GaugeState,
                 reduction: Reduction | None = None, caps: Mapping[str, RuleCaps] | None = None,
                 activity: Accumulator[Tally] | None = None, shards: int = 1,
                 buckets: bool = True) -> None:
        self.counters = counters
        self.shards = shards
        # False: new keys get a group per account and are never bucketed — format 5's layout,
        # which the tests write to continue it as a format 5 checkpoint would be.
        self.buckets = buckets
        self.gauges = gauges
        self.reduction = reduction
        self.caps = caps
        self.activity = activity
        self._caps: Mapping[str, RuleCaps] | None = None  # the call's (plain: _plain)
        self._accounts: dict[str, list[str]] | None = None
        self._accounts_of: Any = None  # the caps (or rules) they came from

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.adopt(handle, declare(handle, self.counters.ttl_ms))

    def adopt(self, handle: StatefulProcessorHandle, variables: Variables) -> None:
        """Work with state variables declared elsewhere (:class:`~l2m.state.variables.
        Deferred`'s ``init``)."""
        self.handle = handle
        self.counter_series = variables.counter_series
        self.counter_rules = variables.counter_rules
        self.gauge_series = variables.gauge_series
        self.gauge_rules = variables.gauge_rules
        self.meta = variables.meta

    def deferred(self) -> Deferred:
        """This processor as the query is given it: Spark's driver-side runner of its ``init``
        then imports only :mod:`l2m.state.variables`."""
        return Deferred(self, self.counters.ttl_ms)

    def close(self) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        shard, window = int(key[0]), int(key[1])
        frames = counted(unpacked(versioned(rows)), self.reduction)
        self._caps = _plain(self.caps)  # the rows have selected their rule set
        with collector_paused():
            if window == CUMULATIVE:
                return self._counter_key(shard, frames, timerValues)
            return self._gauge_key(shard, window, frames, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        shard, window = int(key[0]), int(key[1])
        out: list[pd.DataFrame] = []
        if window != CUMULATIVE:
            now = timerValues.getCurrentProcessingTimeInMs()
            watermark = timerValues.getCurrentWatermarkInMs()
            with collector_paused():
                meta = self._meta()
                self._select_key(meta.get("rs"))
                out = self._publish(window, watermark, now, meta)
                if GaugeState.closed(window, watermark):
                    self._close(shard, window)
                else:
                    self._schedule(now, meta)
        return iter(out)

    def _select_key(self, version: str | None) -> None:
        """A call with timers only: the rule set the key was last written under (its meta's
        ``rs``), else — a version this worker cannot read, as after a restart that did not
        ship it — the rules the query started with, never the one another key's call left
        selected (:func:`l2m.engine.rulesets.select_key`)."""
        versions = getattr(self.gauges.rules, "versions", None)
        if versions is None:
            return
        from pyspark import SparkFiles

        select_key(versions, version, SparkFiles.getRootDirectory())

    # --- shared -------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        return self._key_meta()[0]

    def _key_meta(self) -> tuple[dict[str, Any], bool]:
        """The key's meta (a new key's as this format starts it), and whether the key is new:
        without one, it holds nothing (_Rules.fresh)."""
        meta = _load(self.meta.get()) or {}
        if meta and meta.get("v") not in READ_FORMATS:
            raise StateFormatError(
                f"the checkpoint holds state format {meta.get('v')} entries, but this job "
                f"took it for format {FORMAT}. {UPGRADE_HINT}")
        if not meta:  # a new key: its accounts' groups will list every own entry (_Rules)
            return {"v": FORMAT, "g": 1}, True
        return {**meta, "v": FORMAT}, False  # written back as format 5's (format 4's: no "g")

    def _account_rules(self, rules: Mapping[str, Rule] | None = None
                       ) -> Mapping[str, list[str]]:
        """Each account's current rules (what its account and metric counts sum over): from
        the caps, or without caps from ``rules``."""
        source: Any = self._caps if self._caps is not None else rules
        if self._accounts is None or self._accounts_of is not source:
            # Per rule set: a rule added live counts in its account's sums.
            accounts: dict[str, list[str]] = {}
            for rule_id, value in (source or {}).items():
                account = value.account_name if self._caps is not None else value.account
                if account is not None:
                    accounts.setdefault(account, []).append(rule_id)
            self._accounts, self._accounts_of = accounts, source
        return self._accounts

    def _book(self, book: _Rules, shard: int, rules: Mapping[str, Rule],
              meta: dict[str, Any], fresh: bool) -> _Rules:
        """``book`` set to the key's layout, as its meta says: a new key (``fresh``) is made
        with buckets sized by the rule set (format 6; not with ``buckets=False``), which its
        meta then records."""
        book.complete = meta.get("g") == 1
        book.fresh = fresh
        if fresh and self.buckets:
            meta["nb"] = self._bucket_count(shard, _plain(rules))
        book.buckets = meta.get("nb")
        return book

    def _bucket_count(self, shard: int, rules: Mapping[str, Rule] | None) -> int:
        """The buckets a key of ``shard`` is made with (or re-bucketed to): by the accounts
        the rule set places in the shard (:func:`bucket_count`)."""
        source: Any = self._caps if self._caps is not None else rules
        return bucket_count(_shard_accounts(source, self.shards, self._account_rules(rules))
                            .get(shard, 0))

    def _admission(self, new: Mapping[str, int], book: _Rules,
                   rules: Mapping[str, Rule]) -> Admission | None:
        """The caps of one domain for rules that bring new series (``new``: rule → how many
        of its series this call may start, at most): the live series of each, and of every
        current rule of their accounts.

        Counting a rule's live series looks at each of them (their last touch); first each
        is bounded from above without (:meth:`_Rules.bound`). When no cap can be reached even
        by the bounds plus every candidate series, every new series is admitted whatever
        the exact counts, and there is nothing to count (None, as without caps): with
        100,000 rules a batch touching most accounts counted 113,000 rules' series one by one
        for no refusal."""
        if self._caps is None:
            return None
        counted_rules: set[str] = set()
        for rule_id in new:
            caps = self._caps.get(rule_id)
            if caps is None:
                continue
            counted_rules.add(rule_id)
            if caps.account_name is not None:
                counted_rules.update(self._account_rules().get(caps.account_name, ()))
        counted = [r for r in counted_rules if r in rules]
        book.prefetch(counted)
        bounds = {r: book.bound(r, rules.get(r)) for r in counted}
        if self._below_caps(bounds, new):
            # Every new series is admitted, as without caps: no admission to keep count
            # (24,000 rules' series each admitted one by one cost 8% of a 100,000-rule call).
            return None
        return Admission(self._caps, {r: book.live(r, rules.get(r)) for r in sorted(counted)})

    def _below_caps(self, sizes: Mapping[str, int], new: Mapping[str, int]) -> bool:
        """Whether every new series would be admitted even if each rule had ``sizes`` series
        and each rule of ``new`` started that many: a series is refused only once a count
        has reached its cap (:meth:`Admission.admit`)."""
        assert self._caps is not None
        metrics: dict[tuple[str, str], int] = {}  # (account, metric) → series at most
        accounts: dict[str, int] = {}
        for rule_id, size in sizes.items():
            caps = self._caps.get(rule_id)
            if caps is not None and caps.account_name is not None:
                total = size + new.get(rule_id, 0)
                metric = (caps.account_name, caps.metric_name)
                metrics[metric] = metrics.get(metric, 0) + total
                accounts[caps.account_name] = accounts.get(caps.account_name, 0) + total
        for rule_id in new:  # each admission is checked against the admitted rule's own caps
            caps = self._caps.get(rule_id)
            if caps is None:
                continue
            if caps.rule and sizes.get(rule_id, 0) + new[rule_id] > caps.rule:
                return False
            if caps.account_name is None:
                continue
            if caps.metric and metrics[caps.account_name, caps.metric_name] > caps.metric:
                return False
            if caps.account and accounts[caps.account_name] > caps.account:
                return False
        return True

    def _listed(self, rule_id: str) -> bool:
        """Whether the rule's entry lists its series: a per-rule cap, and one small enough
        that the list stays small (:data:`LISTED_CAP`)."""
        caps = (self._caps or {}).get(rule_id)
        return caps is not None and 0 < caps.rule <= LISTED_CAP

    def _lookup(self, state: Any, book: _Rules, rule_id: str, names: set[str], gen: int,
                since: int | None = None) -> tuple[dict[str, Any], bool]:
        """The stored entries of the rule's series among ``names`` (for a listed rule only
        the listed ones are read), its overflow series' too when some are new; and whether
        some are. ``since``: counters last touched before it count as expired."""
        listed = book.listed(rule_id)
        lookup = names if listed is None else names & listed
        found = self._fetch(state, book, rule_id, sorted(lookup), gen, since)
        if listed is not None and len(found) < len(lookup):
            book.listing(rule_id, (), lookup - found.keys())  # expired meanwhile
        new = not names <= found.keys()
        if new:
            found.update(self._fetch(state, book, rule_id, (OVERFLOW_SERIES,), gen, since))
        return found, new

    def _spill(self, rule_id: str, book: _Rules, state: Any, gen: int) -> None:
        """A rule outgrew :data:`SMALL_RULE`: its series move from its entry to one entry each
        (once per generation), counted and listed as such rules are."""
        entry = book.entries[rule_id]
        small = entry.pop("s")
        counters = book.bucket_ms is not None
        MapIO(state).put([((rule_id, name), _dump([gen, *value] if counters else [gen, value]))
                          for name, value in sorted(small.items())])
        names = sorted(n for n in small if n != OVERFLOW_SERIES)
        if counters:
            assert book.bucket_ms is not None
            n: dict[str, int] = {}
            for name in names:
                bucket = str(small[name][0] // book.bucket_ms)
                n[bucket] = n.get(bucket, 0) + 1
            entry["n"] = n
        else:
            entry["n"] = len(names)
        if self._listed(rule_id):
            book.list_from(rule_id, names)
        book.changed.add(rule_id)

    def _exists(self, state: Any) -> Callable[[str, str, int], bool]:
        def exists(rule_id: str, name: str, gen: int) -> bool:
            entry = _load(state.getValue((rule_id, name)))
            return entry is not None and entry[0] == gen
        return exists

    def _fetch(self, state: Any, book: _Rules, rule_id: str, names: Iterable[str], gen: int,
               since: int | None = None) -> dict[str, Any]:
        """The stored entries of these series of the rule, of its current generation, without
        the generation: counters ``[last_seen, {le: partial}]`` (none last touched before
        ``since``: expired, whatever Spark's TTL has done yet), gauges ``{le: partial}``."""
        found: dict[str, Any] = {}
        names = list(names)
        for name, stored in zip(names, book.read(state, [(rule_id, n) for n in names]),
                                strict=True):
            entry = _load(stored)
            if entry is None or entry[0] != gen:
                continue
            if len(entry) == 2:
                found[name] = entry[1]
            elif since is None or _live(entry[1], since):
                found[name] = entry[1:]
        return found

    def _apply(self, state: Any, book: _Rules, rows: dict[str, list[tuple[str, str, Partial]]],
               rules: Mapping[str, Rule], internal: Iterable[str], update: _Update
               ) -> list[dict[str, Any]]:
        """One key's batch, counters' or a window's: each rule's entry and the stored series
        its rows touch read, the caps of the rules bringing new series looked up, ``update``
        called per rule (then for the refusals the caps made), the rule entries written
        back. ``internal``: l2m's own rules among ``rows`` (series entries of generation 0,
        no caps). Returns the samples."""
        fetched: dict[str, dict[str, Any]] = {}
        gens: dict[str, int] = {}
        new: dict[str, int] = {}  # rule → its series this call may start, at most
        internal = set(internal)
        rules = _plain(rules) or {}
        book.bind(rules, self._account_rules(rules))
        book.prefetch(r for r in rows if r in rules)
        for rule_id in sorted(rows):
            names = {name for name, _le, _p in rows[rule_id]}
            if rule_id in internal:
                gens[rule_id] = 0
                fetched[rule_id], _ = self._lookup(state, book, rule_id, names, 0, book.since)
                continue
            if rule_id not in rules:
                continue  # a removed rule
            entry = book.entry(rule_id, rules[rule_id])
            if "m" in entry and not self._listed(rule_id):
                book.unlist(rule_id)
            gens[rule_id] = entry["gen"]
            small = entry.get("s")
            if small is not None:
                since = book.since
                if since is not None:  # counters: swept here, as format 3 swept a section
                    for name in [n for n, v in small.items() if not _live(v[0], since)]:
                        del small[name]
                fetched[rule_id] = small
                some_new = not names <= small.keys()
            else:
                fetched[rule_id], some_new = self._lookup(state, book, rule_id, names,
                                                          gens[rule_id], book.since)
            if some_new:
                new[rule_id] = len(names - fetched[rule_id].keys())
        admission = self._admission(new, book, rules)
        samples: list[dict[str, Any]] = []
        for rule_id in sorted(fetched):
            samples += update(rule_id, rows[rule_id], fetched[rule_id], gens[rule_id],
                              admission)
        refusals = refusal_rows(admission, self.activity)
        if refusals:
            stored = self._fetch(state, book, REFUSED_RULE,
                                 {name for name, _le, _p in refusals}, 0)
            samples += update(REFUSED_RULE, refusals, stored, 0, None)
        book.write(self._exists(state) if book.bucket_ms is not None else None)
        return samples

    # --- counters -----------------------------------------------------------------------

    def _counter_rule(self, rule_id: str) -> Rule | None:
        return INTERNAL_RULES.get(rule_id) or self.counters.rules.get(rule_id)

    def _counter_key(self, shard: int, frames: Iterator[pd.DataFrame],
                     tv: TimerValues) -> Iterator[pd.DataFrame]:
        now = tv.getCurrentProcessingTimeInMs()
        meta, fresh = self._key_meta()
        rows = by_rule(frames)
        watermark = tv.getCurrentWatermarkInMs() if STATUS_RULE in rows else 0
        ttl = self.counters.ttl_ms
        book = self._book(_Rules(self.counter_rules, now, bucket_ms(ttl), ttl), shard,
                          self.counters.rules, meta, fresh)
        tally: Tally = {}

        def update(rule_id: str, rule_rows: list[tuple[str, str, Partial]],
                   stored: dict[str, Any], gen: int,
                   admission: Admission | None) -> list[dict[str, Any]]:
            return self._count(shard, rule_id, rule_rows, stored, gen, book, now, watermark,
                               admission, tally)

        samples = self._apply(self.counter_series, book, rows, self.counters.rules,
                              COUNTED_INTERNAL, update)
        # A new key's meta is written whatever the clock: _Rules.fresh relies on it.
        if fresh or now - meta.get("swept", 0) >= SWEEP_MS:
            tally.update(self._recount(shard, book, meta))
            meta["swept"] = now
            self.meta.update(_dump(meta))
        if self.counters.tally is not None and tally:
            self.counters.tally.add(tally)
        return emitted(samples, self.activity, now)

    def _count(self, shard: int, rule_id: str, rows: list[tuple[str, str, Partial]],
               stored: dict[str, Any], gen: int, book: _Rules, now: int, watermark: int,
               admission: Admission | None, tally: Tally) -> list[dict[str, Any]]:
        """One rule's rows of a counter key: its entries updated and written, its samples."""
        user = rule_id not in INTERNAL_RULES
        small = book.entries[rule_id].get("s") if user else None
        seen = {} if small is not None else {name: entry[0] for name, entry in stored.items()}
        status = rule_id == STATUS_RULE
        rule = self._counter_rule(rule_id)
        assert rule is not None
        content: dict[str, Any] = {"sig": signature(rule), "series": stored}
        if status:
            late = _load(book.read(self.counter_series, [(STATUS_RULE, LATE_SERIES)])[0])
            if late is not None:
                content["late"] = late[2]
        updated, samples = self.counters.update(rule_id, content, rows, now, watermark,
                                                sweep=False, admission=admission, marked=True)
        assert updated is not None  # rows were given
        if small is not None:
            book.entries[rule_id]["s"] = updated["series"]
            book.changed.add(rule_id)
            if len(updated["series"]) > SMALL_RULE:
                self._spill(rule_id, book, self.counter_series, gen)
            tally[SeriesCount(rule_id, shard, CUMULATIVE)] = \
                book.live(rule_id, self.counters.rules.get(rule_id))
            return samples
        added = []
        writes = []
        for name, (last_seen, buckets) in sorted(updated["series"].items()):
            if last_seen != now:
                continue  # fetched, not touched (an overflow series nothing went to)
            writes.append(((rule_id, name), _dump([gen, last_seen, buckets])))
            if user and name != OVERFLOW_SERIES:
                book.add(rule_id, seen.get(name))
                if name not in seen:
                    added.append(name)
            elif user:
                book.touch(rule_id)
        MapIO(self.counter_series).put(writes)
        if user:
            book.listing(rule_id, added, ())
        if status and "late" in updated:  # rewritten each batch: it lives while logs come
            self.counter_series.updateValue((STATUS_RULE, LATE_SERIES),
                                            _dump([0, now, updated["late"]]))
        if rule_id in INTERNAL_RULES:
            if rule_id != REFUSED_RULE:
                tally.update(tallied(rule_id, shard, CUMULATIVE, updated))
        else:
            tally[SeriesCount(rule_id, shard, CUMULATIVE)] = \
                book.live(rule_id, self.counters.rules.get(rule_id))
        return samples

    def _recount(self, shard: int, book: _Rules, meta: dict[str, Any]) -> Tally:
        """Every rule's live series in this key, for the driver's metrics (series expire
        without a call); the entries of rules with none left are dropped, and so are the
        groups' listings of own entries gone (a bucket outlives an idle account's own entries:
        its group would stay). Having read every group, the key is re-bucketed
        (:meth:`_rebucket`) if its buckets are :data:`REBUCKET` times off the rule set's, or
        it has none (format 5's groups)."""
        tally: Tally = {}
        groups: dict[str, dict[str, Any]] = {}  # every account's group left
        stored_in: list[str] = []  # the keys holding them
        stored = list(self.counter_rules.iterator())
        own: set[str] = set()  # the own entries left
        for (key,), value in stored:
            if not key.startswith(GROUP_PREFIX):
                entry = book.entries.get(key) or _load(value)
                book.entries[key] = entry
                live = book.live(key, None)
                tally[SeriesCount(key, shard, CUMULATIVE)] = live
                if live:
                    own.add(key)
                else:
                    self.counter_rules.removeKey((key,))
        for (key,), value in stored:
            if not key.startswith(GROUP_PREFIX):
                continue
            content = _load(value)  # written by this call already, if it changed
            held = _groups_in(content, key)
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
                self.counter_rules.removeKey((key,))
            elif changed:
                self.counter_rules.updateValue((key,), _dump(content))
        if not self.buckets:
            return tally
        wanted = self._bucket_count(shard, _plain(self.counters.rules))
        if book.buckets is None or not wanted < book.buckets * REBUCKET \
                or not book.buckets < wanted * REBUCKET:
            self._rebucket(groups, stored_in, wanted, book)
            meta["nb"] = wanted
        return tally

    def _rebucket(self, groups: dict[str, dict[str, Any]], stored_in: list[str],
                  buckets: int, book: _Rules) -> None:
        """Store every account's group of this counter key anew in ``buckets`` buckets (once
        a key of format 5 is swept, or when the rule set's accounts in its shard have changed
        :data:`REBUCKET`-fold: a write of every group, as rare as that)."""
        assert book.bucket_ms is not None
        made: dict[int, dict[str, Any]] = {}
        for account, group in sorted(groups.items()):
            group.pop("w", None)  # format 5's: a bucket has one
            made.setdefault(bucket_of(account, buckets), {"a": {}})["a"][account] = group
        for key in stored_in:
            self.counter_rules.removeKey((key,))
        own: dict[str, dict[str, Any]] = {}
        w = book.now // book.bucket_ms
        puts, _ = bucket_entries(made, own, w)  # none empty: every group here has entries
        MapIO(self.counter_rules).put(puts + [((r,), _dump({**e, "w": w}))
                                              for r, e in sorted(own.items())])

    # --- gauges -------------------------------------------------------------------------

    def _gauge_rule(self, rule_id: str) -> Rule | None:
        return REFUSED_GAUGE_RULE if rule_id == REFUSED_RULE else self.gauges.rules.get(rule_id)

    def _gauge_key(self, shard: int, window: int, frames: Iterator[pd.DataFrame],
                   tv: TimerValues) -> Iterator[pd.DataFrame]:
        now = tv.getCurrentProcessingTimeInMs()
        watermark = tv.getCurrentWatermarkInMs()
        meta, fresh = self._key_meta()
        # Made before the meta's first write (a window key keeps the buckets it is made with).
        book = self._book(_Rules(self.gauge_rules, now, None, 0), shard, self.gauges.rules,
                          meta, fresh)
        current = getattr(self.gauges.rules, "current", None)
        version = current() if current is not None else None
        if version is not None and meta.get("rs") != version:
            # The key's timers run in tasks that may have no rows to say which rules the
            # window is under: they read it here (docs/streaming.md "Live rule changes").
            meta["rs"] = version
            self.meta.update(_dump(meta))
        if GaugeState.closed(window, watermark):
            for _ in frames:  # logs of a closed window: counted late by the input statuses
                pass
            out = self._publish(window, watermark, now, meta)
            self._close(shard, window)
            return iter(out)
        published = "published" in meta  # before this batch: its updates are corrections
        if "timer" not in meta:
            self._schedule(now, meta)
        elif meta["timer"] > self._next_check(now):
            # Set by a run with a longer recheck (a continuous run before `run --once`):
            # looked at on this run's clock instead. (A key without rows in that run is
            # looked at when its timer is due: the run's tick waits for it, Ticker.due.)
            self.handle.deleteTimer(meta["timer"])
            self._schedule(now, meta)
        rules = self.gauges.rules
        tally: Tally = {}

        def update(rule_id: str, rule_rows: list[tuple[str, str, Partial]],
                   stored: dict[str, Any], gen: int,
                   admission: Admission | None) -> list[dict[str, Any]]:
            out = self._gauge(rule_id, window, rule_rows, stored, gen, book, admission)
            if rule_id in rules:
                tally[SeriesCount(rule_id, shard, window)] = book.live(rule_id, rules[rule_id])
            return out

        samples = self._apply(self.gauge_series, book, by_rule(frames), rules, (), update)
        if self.gauges.tally is not None and tally:
            self.gauges.tally.add(tally)
        out = list(emitted(samples, self.activity, now, CORRECTION if published else None))
        return iter(out + self._publish(window, watermark, now, meta))

    def _gauge(self, rule_id: str, window: int, rows: list[tuple[str, str, Partial]],
               stored: dict[str, Any], gen: int, book: _Rules,
               admission: Admission | None) -> list[dict[str, Any]]:
        """One rule's rows of a window key: its entries updated and written, its samples."""
        rule = self._gauge_rule(rule_id)
        assert rule is not None
        small = book.entries[rule_id].get("s") if rule_id != REFUSED_RULE else None
        if small is not None:
            updated, samples = self.gauges.update(rule_id, window,
                                                  {"sig": signature(rule), "series": small},
                                                  rows, admission)
            book.entries[rule_id]["s"] = updated["series"]
            book.changed.add(rule_id)
            if len(updated["series"]) > SMALL_RULE:
                self._spill(rule_id, book, self.gauge_series, gen)
            return samples
        before = {name: orjson.dumps(value) for name, value in stored.items()}
        updated, samples = self.gauges.update(rule_id, window,
                                              {"sig": signature(rule), "series": stored}, rows,
                                              admission)
        added = []
        writes = []
        for name, buckets in sorted(updated["series"].items()):
            if before.get(name) == orjson.dumps(buckets):
                continue  # fetched, not touched (an overflow series nothing went to)
            writes.append(((rule_id, name), _dump([gen, buckets])))
            if rule_id != REFUSED_RULE and name != OVERFLOW_SERIES:
                book.add(rule_id, None if name not in before else 0)
                if name not in before:
                    added.append(name)
        MapIO(self.gauge_series).put(writes)
        if rule_id != REFUSED_RULE:
            book.listing(rule_id, added, ())
        return samples

    def _publish(self, window: int, watermark: int, now: int,
                 meta: dict[str, Any]) -> list[pd.DataFrame]:
        """A window's final value, once (:meth:`GaugeState.final`): every series the key
        holds, marked :data:`~l2m.engine.samples.FINAL` — what remote write sends of it
        (docs/prometheus.md); its later updates are marked as corrections."""
        if "published" in meta or not self.gauges.final(window, watermark):
            return []
        samples = self._window_samples(window)
        if not samples and "timer" not in meta:
            return []  # a key without state (a late log's closed window)
        meta["published"] = now
        self.meta.update(_dump(meta))
        return list(emitted(samples, self.activity, now, FINAL))

    def _window_samples(self, window: int) -> list[dict[str, Any]]:
        """The samples of every current series of this window key, rules in id order."""
        gens: dict[str, int] = {REFUSED_RULE: 0}  # l2m's refusal gauge: no rule entry
        small: dict[str, dict[str, Any]] = {}
        for rule_id, entry in self._gauge_entries():
            rule = self._gauge_rule(rule_id)
            if rule is None or not same_signature(entry.get("sig"), rule):
                continue  # a removed rule, or one changed since: nothing current
            gens[rule_id] = entry["gen"]
            if "s" in entry:
                small[rule_id] = entry["s"]
        series: dict[str, dict[str, Any]] = {**small}
        for (rule_id, name), stored in list(self.gauge_series.iterator()):
            value = _load(stored)
            if rule_id not in small and gens.get(rule_id) == value[0]:
                series.setdefault(rule_id, {})[name] = value[1]
        samples: list[dict[str, Any]] = []
        for rule_id in sorted(series):
            rule = self._gauge_rule(rule_id)
            if rule is not None and series[rule_id]:
                samples += GaugeState.samples(rule, window, series[rule_id])
        return samples

    def _gauge_entries(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every rule entry of this window key, own or in a group, with its rule's id."""
        for (key,), stored in list(self.gauge_rules.iterator()):
            if key.startswith(GROUP_PREFIX):
                for group in _groups_in(_load(stored), key).values():
                    yield from group["r"].items()
            else:
                yield key, _load(stored)

    def _next_check(self, now: int) -> int:
        """When a window key looked at ``now`` is looked at again: the next multiple of
        ``recheck_ms``. On multiples, every key's timer is due at the one moment after a
        batch, so one batch without rows then (an idle source's tick,
        :class:`l2m.kafka.source.Ticker`) runs them all."""
        recheck = max(1, self.gauges.recheck_ms)
        return (now // recheck + 1) * recheck

    def _schedule(self, now: int, meta: dict[str, Any]) -> None:
        """Look at this window key again at the next recheck (:meth:`_next_check`): to publish
        it once final and close it, without data."""
        meta = meta or self._meta()
        at = self._next_check(now)
        self.handle.registerTimer(at)
        meta["timer"] = at
        self.meta.update(_dump(meta))

    def _close(self, shard: int, window: int) -> None:
        """The watermark has passed the window: everything of its key goes."""
        if self.gauges.tally is not None:
            self.gauges.tally.add({SeriesCount(rule_id, shard, window): 0
                                   for rule_id, _ in self._gauge_entries()})
        for at in list(self.handle.listTimers()):
            self.handle.deleteTimer(at)
        self.gauge_series.clear()
        self.gauge_rules.clear()
        self.meta.clear()

