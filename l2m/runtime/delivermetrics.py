"""``l2m deliver``'s own metrics (docs/metrics.md, "Remote write"), in a ``prometheus_client``
registry that :mod:`l2m.runtime.endpoint` serves with ``/healthz`` and ``/readyz``.

Input: each endpoint's :class:`~l2m.remotewrite.outbox.Tally` (samples sent, refused per
reason and tenant, skipped per reason, gauge corrections per rule, requests per outcome, the
last accepted request, the lag), read at scrape time as a snapshot, and each endpoint's
liveness and readiness. Output: ``l2m_remote_write_*`` families, every one labelled
``endpoint``. The tenant label of refusals and the rule label of corrections are bounded
(:class:`TopLabels`): the ``monitoring.top_accounts`` largest named, the rest summed as
``__other__``, so that a receiver refusing every tenant of a large job, or many rules being
corrected, cannot explode l2m's own series. Counts since ``l2m deliver`` started."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from l2m.remotewrite.outbox import REQUEST_OUTCOMES, SKIP_REASONS, Tally
from l2m.state.accounts import OTHER
from l2m.version import __version__


@dataclass
class TopLabels:
    """Bounds one label of a family of counters (a tenant, a rule) over time: the :attr:`top`
    values with the largest totals (ties by name) are named, the others summed into
    :data:`~l2m.state.accounts.OTHER`, per value of a second, small label (a reason; ``""``
    when there is none). As :class:`l2m.state.accounts.AccountBook` does for ``l2m run``:
    a value enters when it is in the top and leaves only when more than twice :attr:`top`
    are named (the smallest first); ``__other__`` adds only what values counted while they
    were outside the named ones, so every counter stays monotonic — a value that enters
    keeps its history in ``__other__`` and starts its own series with its total (read
    ``rate()`` summed, not the raw counters)."""

    top: int
    named: dict[str, None] = field(default_factory=dict)  # an insertion-ordered set
    other: dict[str, float] = field(default_factory=dict)  # per small label: monotonic
    last: dict[tuple[str, str], float] = field(default_factory=dict)  # totals last seen

    def view(self, totals: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
        """The bounded counters, given every (small label, bounded label) → total since the
        start (never decreasing)."""
        per_value: dict[str, float] = {}
        for (_, value), n in totals.items():
            per_value[value] = per_value.get(value, 0.0) + n
        ranked = sorted(per_value, key=lambda v: (-per_value[v], v))
        for value in ranked[:self.top]:
            self.named.setdefault(value, None)
        if len(self.named) > 2 * self.top:
            keep = sorted(self.named, key=lambda v: (-per_value.get(v, 0.0), v))
            self.named = dict.fromkeys(keep[:self.top])
        for key, now in totals.items():
            before = self.last.get(key, 0.0)
            self.last[key] = now
            if key[1] not in self.named:
                self.other[key[0]] = self.other.get(key[0], 0.0) + max(0.0, now - before)
        view = {key: float(n) for key, n in totals.items() if key[1] in self.named}
        for small, n in self.other.items():
            view[(small, OTHER)] = n
        return view


class Watched(Protocol):
    """One endpoint's delivery, as the metrics see it
    (:class:`l2m.runtime.deliver.EndpointDelivery`)."""

    @property
    def name(self) -> str: ...

    @property
    def tally(self) -> Tally: ...

    @property
    def ready(self) -> bool: ...

    def healthy(self) -> bool: ...


class DeliveryTelemetry:
    """The metrics of ``l2m deliver``'s endpoints, for :class:`l2m.runtime.endpoint.Endpoint`:
    ``/healthz`` is 200 while no endpoint's loop has failed or stalled (a receiver's outage
    being retried is healthy: a restart would not help), ``/readyz`` while every endpoint
    reads the metrics topic. Thread-safe: scrapes come from the server's threads."""

    def __init__(self, endpoints: Sequence[Watched], top: int,
                 registry: CollectorRegistry | None = None) -> None:
        self.endpoints = list(endpoints)
        self.registry = registry or CollectorRegistry()
        self.stopping = False
        self._lock = threading.Lock()
        # A book per endpoint: each receiver refuses its own tenants.
        self._tenants = {e.name: TopLabels(top) for e in self.endpoints}
        self._rules = {e.name: TopLabels(top) for e in self.endpoints}
        Gauge("l2m_build_info", "l2m's version.", ("version",),
              registry=self.registry).labels(__version__).set(1)
        self.registry.register(_Collector(self))

    @property
    def ready(self) -> bool:
        return not self.stopping and all(e.ready for e in self.endpoints)

    def healthy(self) -> bool:
        """No endpoint's loop failed, stalled, or is recovering from an unexpected error."""
        return all(e.healthy() for e in self.endpoints)

    def families(self) -> Iterator[Metric]:
        """Every family, from one snapshot of each endpoint's tally."""
        # Snapshots and books under one lock: a scrape whose snapshot is older than the one
        # the books last saw would count a value's growth into __other__ twice.
        with self._lock:
            tallies = [(e.name, e.tally.snapshot()) for e in self.endpoints]
            refused = {name: self._tenants[name].view(t.refused) for name, t in tallies}
            corrected = {name: self._rules[name].view({("", r): n for r, n in
                                                       t.corrections.items()})
                         for name, t in tallies}
        family = CounterMetricFamily("l2m_remote_write_samples_sent",
                                     "Samples the endpoint's receiver accepted.",
                                     labels=["endpoint"])
        for name, t in tallies:
            family.add_metric([name], t.sent)
        yield family
        family = CounterMetricFamily(
            "l2m_remote_write_samples_refused", "Samples the receiver refused for good "
            "(docs/prometheus.md: which refusals are split down to the samples refused), by "
            "reason and tenant (the "
            "monitoring.top_accounts tenants with most refusals, the rest as __other__).",
            labels=["endpoint", "reason", "tenant"])
        for name, _ in tallies:
            for (reason, tenant), n in sorted(refused[name].items()):
                family.add_metric([name, reason, tenant], n)
        yield family
        family = CounterMetricFamily(
            "l2m_remote_write_samples_skipped", "Samples of the metrics topic not sent, by "
            "reason (" + ", ".join(SKIP_REASONS) + ").",
            labels=["endpoint", "reason"])
        for name, t in tallies:
            for reason, n in sorted(t.skipped.items()):
                family.add_metric([name, reason], n)
        yield family
        family = CounterMetricFamily(
            "l2m_remote_write_corrections_dropped", "Gauge corrections after their window "
            "was published, not sent, by rule (the monitoring.top_accounts rules with most, "
            "the rest as __other__).", labels=["endpoint", "rule"])
        for name, _ in tallies:
            for (_, rule), n in sorted(corrected[name].items()):
                family.add_metric([name, rule], n)
        yield family
        family = CounterMetricFamily(
            "l2m_remote_write_requests", "Remote-write requests by outcome: sent (2xx), "
            "refused (a final refusal), retried (a 5xx, a 429 or no answer: sent again after "
            "a backoff), auth_failed (answered 401 or 403: the credentials are refused).",
            labels=["endpoint", "outcome"])
        for name, t in tallies:
            for outcome in REQUEST_OUTCOMES:
                family.add_metric([name, outcome], t.requests.get(outcome, 0))
        yield family
        family = CounterMetricFamily(
            "l2m_remote_write_errors", "Unexpected errors of the endpoint's loop, by the "
            "error's type: each is logged and the loop starts again after a backoff from its "
            "last commit (/healthz fails until a poll is delivered).",
            labels=["endpoint", "error"])
        for name, t in tallies:
            for error, n in sorted(t.errors.items()):
                family.add_metric([name, error], n)
        yield family
        gauge = GaugeMetricFamily("l2m_remote_write_last_success_timestamp_seconds",
                                  "Unix time the receiver last accepted a request (0: not "
                                  "yet).", labels=["endpoint"])
        for name, t in tallies:
            gauge.add_metric([name], t.last_success)
        yield gauge
        gauge = GaugeMetricFamily("l2m_remote_write_lag_records",
                                  "Records of the metrics topic the endpoint has not "
                                  "committed yet, all partitions (approximate: from the "
                                  "consumer's high watermarks).", labels=["endpoint"])
        for name, t in tallies:
            gauge.add_metric([name], t.lag)
        yield gauge


class _Collector:
    def __init__(self, telemetry: DeliveryTelemetry) -> None:
        self.t = telemetry

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return self.t.families()
