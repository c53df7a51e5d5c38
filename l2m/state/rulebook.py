"""Format 9's rule entries of one state call: :class:`RuleBook` reads each rule's entry at most
once (its account's bucket, or its own entry), keeps its signature, generation and live series
count up to date through the call, and writes back what changed, each changed bucket once.

Input: a key's rule map (``counter_rules`` or ``gauge_rules``, :mod:`l2m.state.variables`),
the call's time, the key's buckets, the rules of the call's rule set. Output: rule entries
(:meth:`RuleBook.entry`), live series counts (:meth:`RuleBook.live`) and bounds
(:meth:`RuleBook.bound`) for the caps, and the entries written back (:meth:`RuleBook.write`).
Layout: :mod:`l2m.state.format`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from l2m.engine.admission import OVERFLOW_SERIES
from l2m.rules.model import Rule
from l2m.state.buckets import Put, bucket_entries, bucket_of
from l2m.state.counters import same_signature, signature
from l2m.state.format import RULE_ACCOUNT, bucket_key, dump_value, load_value
from l2m.state.mapio import MapIO


def live_since(last_seen: int, since: int) -> bool:
    """Whether a counter series last touched at ``last_seen`` is live in a call at ``now``,
    ``since`` being ``now - counter_ttl``: the one rule for a small rule's series, a series
    entry Spark's TTL has not removed yet, and the live count. Spark's TTL removes an entry
    no sooner, so what Python reads as live, the state has."""
    return last_seen >= since


def groups_in(bucket: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The account groups a stored bucket entry holds, by account."""
    return bucket["a"]


class RuleBook:
    """The rule entries one call reads (each at most once) and writes back: a rule's
    signature, generation and live series (counters: per last-touch bucket; gauges: a count).

    Where an entry is stored: a small rule of an account (its series inside its entry) is a
    member of the account's *group* (``{"r": {rule: entry}, "own": [rule…]}``), which lives
    in one of the key's ``buckets`` entries with other accounts' groups
    (:func:`~l2m.state.buckets.bucket_of`), read and written whole; every other rule has its
    own entry, keyed by its id, which records its account (another account's there — the
    rule counted for it meanwhile — is a new generation's start). A group lists the
    account's rules with an own entry (``"own"``), so a rule in neither is known to be new
    without a read, and an account without a group has no entries. Members past
    :data:`~l2m.state.buckets.GROUP_SERIES` series in a bucket move to own entries, marked
    ``"o"`` (they stay there); a rule's own small entry without the mark (a large rule's new
    generation) joins its group."""

    def __init__(self, state: Any, now: int, bucket_ms: int | None, ttl_ms: int,
                 buckets: int, fresh: bool) -> None:
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
        self.account: dict[str, str | None] = {}  # a loaded rule's account (None: own only)
        self.groups: dict[str, dict[str, Any]] = {}  # by account, once read (or made)
        self._groups_changed: set[str] = set()
        self._removed: set[str] = set()  # own entries that moved into their group
        # Whether the key held nothing before this call (no meta: every key with entries has
        # one, written in the call that wrote its first entries): nothing to read (read()).
        # A new gauge window's first batch, every key of a new checkpoint's.
        self.fresh = fresh
        self.buckets = buckets  # the key's (its meta's "nb"), each group in bucket_of(account)
        self._buckets: dict[int, dict[str, Any]] = {}  # by number, once read (or made)

    def bind(self, rules: Mapping[str, Rule]) -> None:
        """The call's rules of this kind: which group a rule's entry is in."""
        self._rules = rules

    def _account_of(self, rule_id: str) -> str | None:
        rule = self._rules.get(rule_id)
        return rule.account if rule is not None else None

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
        for acct, found in zip(unread, self._read_groups(unread), strict=True):
            self.groups[acct] = found or {"r": {}, "own": []}
        own = []
        for rule_id in wanted:
            owner = accounts[rule_id]
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

    def _read_groups(self, accounts: list[str]) -> list[dict[str, Any] | None]:
        """These accounts' groups as stored (None: none), from their buckets (each read at
        most once a call)."""
        buckets = self.buckets
        numbers = sorted({bucket_of(a, buckets) for a in accounts} - self._buckets.keys())
        for number, raw in zip(numbers, self.read(self.state,
                                                  [(bucket_key(n),) for n in numbers]),
                               strict=True):
            self._buckets[number] = load_value(raw) or {"a": {}}
        return [self._buckets[bucket_of(a, buckets)]["a"].get(a) for a in accounts]

    def _written_in(self, account: str) -> Any:
        """The last-write bucket (``"w"``) of the entry holding the account's group."""
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
        found = member if member is not None else load_value(raw)
        if found is not None and member is None and rule is not None \
                and found.get(RULE_ACCOUNT, rule.account) != rule.account:
            # The rule's own key holds another account's entry (the rule counted there since
            # this account's group listed it): its series entries are that account's, never
            # this one's. A new generation above the other's, whose series read as absent.
            found = {"sig": None, "gen": max(self.now, found["gen"] + 1),
                     "n": {} if self.bucket_ms else 0, "s": {}}
        if found is None:
            # A rule whose account changed has its old entries in another group of the key,
            # its series entries too (the TTL drops them): its new generation must never be
            # one of theirs. Nothing is stored in a fresh key; otherwise the call's time, above
            # any generation a location made in an earlier batch has reached (one per batch).
            found = {"sig": None, "gen": 0 if self.fresh else self.now,
                     "n": {} if self.bucket_ms else 0, "s": {}}
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
        """The rule's series move out of its entry (:meth:`l2m.state.keycall.KeyCall.spill`):
        from now on its entry lists them, complete because it starts from all of them."""
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
                       if live_since(v[0], since) and name != OVERFLOW_SERIES)
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
                entry.pop(RULE_ACCOUNT, None)  # its group's
                group["r"][rule_id] = entry
                if rule_id in group["own"]:  # a new generation of a rule with its own entry
                    group["own"].remove(rule_id)
                    self._removed.add(rule_id)
                self._groups_changed.add(account)
            else:
                entry[RULE_ACCOUNT] = account
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
        MapIO(self.state).put(puts + [((r,), dump_value(e)) for r, e in sorted(own.items())])
        for key in gone + [(r,) for r in sorted(self._removed - own.keys())]:
            self.state.removeKey(key)

    def _stored_groups(self, own: dict[str, dict[str, Any]]
                       ) -> tuple[list[Put], list[tuple[str]]]:
        """The entries to write (and to remove) for the buckets whose groups this call
        changed; members past the bound go to ``own``."""
        w = self.now // self.bucket_ms if self.bucket_ms is not None else None
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
