"""Per-tenant visibility (issue 20): what each account's rules cost and did, bounded so that
l2m's own metrics cannot explode with the number of tenants.

Input: each rule's account, and what the state keys and read tasks reported
(:mod:`l2m.state.tally`): live series per (rule, shard, window) — last value — and logs
matched, logs refused by a series cap and samples emitted per rule — sums. Output: an
:class:`AccountStats` per account for the :data:`top` accounts by live series, and one for
all the others together (:data:`OTHER`), over time (:class:`AccountBook`); as ``/metrics``
families (:mod:`l2m.runtime.telemetry`) and as samples the driver writes to the metrics topic
after each batch (:func:`account_samples`).

Which accounts are named is sticky (:class:`AccountBook`): an account enters when it is in the
top, and leaves only when more than twice :data:`top` are named (the fewest series first).
The other bucket's counters add only what accounts counted while they were outside it, so
every counter stays monotonic — an account that enters keeps its history in ``__other__`` and
starts its own series with its total."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from l2m.state.tally import MatchCount, RefusedCount, SampleCount, SeriesCount

OTHER = "__other__"  # the account label of every account outside the top
NO_ACCOUNT = ""  # rules without an account (open mode)
STATS_HELP = {
    "series": ("l2m_account_series", "gauge",
               "Live series of the account's rules in the state (counters, and gauges' open "
               "windows)."),
    "refused": ("l2m_account_series_refused_total", "counter",
                "Logs of the account counted into overflow series: they would have opened a "
                "series past a cap."),
    "samples": ("l2m_account_samples_total", "counter",
                "Samples the account's rules emitted."),
    "matched": ("l2m_account_logs_matched_total", "counter",
                "Logs the account's rules matched (a log matched by two rules counts twice)."),
}


@dataclass
class AccountStats:
    series: float = 0.0
    refused: float = 0.0
    samples: float = 0.0
    matched: float = 0.0


def account_totals(accounts: Mapping[str, str | None], latest: Mapping[Any, float],
                   sums: Mapping[Any, float]) -> dict[str, AccountStats]:
    """Every account's numbers from the tallies (``accounts``: rule id → account)."""
    # Summed per rule first, then per account: a tally holds a key per rule and state key
    # (400,000 with 100,000 rules), and its key types are final (a type check, not
    # isinstance): 0.24 → 0.16 s of the driver's CPU a batch.
    per_rule: dict[str, float] = {}
    for key, n in latest.items():
        if type(key) is SeriesCount:
            per_rule[key.rule] = per_rule.get(key.rule, 0.0) + n
    summed: dict[type, dict[str, float]] = {RefusedCount: {}, SampleCount: {}, MatchCount: {}}
    for key, n in sums.items():
        counted = summed.get(type(key))
        if counted is not None:
            counted[key.rule] = counted.get(key.rule, 0.0) + n
    stats: dict[str, AccountStats] = {}
    for counted, name in ((per_rule, "series"), (summed[RefusedCount], "refused"),
                          (summed[SampleCount], "samples"), (summed[MatchCount], "matched")):
        for rule, n in counted.items():
            if rule not in accounts:
                continue  # l2m's own rows, or a rule no longer loaded
            account = accounts[rule]
            account = NO_ACCOUNT if account is None else account
            entry = stats.get(account)
            if entry is None:
                entry = stats[account] = AccountStats()
            setattr(entry, name, getattr(entry, name) + n)
    return stats


@dataclass
class AccountBook:
    """The driver's per-tenant view over time: the :attr:`top` accounts by live series (ties by
    name) named, sticky, and the rest as a monotonic ``__other__`` (present once there is a
    rest). :meth:`view` after each batch or scrape, given the per-account totals of
    :func:`account_totals`."""

    top: int
    named: dict[str, None] = field(default_factory=dict)  # insertion-ordered set
    other: AccountStats = field(default_factory=AccountStats)  # counters: monotonic
    last: dict[str, AccountStats] = field(default_factory=dict)  # totals last seen

    def view(self, totals: Mapping[str, AccountStats]) -> dict[str, AccountStats]:
        # Only the top is wanted of 10,000 accounts: a heap, not a sort (keys are unique).
        for account in heapq.nsmallest(self.top, totals, key=lambda a: (-totals[a].series, a)):
            self.named.setdefault(account, None)
        if len(self.named) > 2 * self.top:
            keep = sorted(self.named, key=lambda a: (-totals.get(a, AccountStats()).series, a))
            self.named = dict.fromkeys(keep[:self.top])
        other_series = 0.0
        for account, now in totals.items():
            before = self.last.get(account, AccountStats())
            self.last[account] = now
            if account in self.named:
                continue
            other_series += now.series
            for name in COUNTERS:
                grew = getattr(now, name) - getattr(before, name)
                # a new query's accumulators restart at 0: what it counted is all new
                setattr(self.other, name, getattr(self.other, name)
                        + (grew if grew >= 0 else getattr(now, name)))
        view = {a: totals.get(a, AccountStats()) for a in self.named}
        if len(totals) > len(view) or self.other != AccountStats():
            view[OTHER] = AccountStats(other_series, *(getattr(self.other, n) for n in COUNTERS))
        return view


COUNTERS = ("refused", "samples", "matched")


def account_samples(view: Mapping[str, AccountStats], timestamp: int
                    ) -> list[dict[str, Any]]:
    """The view as samples of the metrics topic (:mod:`l2m.engine.samples`' shape), from l2m
    itself (rule ``l2m-accounts``, no target account)."""
    out = []
    for account, stats in view.items():
        for field_name, (name, kind, _help) in STATS_HELP.items():
            out.append({"name": name, "kind": kind, "labels": {"account": account},
                        "value": float(getattr(stats, field_name)), "timestamp": timestamp,
                        "account": None, "rule": "l2m-accounts"})
    return out
