"""Per-tenant visibility (issue 20): what each account's rules cost and did, bounded so that
l2m's own metrics cannot explode with the number of tenants.

Input: each rule's account, and what the state keys and read tasks reported
(:mod:`l2m.state.tally`): live series per (rule, shard, window) — last value — and logs
matched, logs refused by a series cap and samples emitted per rule — sums. Output: an
:class:`AccountStats` per account for the :data:`top` accounts by live series, and one for
all the others together (:data:`OTHER`); as ``/metrics`` families (:mod:`l2m.runtime.telemetry`)
and as samples the driver writes to the metrics topic after each batch
(:func:`account_samples`).

An account moves in and out of the top as its series grow and shrink; the sum over every
``account`` label value (the other bucket included) is what stays monotonic for the counters,
so rates per account are read with ``sum by (account)`` and totals with ``sum``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
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

    def add(self, other: AccountStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def account_view(accounts: Mapping[str, str | None], latest: Mapping[Any, float],
                 sums: Mapping[Any, float], top: int) -> dict[str, AccountStats]:
    """Per account (``accounts``: rule id → account, None for none), the top ``top`` by live
    series (ties by name) and :data:`OTHER` for the rest (present only when there is a rest)."""
    stats: dict[str, AccountStats] = {}

    def of(rule: str) -> AccountStats | None:
        if rule not in accounts:
            return None  # l2m's own rows, or a rule no longer loaded
        account = accounts[rule]
        return stats.setdefault(NO_ACCOUNT if account is None else account, AccountStats())

    for key, n in latest.items():
        if isinstance(key, SeriesCount) and (entry := of(key.rule)) is not None:
            entry.series += n
    for key, n in sums.items():
        if isinstance(key, (RefusedCount, SampleCount, MatchCount)) and \
                (entry := of(key.rule)) is not None:
            if isinstance(key, RefusedCount):
                entry.refused += n
            elif isinstance(key, SampleCount):
                entry.samples += n
            else:
                entry.matched += n
    ranked = sorted(stats, key=lambda a: (-stats[a].series, a))
    view = {a: stats[a] for a in ranked[:top]}
    if len(ranked) > top:
        rest = AccountStats()
        for account in ranked[top:]:
            rest.add(stats[account])
        view[OTHER] = rest
    return view


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
