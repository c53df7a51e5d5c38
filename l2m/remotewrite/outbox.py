"""Samples of the metrics topic → remote-write requests, stamped by l2m's time-stamping
policy (docs/prometheus.md), and the tally of what became of them.

Input: records of the metrics topic — the sample's JSON (SPEC §4), the record's timestamp
(ms) and its :data:`MARK_HEADER` mark — and one endpoint's :class:`Route`. Output:
:class:`Request` bodies, one tenant each, at most ``max_samples`` samples each, every series'
samples in strictly increasing time order; a :class:`Tally` of the samples sent, refused (per
reason and tenant) and skipped (per reason; gauge corrections per rule), which
:mod:`l2m.runtime.deliver` completes with its requests' outcomes and its lag.

The policy, so that Prometheus accepts every sample and no timestamp is ever written twice
with two values:

* **counters** (histogram families of counter rules too) are stamped with their record's
  timestamp: the micro-batch that computed the value (the state stage's batch time, the same
  when a batch is replayed), so the value changes only with a new timestamp, and a family's
  ``_bucket``/``_sum``/``_count`` share it. The sample's own ``timestamp`` (the largest event
  time counted) stands still while late logs raise the value: Prometheus refuses that as a
  duplicate sample. A series' first sample (marked :data:`NEW`) is preceded by a 0 one
  millisecond earlier, so that ``increase()`` counts its first value, and a series that
  starts again (after its TTL) reads as a counter reset.
* **gauges** are stamped with their window's start and sent only when final: the state stage
  publishes a window once the newest event time has passed its end by the publish delay,
  every series of it in records marked :data:`FINAL`; the updates it still takes after that
  (marked :data:`CORRECTION`) stay on the topic for consumers that accept overwrites, and
  are counted here per rule instead of sent."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from l2m.engine.samples import CORRECTION, FINAL, MARK_HEADER, NEW
from l2m.remotewrite.encode import Metadata, Series, body
from l2m.rules.model import Aggregation, Rule

__all__ = ["CORRECTION", "FINAL", "MARK_HEADER", "NEW", "REQUEST_OUTCOMES", "Outbox", "Request",
           "Route", "Tally"]
# Skipped samples, by reason.
NOT_FINAL = "not_final"  # a gauge window's value before its window is published
CORRECTED = "correction"  # a gauge window's update after it was published
MALFORMED = "malformed"  # a record that is not an l2m sample
OTHER_ACCOUNT = "other_account"  # an account this endpoint does not take
NO_TENANT = "no_tenant"  # no account, and no default tenant for such samples
_SKIPPED = object()


@dataclass(frozen=True)
class Route:
    """Which samples an endpoint takes and under which tenant: ``accounts`` (None: all);
    the tenant of an account is ``tenants[account]``, else the account itself; a sample
    without an account goes to ``default_tenant`` (None with ``tenant_header`` set: skipped,
    since a multi-tenant receiver would put it in whatever tenant it defaults to)."""

    accounts: frozenset[str] | None = None
    tenants: Mapping[str, str] = field(default_factory=dict)
    default_tenant: str | None = None
    tenant_header: bool = True

    def tenant(self, account: str | None) -> str | object | None:
        """The tenant, None (no tenant header) or :data:`_SKIPPED`'s marker."""
        if account is None:
            if self.default_tenant is None and self.tenant_header:
                return _SKIPPED
            return self.default_tenant
        if self.accounts is not None and account not in self.accounts:
            return _SKIPPED
        return self.tenants.get(account, account) if self.tenant_header else None


def sample_value(value: Any) -> float:
    """A sample's value as remote write carries it (``"+Inf"``, ``"-Inf"``, ``"NaN"`` as the
    doubles they stand for)."""
    if isinstance(value, str):
        return {"+Inf": math.inf, "-Inf": -math.inf}.get(value, math.nan)
    return float(value)


def stamp(sample: Mapping[str, Any], record_ms: int | None, mark: str | None) -> int | None:
    """The timestamp a sample is written with by the policy (module docstring), or None when
    it is not sent (a gauge window's value that is not its final one)."""
    if sample.get("kind") == "gauge":
        return int(sample["timestamp"]) if mark == FINAL else None
    return int(record_ms if record_ms is not None else sample["timestamp"])


@dataclass(frozen=True)
class Request:
    """One request: its tenant (None: no tenant header), its body, how many samples, and what
    it was built from (to split it, :meth:`halves`)."""

    tenant: str | None
    body: bytes
    samples: int
    series: tuple[Series, ...] = ()
    metadata: tuple[Metadata, ...] = ()

    @classmethod
    def of(cls, tenant: str | None, series: list[Series], metadata: list[Metadata]
           ) -> Request:
        return cls(tenant, body(series, metadata), sum(len(s.samples) for s in series),
                   tuple(series), tuple(metadata))

    def halves(self) -> tuple[Request, Request]:
        """The request's samples in two requests of about half each, every series' samples in
        their order. Prometheus refuses a whole request for one bad sample (it rolls back
        what it appended: 2.42, measured); sent apart, the halves without it get in."""
        points = [(s.labels, p) for s in self.series for p in s.samples]
        middle = len(points) // 2

        def request(part: list[tuple[Mapping[str, str], tuple[int, float]]],
                    metadata: tuple[Metadata, ...]) -> Request:
            grouped: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]] = {}
            for labels, point in part:
                grouped.setdefault(tuple(labels.items()), []).append(point)
            return Request.of(self.tenant, [Series(dict(k), v) for k, v in grouped.items()],
                              list(metadata))

        return request(points[:middle], self.metadata), request(points[middle:], ())


# Requests by outcome: accepted (2xx), refused for good (any other 4xx), retried (a 5xx, a 429
# or a failed connection, sent again after a backoff).
REQUEST_SENT, REQUEST_REFUSED, REQUEST_RETRIED = "sent", "refused", "retried"
REQUEST_OUTCOMES = (REQUEST_SENT, REQUEST_REFUSED, REQUEST_RETRIED)


def _no_requests() -> dict[str, int]:
    return dict.fromkeys(REQUEST_OUTCOMES, 0)


@dataclass
class Tally:
    """One endpoint's delivery: samples ``sent``, ``refused`` per (reason, tenant),
    ``skipped`` per reason, gauge ``corrections`` per rule (not sent); ``requests`` per
    outcome (:data:`REQUEST_OUTCOMES`), the Unix time of the ``last_success`` (0: none yet),
    and the ``lag``: records of the metrics topic the endpoint has not committed.

    Its endpoint's thread counts while ``/metrics`` reads from the HTTP server's threads:
    every change goes through a method that holds the lock, and readers take a
    :meth:`snapshot` (a dict copied while another thread adds a key would fail)."""

    sent: int = 0
    refused: dict[tuple[str, str], int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    corrections: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=_no_requests)
    last_success: float = 0.0
    lag: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def skip(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    def correct(self, rule: str) -> None:
        """A gauge correction of ``rule``, skipped (reason :data:`CORRECTED`) and counted."""
        with self._lock:
            self.skipped[CORRECTED] = self.skipped.get(CORRECTED, 0) + 1
            self.corrections[rule] = self.corrections.get(rule, 0) + 1

    def refuse(self, reason: str, tenant: str | None, n: int) -> None:
        with self._lock:
            key = (reason, tenant or "")
            self.refused[key] = self.refused.get(key, 0) + n

    def accept(self, n: int) -> None:
        with self._lock:
            self.sent += n

    def answered(self, status: int, at: float) -> None:
        """A request's final answer (not a retried one), at Unix time ``at``."""
        with self._lock:
            if 200 <= status < 300:
                self.requests[REQUEST_SENT] += 1
                self.last_success = at
            else:
                self.requests[REQUEST_REFUSED] += 1

    def retried(self) -> None:
        with self._lock:
            self.requests[REQUEST_RETRIED] += 1

    def set_lag(self, records: int) -> None:
        with self._lock:
            self.lag = records

    def snapshot(self) -> Tally:
        """A copy, consistent: no change lands while it is taken."""
        with self._lock:
            return Tally(self.sent, dict(self.refused), dict(self.skipped),
                         dict(self.corrections), dict(self.requests), self.last_success,
                         self.lag)


def refusal_reason(status: int, text: str) -> str:
    """A short, bounded reason for a receiver's final answer (Prometheus's and Mimir's
    texts), for a counter's label."""
    lowered = text.lower()
    for needle, reason in (("duplicate sample", "duplicate_timestamp"),
                           ("out of order", "out_of_order"),
                           ("out-of-order", "out_of_order"),
                           ("too old", "too_old"), ("out of bounds", "too_old"),
                           ("sample-timestamp-too-old", "too_old"),
                           ("too far in the future", "too_new")):
        if needle in lowered:
            return reason
    return f"http_{status}" if status else "not_sent"


def metadata(rules: Iterable[Rule]) -> dict[str, Metadata]:
    """Each rule's metric family metadata by rule id: TYPE (a histogram rule's family is its
    name, of type histogram), HELP from its ``description``, UNIT from its ``unit``."""
    return {r.id: Metadata(r.name, "histogram" if r.aggregation == Aggregation.HISTOGRAM
                           else r.kind.value, r.description, r.unit) for r in rules}


class Outbox:
    """Samples gathered for one endpoint until :meth:`requests` drains them; ``families``:
    the metadata sent with the samples of each rule (:func:`metadata`)."""

    def __init__(self, route: Route, max_samples: int, tally: Tally,
                 families: Mapping[str, Metadata] | None = None) -> None:
        self.route = route
        self.max_samples = max_samples
        self.tally = tally
        self.families = families or {}
        self._meta: dict[Any, dict[str, Metadata]] = {}
        # tenant → series labels → {timestamp: value}: a record read twice (a replay) is one
        # sample; of two values at one timestamp the later record's stands.
        self._series: dict[Any, dict[tuple[tuple[str, str], ...], dict[int, float]]] = {}

    def add(self, value: bytes | None, record_ms: int | None, mark: str | None) -> None:
        """One record of the metrics topic, with its :data:`MARK_HEADER` mark."""
        try:
            sample = orjson.loads(value or b"")
            labels = {**sample["labels"], "__name__": sample["name"]}
            at = stamp(sample, record_ms, mark)
            number = sample_value(sample["value"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            self.tally.skip(MALFORMED)
            return
        # The endpoint's accounts first: a sample it never takes is neither sent nor one of its
        # corrections.
        tenant = self.route.tenant(sample.get("account"))
        if tenant is _SKIPPED:
            self.tally.skip(OTHER_ACCOUNT if sample.get("account") is not None else NO_TENANT)
            return
        if at is None:
            if mark == CORRECTION:
                self.tally.correct(str(sample.get("rule")))
            else:
                self.tally.skip(NOT_FINAL)
            return
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        family = self.families.get(str(sample.get("rule")))
        if family is not None:
            self._meta.setdefault(tenant, {})[family.name] = family
        points = self._series.setdefault(tenant, {}).setdefault(key, {})
        if mark == NEW and sample.get("kind") != "gauge":
            points.setdefault(at - 1, 0.0)
        points[at] = number

    def requests(self) -> list[Request]:
        """The gathered samples as requests (then forgotten): per tenant, series in label
        order, each series' samples oldest first, at most ``max_samples`` per request (a
        series split across requests keeps its order: they are sent in this order); the
        metadata of the tenant's metric families with its first request."""
        out: list[Request] = []
        for tenant in sorted(self._series, key=lambda t: (t is not None, t or "")):
            chunk: list[Series] = []
            size = 0
            meta = [m for _, m in sorted(self._meta.get(tenant, {}).items())]
            for labels, points in sorted(self._series[tenant].items()):
                ordered = sorted(points.items())
                while ordered:
                    room = self.max_samples - size
                    chunk.append(Series(dict(labels), ordered[:room]))
                    size += len(ordered[:room])
                    ordered = ordered[room:]
                    if size >= self.max_samples:
                        out.append(Request.of(tenant, chunk, meta))
                        chunk, size, meta = [], 0, []
            if chunk:
                out.append(Request.of(tenant, chunk, meta))
        self._series.clear()
        self._meta.clear()
        return out


def splittable(request: Request, status: int) -> bool:
    """A final refusal (a 4xx but 429) of a request of more than one sample: sent again as two
    halves (:meth:`Request.halves`), down to the samples refused alone — so a bad sample costs
    at most about log2(samples) more requests, and the others of its request still get in."""
    return 400 <= status < 500 and status != 429 and request.samples > 1


def settle(tally: Tally, request: Request, status: int, text: str) -> None:
    """Count a request's samples by the receiver's final answer."""
    if 200 <= status < 300:
        tally.accept(request.samples)
    else:
        tally.refuse(refusal_reason(status, text), request.tenant, request.samples)


def summary(tally: Tally) -> str:
    """One line: what was sent, refused and skipped."""
    tally = tally.snapshot()
    parts = [f"sent {tally.sent:,} samples"]
    if tally.refused:
        parts.append(f"refused {sum(tally.refused.values()):,} (" + ", ".join(
            f"{reason}{' for ' + tenant if tenant else ''}: {n:,}"
            for (reason, tenant), n in sorted(tally.refused.items())) + ")")
    if tally.skipped:
        parts.append(f"skipped {sum(tally.skipped.values()):,} (" + ", ".join(
            f"{reason}: {n:,}" for reason, n in sorted(tally.skipped.items())) + ")")
    return "; ".join(parts)
