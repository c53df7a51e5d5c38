"""Samples of the metrics topic → remote-write requests, stamped by l2m's time-stamping
policy (docs/prometheus.md), and the tally of what became of them.

Input: records of the metrics topic — the sample's JSON (SPEC §4), the record's timestamp
(ms) and its :data:`MARK_HEADER` and :data:`TIME_HEADER` headers, read back and checked by
the record's one definition (:func:`l2m.engine.samples.read_sample`) — and one endpoint's
:class:`Route`. Output:
:class:`Request` bodies, one tenant each, at most ``max_samples`` samples each (a native
histogram weighing more by its buckets: :func:`weight`), every series' samples in strictly
increasing time order; a :class:`Tally` of the samples sent, refused (per
reason and tenant) and skipped (per reason; gauge corrections per rule), which
:mod:`l2m.runtime.deliver` completes with its requests' outcomes and its lag.

The policy, so that Prometheus accepts every sample and no timestamp is ever written twice
with two values:

* **counters** (histogram families and native histograms of counter rules too) are stamped
  with their record's timestamp: the micro-batch that computed the value (the state stage's
  batch time, the same when a batch is replayed), so the value changes only with a new
  timestamp, and a family's
  ``_bucket``/``_sum``/``_count`` share it. The sample's own ``timestamp`` (the largest event
  time counted) stands still while late logs raise the value: Prometheus refuses that as a
  duplicate sample. A series' first sample (marked :data:`NEW`) is preceded by a 0 one
  millisecond earlier (a native histogram's by the empty histogram of its schema), so that
  ``increase()`` counts its first value, and a series that starts again (after its TTL)
  reads as a counter reset.
* **gauges** are stamped with their window's start and sent only when final: the state stage
  publishes a window once the newest event time has passed its end by the publish delay,
  every series of it in records marked :data:`FINAL`; the updates it still takes after that
  (marked :data:`CORRECTION`) stay on the topic for consumers that accept overwrites, and
  are counted here per rule instead of sent.

A native histogram's record (format 2) becomes a histogram of ``TimeSeries.histograms``
(reset hint unknown for counters, gauge for gauges), checked as a receiver checks it first:
Prometheus 2.42 answers a malformed one 500, which would be retried forever."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from l2m.engine.samples import (
    CORRECTION,
    FINAL,
    INVALID_LABEL,
    MALFORMED,
    MARK_HEADER,
    MAX_MS,
    MIN_MS,
    NEW,
    TIME_HEADER,
    read_sample,
)
from l2m.errors import RemoteWriteError
from l2m.remotewrite.client import valid_tenant
from l2m.remotewrite.encode import (
    Metadata,
    Series,
    WireHistogram,
    body,
    check_histogram,
    wire_histogram,
)
from l2m.rules.model import Rule

__all__ = ["CORRECTION", "FINAL", "HISTOGRAMS_REFUSED", "INVALID_LABEL", "MALFORMED",
           "MARK_HEADER", "NEW", "REQUEST_OUTCOMES", "SKIP_REASONS", "TIME_HEADER", "Outbox",
           "Request", "Route", "Tally"]
# Skipped samples, by reason (docs/prometheus.md lists them; keep the names stable: alerts,
# dashboards and tests read them).
NOT_FINAL = "not_final"  # a gauge window's value before its window is published
CORRECTED = "correction"  # a gauge window's update after it was published
# A record that is not an l2m sample (MALFORMED), or one with a label name Prometheus refuses
# (INVALID_LABEL): the sample record's own reasons (l2m.engine.samples.read_sample).
# A native histogram that reads back as one but that a receiver would refuse (its count not
# what its buckets hold, its sum not NaN): Prometheus 2.42 answers 500 and a sender retries
# that forever, so it is left out before any request holds it (encode.check_histogram).
INVALID_HISTOGRAM = "invalid_histogram"
INVALID_TENANT = "invalid_tenant"  # a tenant an HTTP header cannot carry (visible ASCII only)
# The label the endpoint adds to tell accounts apart in one tenant is already a label of the
# sample: adding it would overwrite the sample's own, dropping it would merge two accounts.
ACCOUNT_LABEL_TAKEN = "account_label_taken"
# A counter in a record stamped by the broker (LogAppendTime) without l2m's time header: its
# time is when the broker appended it, which a replayed batch would move (docs/prometheus.md).
LOG_APPEND_TIME = "log_append_time"
# A sample stamped more than FUTURE_MS past the wall clock. A TSDB that took it would measure
# its out-of-order window from it (Prometheus: from the newest sample of the whole database)
# and refuse every later sample of every tenant as too old; the job itself never writes one
# (logs more than max_future_skew ahead are dead-lettered), so it comes from elsewhere.
FUTURE = "future"
# Mimir's creation grace period (-validation.create-grace-period), the same bound.
FUTURE_MS = 10 * 60_000
ERROR = "error"  # a record whose building raised an unexpected error twice (l2m.runtime.deliver)
OTHER_ACCOUNT = "other_account"  # an account this endpoint does not take
NO_TENANT = "no_tenant"  # no account, and no default tenant for such samples
# A native histogram of a request the receiver refused because it takes none (Prometheus
# without --enable-feature=native-histograms: 500 "native histograms are disabled"), or one
# left out without trying while that endpoint's refusal is recent (l2m.runtime.deliver): the
# request's floats are sent without it.
HISTOGRAMS_REFUSED = "histograms_refused"
SKIP_REASONS = (NOT_FINAL, CORRECTED, MALFORMED, INVALID_LABEL, INVALID_HISTOGRAM,
                INVALID_TENANT, ACCOUNT_LABEL_TAKEN, LOG_APPEND_TIME, FUTURE, ERROR,
                OTHER_ACCOUNT, NO_TENANT, HISTOGRAMS_REFUSED)
# What a native histogram weighs in a request's budget of max_samples: 1 + its buckets
# (deltas on the wire) // BUCKETS_PER_SAMPLE. Measured (tests/unit/remotewrite/
# test_remotewrite_weights.py): a float sample in its own series, labels included, is ~99
# bytes of protobuf; a histogram ~114 bytes plus ~2 per bucket when its buckets are
# contiguous, ~5 when every bucket is its own span (counts up to 5,000) — so 16 buckets weigh
# at most about one float sample, and a request of histograms of 1,000 buckets (the most a
# rule keeps) stays within twice the bytes of one of floats instead of ~50 times them.
BUCKETS_PER_SAMPLE = 16
_SKIPPED = object()
# A series' point: a float sample's value, or a native histogram (its own timestamp the
# point's).
Value = float | WireHistogram
Point = tuple[int, Value]
# A native histogram's reset hint by the sample's kind: a counter's resets are found by the
# reader (a count that went down), a gauge histogram has none.
_RESET_HINTS = {"counter": "unknown", "gauge": "gauge"}


@dataclass(frozen=True)
class Route:
    """Which samples an endpoint takes and under which tenant: ``accounts`` (None: all);
    the tenant of an account is ``tenants[account]``, else the account itself; a sample
    without an account goes to ``default_tenant`` (None with ``tenant_header`` set: skipped,
    since a multi-tenant receiver would put it in whatever tenant it defaults to).

    Accounts that share a tenant are told apart by ``account_label`` (None: never added):
    every account's sample gets it when there is no tenant header and ``shared`` is None,
    else only those whose tenant is in ``shared`` (:func:`l2m.runtime.deliver.route`)."""

    accounts: frozenset[str] | None = None
    tenants: Mapping[str, str] = field(default_factory=dict)
    default_tenant: str | None = None
    tenant_header: bool = True
    account_label: str | None = None
    shared: frozenset[str] | None = frozenset()

    def tenant(self, account: str | None) -> str | object | None:
        """The tenant, None (no tenant header) or :data:`_SKIPPED`'s marker."""
        if account is None:
            if self.default_tenant is None and self.tenant_header:
                return _SKIPPED
            return self.default_tenant
        if self.accounts is not None and account not in self.accounts:
            return _SKIPPED
        return self.tenants.get(account, account) if self.tenant_header else None

    def labelled(self, tenant: str | None) -> bool:
        """Whether an account's sample for ``tenant`` carries its account as a label."""
        if self.account_label is None:
            return False
        if self.shared is None:
            return True
        return tenant in self.shared


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
        return cls(tenant, body(series, metadata),
                   sum(len(s.samples) + len(s.histograms) for s in series), tuple(series),
                   tuple(metadata))

    @property
    def histograms(self) -> int:
        """How many native histograms the request holds."""
        return sum(len(s.histograms) for s in self.series)

    def floats(self) -> Request:
        """The request without its native histograms: its float samples and its metadata
        (for a receiver that takes no histograms; the metadata kept even when no sample is
        left: the families of floats sent later in the poll need it)."""
        kept = [Series(s.labels, s.samples) for s in self.series if s.samples]
        return Request.of(self.tenant, kept, list(self.metadata))

    @property
    def mixed(self) -> bool:
        """Whether the request holds both float samples and native histograms."""
        return any(s.samples for s in self.series) and any(s.histograms for s in self.series)

    def _points(self) -> list[tuple[Mapping[str, str], Point]]:
        """Every sample and native histogram of the request with its series' labels, each
        series' samples before its histograms (each kind in time order)."""
        out: list[tuple[Mapping[str, str], Point]] = []
        for s in self.series:
            out += [(s.labels, p) for p in s.samples]
            out += [(s.labels, (h.timestamp, h)) for h in s.histograms]
        return out

    def halves(self) -> tuple[Request, Request]:
        """The request's samples in two requests of about half each, every series' samples in
        their order. Prometheus refuses a whole request for one bad sample (it rolls back
        what it appended: 2.42, measured); sent apart, the halves without it get in. A native
        histogram counts as a sample."""
        points = self._points()
        middle = len(points) // 2
        return (self._of(points[:middle], self.metadata), self._of(points[middle:], ()))

    def by_time(self) -> tuple[Request, Request]:
        """The request's samples split in time: the older half and the newer half, no sample
        of the older newer than any of the newer (the metadata with the newer, sent first).
        For a refusal as too old: the TSDB's limit is a time, so when the newer half is
        refused as too old, every sample of the older half is too old as well."""
        points = sorted(self._points(), key=lambda lp: lp[1][0])
        middle = len(points) // 2
        return (self._of(points[:middle], ()), self._of(points[middle:], self.metadata))

    def _of(self, part: list[tuple[Mapping[str, str], Point]],
            metadata: tuple[Metadata, ...]) -> Request:
        grouped: dict[tuple[tuple[str, str], ...], list[Point]] = {}
        for labels, point in part:
            grouped.setdefault(tuple(labels.items()), []).append(point)
        return Request.of(self.tenant, [series(dict(k), v) for k, v in grouped.items()],
                          list(metadata))


def weight(value: Value) -> int:
    """What a point weighs in a request's budget of ``max_samples``: a float sample 1, a
    native histogram 1 + its buckets // :data:`BUCKETS_PER_SAMPLE`."""
    if isinstance(value, WireHistogram):
        buckets = len(value.positive_deltas) + len(value.negative_deltas)
        return 1 + buckets // BUCKETS_PER_SAMPLE
    return 1


def series(labels: Mapping[str, str], points: Iterable[Point]) -> Series:
    """One series of a request from its points in time order: float values as samples,
    native histograms as histograms."""
    samples: list[tuple[int, float]] = []
    histograms: list[WireHistogram] = []
    for at, value in points:
        if isinstance(value, WireHistogram):
            histograms.append(value)
        else:
            samples.append((at, value))
    return Series(labels, samples, histograms)


# Requests by outcome: accepted (2xx), refused for good (any other 4xx), retried (a 5xx, a 429
# or a failed connection, sent again after a backoff), auth_failed (answered 401 or 403: the
# receiver refuses l2m's credentials; retried with backoff unless the endpoint's
# auth_failures is refuse, when the request also counts as refused).
REQUEST_SENT, REQUEST_REFUSED, REQUEST_RETRIED = "sent", "refused", "retried"
REQUEST_AUTH_FAILED = "auth_failed"
REQUEST_OUTCOMES = (REQUEST_SENT, REQUEST_REFUSED, REQUEST_RETRIED, REQUEST_AUTH_FAILED)


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
    # Unexpected errors of the endpoint's loop, by exception type (each restarts the loop).
    errors: dict[str, int] = field(default_factory=dict)
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

    def auth_failed(self) -> None:
        """An answer 401 or 403 (each attempt's)."""
        with self._lock:
            self.requests[REQUEST_AUTH_FAILED] += 1

    def failed(self, error: str) -> None:
        """An unexpected error of the endpoint's loop, by its type's name."""
        with self._lock:
            self.errors[error] = self.errors.get(error, 0) + 1

    def merge(self, other: Tally) -> None:
        """Add ``other``'s samples sent, refused and skipped, corrections and requests (a
        poll's scratch tally, kept only once the poll was delivered: a poll delivered again
        after an error counts once); its ``last_success`` if later."""
        other = other.snapshot()
        with self._lock:
            self.sent += other.sent
            self.last_success = max(self.last_success, other.last_success)
            for key, n in other.refused.items():
                self.refused[key] = self.refused.get(key, 0) + n
            for outcome, n in other.requests.items():
                self.requests[outcome] = self.requests.get(outcome, 0) + n
            for reason, n in other.skipped.items():
                self.skipped[reason] = self.skipped.get(reason, 0) + n
            for rule, n in other.corrections.items():
                self.corrections[rule] = self.corrections.get(rule, 0) + n

    def set_lag(self, records: int) -> None:
        with self._lock:
            self.lag = records

    def snapshot(self) -> Tally:
        """A copy, consistent: no change lands while it is taken."""
        with self._lock:
            return Tally(self.sent, dict(self.refused), dict(self.skipped),
                         dict(self.corrections), dict(self.requests), self.last_success,
                         self.lag, dict(self.errors))


TOO_OLD = "too_old"


def refusal_reason(status: int, text: str) -> str:
    """A short, bounded reason for a receiver's final answer (Prometheus's and Mimir's
    texts), for a counter's label."""
    lowered = text.lower()
    for needle, reason in (("duplicate sample", "duplicate_timestamp"),
                           ("out of order", "out_of_order"),
                           ("out-of-order", "out_of_order"),
                           ("too old", TOO_OLD), ("out of bounds", TOO_OLD),
                           ("sample-timestamp-too-old", TOO_OLD),
                           ("too far in the future", "too_new")):
        if needle in lowered:
            return reason
    return f"http_{status}" if status else "not_sent"


def metadata(rules: Iterable[Rule]) -> dict[str, Metadata]:
    """Each rule's metric family metadata by rule id: TYPE, HELP from its ``description``,
    UNIT from its ``unit``. A histogram rule's family is its name (classic and native
    together: one family), of type histogram — gaugehistogram for a gauge rule's native
    histograms (a classic one alone stays histogram, as before native histograms); a
    quantiles rule's is a gauge."""
    return {r.id: Metadata(r.name, r.metric_type, r.description, r.unit) for r in rules}


class Outbox:
    """Samples gathered for one endpoint until :meth:`requests` drains them; ``families``:
    the metadata sent with the samples of each rule (:func:`metadata`)."""

    def __init__(self, route: Route, max_samples: int, tally: Tally,
                 families: Mapping[str, Metadata] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.route = route
        self._clock = clock  # Unix seconds: what FUTURE_MS is measured from
        self.max_samples = max_samples
        self.tally = tally
        self.families = families or {}
        self._meta: dict[Any, dict[str, Metadata]] = {}
        # tenant → series labels → {timestamp: value or histogram}: a record read twice (a
        # replay) is one sample; of two values at one timestamp the later record's stands.
        self._series: dict[Any, dict[tuple[tuple[str, str], ...], dict[int, Value]]] = {}

    def add(self, value: bytes | None, record_ms: int | None, mark: bytes | str | None,
            time: bytes | str | None = None, appended: bool = False) -> None:
        """One record of the metrics topic: its value, its timestamp (ms; None: none), its
        :data:`MARK_HEADER` and :data:`TIME_HEADER` headers, and whether its timestamp is
        the broker's (LogAppendTime). Never raises: a record that cannot be sent is counted
        by reason (:data:`SKIP_REASONS`) and left out."""
        sample = read_sample(value, mark, time)
        if isinstance(sample, str):
            self.tally.skip(sample)
            return
        account = sample.account
        # The endpoint's accounts first: a sample it never takes is neither sent nor one of its
        # corrections.
        tenant = self.route.tenant(account)
        if tenant is _SKIPPED:
            self.tally.skip(OTHER_ACCOUNT if account is not None else NO_TENANT)
            return
        if isinstance(tenant, str) and not valid_tenant(tenant):
            self.tally.skip(INVALID_TENANT)
            return
        if sample.kind == "gauge":
            at = sample.timestamp if sample.mark == FINAL else None
            if at is None:
                if sample.mark == CORRECTION:
                    self.tally.correct(sample.rule)
                else:
                    self.tally.skip(NOT_FINAL)
                return
        else:
            at = sample.batch_ms
            if at is None:
                if appended:
                    self.tally.skip(LOG_APPEND_TIME)
                    return
                at = record_ms if record_ms is not None else sample.timestamp
            if not MIN_MS <= at <= MAX_MS:
                self.tally.skip(MALFORMED)
                return
        if at > self._clock() * 1000 + FUTURE_MS:
            self.tally.skip(FUTURE)
            return
        point: Value = sample.value
        if sample.histogram is not None:
            point = wire_histogram(sample.histogram, at, _RESET_HINTS[sample.kind])
            try:
                check_histogram(sample.name, point)
            except RemoteWriteError:
                self.tally.skip(INVALID_HISTOGRAM)
                return
        # An empty value is no label to Prometheus (the encoder drops it): dropped before the
        # series key, so {"user": ""} and {} are one series (the later record's value
        # stands, as in a replay), and an empty account label does not count as taken.
        labels: dict[str, str] = {k: v for k, v in sample.labels.items() if v}
        if account is not None and self.route.labelled(tenant if isinstance(tenant, str)
                                                       else None):
            name = self.route.account_label
            assert name is not None  # labelled() says so
            if name in labels:
                self.tally.skip(ACCOUNT_LABEL_TAKEN)
                return
            labels[name] = account
        labels["__name__"] = sample.name
        key = tuple(sorted(labels.items()))
        family = self.families.get(sample.rule)
        if family is not None:
            self._meta.setdefault(tenant, {})[family.name] = family
        points = self._series.setdefault(tenant, {}).setdefault(key, {})
        if sample.mark == NEW and sample.kind != "gauge":
            # A native histogram's 0 is the empty histogram of its schema and zero bucket.
            points.setdefault(at - 1, 0.0 if sample.histogram is None else WireHistogram(
                at - 1, 0, 0.0, sample.histogram.schema, sample.histogram.zero_threshold))
        points[at] = point

    def requests(self) -> list[Request]:
        """The gathered samples as requests (then forgotten): per tenant, series in label
        order, each series' samples oldest first, requests of at most ``max_samples``
        weighed by :func:`weight` (a native histogram by its buckets; one heavier than that
        alone in its request); a series split across requests keeps its order: they are
        sent in this order; the metadata of the tenant's metric families with its first
        request."""
        out: list[Request] = []
        for tenant in sorted(self._series, key=lambda t: (t is not None, t or "")):
            chunk: list[Series] = []
            size = 0
            meta = [m for _, m in sorted(self._meta.get(tenant, {}).items())]
            for labels, points in sorted(self._series[tenant].items()):
                taken: list[Point] = []
                for point in sorted(points.items()):
                    heavy = weight(point[1])
                    if size and size + heavy > self.max_samples:
                        if taken:
                            chunk.append(series(dict(labels), taken))
                            taken = []
                        out.append(Request.of(tenant, chunk, meta))
                        chunk, size, meta = [], 0, []
                    taken.append(point)
                    size += heavy
                if taken:
                    chunk.append(series(dict(labels), taken))
            if chunk:
                out.append(Request.of(tenant, chunk, meta))
        self._series.clear()
        self._meta.clear()
        return out


# Answers that may be caused by some of a request's samples: the request is sent again in
# parts (400: Prometheus, Mimir, Cortex; 409: Thanos receive's conflict; 422). Any other final
# answer (401, 403, 404, 413, …) is about the request or the endpoint, whatever it holds:
# split, it would be refused again, part by part.
SAMPLE_STATUSES = frozenset({400, 409, 422})


def splittable(request: Request, status: int, text: str = "") -> bool:
    """A final refusal that some samples may have caused, of a request of more than one
    sample: sent again in two parts (:meth:`Request.halves`, or :meth:`Request.by_time` for
    a refusal as too old), down to the samples refused alone — so a bad sample costs at most
    about log2(samples) more requests, and the others of its request still get in."""
    if request.samples <= 1:
        return False
    return status in SAMPLE_STATUSES or (status >= 500 and refusal_reason(status, text)
                                         == TOO_OLD)


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
    if tally.requests.get(REQUEST_AUTH_FAILED):
        parts.append(f"credentials refused {tally.requests[REQUEST_AUTH_FAILED]:,} times")
    if tally.errors:
        parts.append(f"errors {sum(tally.errors.values()):,} (" + ", ".join(
            f"{error}: {n:,}" for error, n in sorted(tally.errors.items())) + ")")
    return "; ".join(parts)
