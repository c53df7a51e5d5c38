"""Series caps in a format 9 state call: which of the rules bringing new series could reach a
cap, their live series counted only then, and the :class:`~l2m.engine.admission.Admission`
that decides each new series (:mod:`l2m.engine.admission`).

Input: the call's series caps by rule (of the rule set the call runs under; None: caps off),
the rules bringing new series and how many each may start, the call's
:class:`~l2m.state.rulebook.RuleBook`. Output: the admission (None: every new series is
admitted), whether a rule's entry lists its series (:meth:`CallCaps.listed`), each account's
current rules and the buckets a key is made with (:meth:`CallCaps.bucket_count`).

Series caps need each rule's live series. Spark expires entries silently, so a rule's entry
counts its series by the bucket of their last touch; a bucket is dropped once its newest
possible entry has expired. Until then an expired series still counts (at most
``counter_ttl / BUCKETS`` late, 79 minutes at 7 days) — the count never falls below the live
entries, so a cap is never exceeded. The counts of a rule's account and metric are the sums
over the account's current rules, read only when one of them brings a new series."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from l2m.engine.admission import Admission, RuleCaps
from l2m.rules.model import Rule
from l2m.state.buckets import bucket_count, shard_accounts
from l2m.state.rulebook import RuleBook

# A rule whose per-rule cap is at most this keeps the list of its series in its entry (at most
# ≈ 40 bytes a series: 800 KB at this cap), so that a batch reads only the series it lists.
LISTED_CAP = 20_000


class AccountIndex:
    """Each account's current rules (what its account and metric counts sum over), built once
    per rule table: a processor keeps one for its task's calls."""

    def __init__(self) -> None:
        self._accounts: dict[str, list[str]] = {}
        self._of: Any = None  # the caps (or rules) they came from

    def of(self, caps: Mapping[str, RuleCaps] | None, rules: Mapping[str, Rule]
           ) -> Mapping[str, list[str]]:
        """Each account's rules: in ``caps``, or without caps in ``rules``."""
        source: Mapping[str, Any] = caps if caps is not None else rules
        if self._of is not source:
            # Per rule set: a rule added live counts in its account's sums.
            accounts: dict[str, list[str]] = {}
            for rule_id, value in source.items():
                account = value.account_name if caps is not None else value.account
                if account is not None:
                    accounts.setdefault(account, []).append(rule_id)
            self._accounts, self._of = accounts, source
        return self._accounts


class CallCaps:
    """The series caps of one state call: ``caps`` (None: off) of the call's rule set."""

    def __init__(self, caps: Mapping[str, RuleCaps] | None, accounts: AccountIndex) -> None:
        self.caps = caps
        self._accounts = accounts

    def account_rules(self, rules: Mapping[str, Rule]) -> Mapping[str, list[str]]:
        """Each account's current rules: from the caps, or without caps from ``rules``."""
        return self._accounts.of(self.caps, rules)

    def bucket_count(self, shard: int, shards: int, rules: Mapping[str, Rule]) -> int:
        """The buckets a key of ``shard`` (of ``shards``) is made with, or re-bucketed to: by
        the accounts the rule set places in the shard (:func:`~l2m.state.buckets.
        bucket_count`)."""
        source: Any = self.caps if self.caps is not None else rules
        return bucket_count(shard_accounts(source, shards, self.account_rules(rules))
                            .get(shard, 0))

    def listed(self, rule_id: str) -> bool:
        """Whether the rule's entry lists its series: a per-rule cap, and one small enough
        that the list stays small (:data:`LISTED_CAP`)."""
        caps = (self.caps or {}).get(rule_id)
        return caps is not None and 0 < caps.rule <= LISTED_CAP

    def admission(self, new: Mapping[str, int], book: RuleBook,
                  rules: Mapping[str, Rule]) -> Admission | None:
        """The caps of one domain for rules that bring new series (``new``: rule → how many
        of its series this call may start, at most): the live series of each, and of every
        current rule of their accounts.

        Counting a rule's live series looks at each of them (their last touch); first each
        is bounded from above without (:meth:`RuleBook.bound`). When no cap can be reached
        even by the bounds plus every candidate series, every new series is admitted whatever
        the exact counts, and there is nothing to count (None, as without caps): with
        100,000 rules a batch touching most accounts counted 113,000 rules' series one by one
        for no refusal."""
        if self.caps is None:
            return None
        counted_rules: set[str] = set()
        for rule_id in new:
            caps = self.caps.get(rule_id)
            if caps is None:
                continue
            counted_rules.add(rule_id)
            if caps.account_name is not None:
                counted_rules.update(self.account_rules(rules).get(caps.account_name, ()))
        counted = [r for r in counted_rules if r in rules]
        book.prefetch(counted)
        bounds = {r: book.bound(r, rules.get(r)) for r in counted}
        if self.below_caps(bounds, new):
            # Every new series is admitted, as without caps: no admission to keep count
            # (24,000 rules' series each admitted one by one cost 8% of a 100,000-rule call).
            return None
        return Admission(self.caps, {r: book.live(r, rules.get(r)) for r in sorted(counted)})

    def below_caps(self, sizes: Mapping[str, int], new: Mapping[str, int]) -> bool:
        """Whether every new series would be admitted even if each rule had ``sizes`` series
        and each rule of ``new`` started that many: a series is refused only once a count
        has reached its cap (:meth:`Admission.admit`)."""
        assert self.caps is not None
        metrics: dict[tuple[str, str], int] = {}  # (account, metric) → series at most
        accounts: dict[str, int] = {}
        for rule_id, size in sizes.items():
            caps = self.caps.get(rule_id)
            if caps is not None and caps.account_name is not None:
                total = size + new.get(rule_id, 0)
                metric = (caps.account_name, caps.metric_name)
                metrics[metric] = metrics.get(metric, 0) + total
                accounts[caps.account_name] = accounts.get(caps.account_name, 0) + total
        for rule_id in new:  # each admission is checked against the admitted rule's own caps
            caps = self.caps.get(rule_id)
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
