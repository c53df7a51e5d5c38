"""``l2m deliver``: the metrics topic → every configured Prometheus remote-write endpoint
(SPEC §8, docs/prometheus.md).

Input: the job configuration — the metrics side's Kafka settings (``kafka`` with
``sink_kafka``), ``topics.metrics`` and ``remote_write``. Output: remote-write requests
(:mod:`l2m.remotewrite.outbox`: stamped by l2m's time-stamping policy, one tenant each) and,
per endpoint, the offsets of the consumer group ``<group_id>-<endpoint>``, committed once
every request of a poll has had its final answer — sent, or refused for good (never sent
again as it was: a refusal its samples may have caused, 400/409/422, is split in halves down
to the samples refused alone, since Prometheus refuses a whole request for one bad sample,
and one as too old is split in time; those are counted per reason and tenant). A crash or
kill -9 re-reads at most the uncommitted poll and re-sends its samples identically: same
timestamps, same values, which a receiver accepts again.

It runs beside the aggregation, not inside it: a receiver that is slow, down or refusing
holds back only its own endpoint — its requests are retried with backoff for as long as the
outage lasts (spec 1.0), or its credentials are refused (401/403) — never ``l2m run`` nor
the other endpoints (one thread and one consumer each). A receiver that takes no native
histograms (500 "native histograms are disabled") gets such a request again without them,
skipped and counted (``histograms_refused``), and none for :data:`HISTOGRAMS_PAUSE_S`.
Nothing a record holds stops it (it is skipped and counted), and an unexpected error
restarts only its endpoint's loop, which then builds that poll's requests record by record,
skipping a record whose building fails again; an error while sending (the endpoint's, not a
record's) skips nothing. Partitions are assigned, not subscribed (no group rebalancing; the
group only keeps the offsets): run one ``l2m deliver`` per configuration.

With ``monitoring.port`` in the job file it serves ``/metrics``, ``/healthz`` and ``/readyz``
as ``l2m run`` does (:mod:`l2m.runtime.endpoint`; the metrics:
:mod:`l2m.runtime.delivermetrics`)."""

from __future__ import annotations

import base64
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from l2m.config.decode import Invalid
from l2m.config.job import JobConfig, RemoteWriteEndpoint, remote_write_url
from l2m.engine.samples import read_headers
from l2m.errors import ConfigError, KafkaUnavailableError, RemoteWriteError
from l2m.remotewrite.client import (
    AUTH_REFUSE,
    AUTH_STATUSES,
    Endpoint,
    Sender,
    histograms_disabled,
    valid_header_name,
    valid_header_value,
    valid_tenant,
)
from l2m.remotewrite.encode import Metadata
from l2m.remotewrite.outbox import (
    ERROR,
    HISTOGRAMS_REFUSED,
    LOG_APPEND_TIME,
    TOO_OLD,
    Outbox,
    Request,
    Route,
    Tally,
    metadata,
    refusal_reason,
    settle,
    splittable,
    summary,
)
from l2m.rules.model import Rule
from l2m.runtime.delivermetrics import DeliveryTelemetry
from l2m.runtime.endpoint import Endpoint as MonitoringEndpoint

# After a receiver refused native histograms (histograms_disabled), the endpoint's histograms
# are skipped without trying for this long, then tried again: long enough that a receiver
# without the feature costs one refused request per 10 minutes, not one per poll; short enough
# that turning the flag on (a Prometheus restart) resumes delivery without restarting l2m.
HISTOGRAMS_PAUSE_S = 600.0
POLL_RECORDS = 10_000  # records per poll: a poll's samples are sent before its offsets commit
PROGRESS_S = 10.0  # a progress line per endpoint at most this often, when something changed
# While a request is retried the lag is refreshed at most this often (each poll refreshes it).
LAG_REFRESH_S = 1.0
# A partition's end asked of the broker, when the consumer has fetched none yet: at most this.
WATERMARK_TIMEOUT_S = 5.0
# An endpoint's loop that has not moved for this long (plus twice its request timeout: one
# attempt may take that) is stuck: /healthz says so.
STALL_S = 60.0
# An endpoint's loop that failed unexpectedly starts again after this backoff, doubling up to
# the most (it re-reads from its last commit; the poll that failed is then built record by
# record, so that a record whose building fails again is skipped instead of failing the loop
# forever; an error while sending skips nothing: it is the endpoint's).
RESTART_MIN_S, RESTART_MAX_S = 1.0, 60.0
# Once (a run that must end): an endpoint gives up after this many errors in a row without a
# poll delivered between them, and deliver() raises the last.
ONCE_ATTEMPTS = 3
# Once: a request whose credentials are refused (401/403) this many times in a row, under
# auth_failures: retry, ends the endpoint with an error (about 4 s of backoff: a token file
# being rotated is read again before each attempt), nothing committed.
ONCE_AUTH_ATTEMPTS = 8


class CredentialsRefused(RemoteWriteError):
    """Once: the receiver kept refusing l2m's credentials; the endpoint ends with it."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def endpoint_name(cfg: RemoteWriteEndpoint) -> str:
    """The endpoint's name: as configured, else its URL's host and port as written (never
    its user info: the name is a label, a consumer group and part of every line printed).
    The host keeps its case — the name before user info was refused, so an existing
    deployment's consumer group ``<group_id>-<name>`` stays the same."""
    if cfg.name:
        return cfg.name
    return urllib.parse.urlsplit(cfg.url).netloc.rpartition("@")[2] or "endpoint"


def _secret(what: str, file: str | None, env: str | None, name: str,
            header: bool = True) -> str | None:
    """A credential from its file or environment variable; with ``header``, one an HTTP
    header can carry as it is (a problem names the file or the variable, never the value)."""
    if file is not None:
        try:
            value = Path(file).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise ConfigError(f"remote_write endpoint {name}: {what} file {file}: cannot "
                              f"read ({reason})") from None
        where = f"file {file}"
    elif env is not None:
        value = os.environ.get(env, "").strip()
        if not value:
            raise ConfigError(f"remote_write endpoint {name}: {what} environment variable "
                              f"{env} is not set")
        where = f"environment variable {env}"
    else:
        return None
    if header and not valid_header_value(value):
        raise ConfigError(f"remote_write endpoint {name}: {what} {where} holds a character an "
                          "HTTP header cannot carry (a line break, a control character or "
                          "non-ASCII): the value is not shown")
    return value


def credentials(cfg: RemoteWriteEndpoint) -> dict[str, str]:
    """The endpoint's headers, credentials read now from their file or environment variable
    (a :class:`ConfigError` naming what is missing or unusable, never a value)."""
    name = endpoint_name(cfg)
    headers = dict(cfg.headers)
    for header, value in headers.items():
        if not valid_header_name(header):
            raise ConfigError(f"remote_write endpoint {name}: headers: a header name that is "
                              "not an HTTP header name")
        if not valid_header_value(value):
            raise ConfigError(f"remote_write endpoint {name}: headers: the value of {header} "
                              "holds a character an HTTP header cannot carry (a line break, a "
                              "control character or non-ASCII): the value is not shown")
    token = _secret("bearer token", cfg.bearer_token_file, cfg.bearer_token_env, name)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if cfg.basic_auth is not None:
        # Base64: any password fits a header.
        password = _secret("password", cfg.basic_auth.password_file,
                           cfg.basic_auth.password_env, name, header=False) or ""
        pair = f"{cfg.basic_auth.username}:{password}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    return headers


def client_endpoint(cfg: RemoteWriteEndpoint) -> Endpoint:
    """The client's :class:`~l2m.remotewrite.client.Endpoint`, its credentials read now from
    their file or environment variable (a :class:`ConfigError` naming what is missing)."""
    name = endpoint_name(cfg)
    if not cfg.url:
        raise ConfigError(f"remote_write endpoint {name}: url is required")
    try:
        remote_write_url(cfg.url)  # an endpoint built in code is checked as a file's is
    except Invalid as exc:
        raise ConfigError(f"remote_write endpoint {name}: url: {exc}") from None
    if cfg.tenant_header is not None and not valid_header_name(cfg.tenant_header):
        raise ConfigError(f"remote_write endpoint {name}: tenant_header "
                          f"{cfg.tenant_header!r} is not an HTTP header name")
    for tenant in (*cfg.tenants.values(), *([cfg.default_tenant] if cfg.default_tenant else [])):
        if not valid_tenant(tenant):
            raise ConfigError(f"remote_write endpoint {name}: tenant {tenant!r} cannot go in "
                              "an HTTP header (visible ASCII only, no spaces)")
    return Endpoint(cfg.url, credentials(cfg), cfg.tenant_header, cfg.timeout_ms / 1000,
                    cfg.tls.ca_file, cfg.tls.cert_file, cfg.tls.key_file,
                    cfg.tls.insecure_skip_verify, auth_failures=cfg.auth_failures)


# In shared_tenants' lists: whatever account is named like the tenant (without an
# ``accounts:`` list the endpoint takes every account, and they cannot be listed here).
UNLISTED = "any account named "


def shared_tenants(cfg: RemoteWriteEndpoint) -> dict[str, list[str]]:
    """The tenants the configuration may send two accounts (or an account and the samples
    without one) to, with those accounts: two keys of ``tenants`` mapped to one tenant, a key
    mapped to the tenant of an account of ``accounts`` (itself), ``default_tenant`` the
    tenant of an account. Without an ``accounts`` list every account is taken and none can
    be enumerated, so a value of ``tenants`` (or ``default_tenant``) that is not itself a key
    of ``tenants`` is also the tenant of whatever account bears its name (:data:`UNLISTED`
    in the list): such a tenant is shared as soon as one key maps to it."""
    allowed = set(cfg.accounts) or None
    by_tenant: dict[str, set[str]] = {}
    for account, tenant in cfg.tenants.items():
        if allowed is None or account in allowed:
            by_tenant.setdefault(tenant, set()).add(account)
    for account in cfg.accounts:
        if account not in cfg.tenants:
            by_tenant.setdefault(account, set()).add(account)
    if allowed is None:
        named = {*cfg.tenants.values(), *([cfg.default_tenant] if cfg.default_tenant else [])}
        for tenant in named - set(cfg.tenants):
            by_tenant.setdefault(tenant, set()).add(UNLISTED + tenant)
    shared = {t: _listed(a) for t, a in by_tenant.items() if len(a) > 1}
    if cfg.default_tenant is not None and cfg.default_tenant in by_tenant:
        shared[cfg.default_tenant] = [*_listed(by_tenant[cfg.default_tenant]),
                                      "(samples without an account)"]
    return shared


def _listed(accounts: set[str]) -> list[str]:
    """Accounts in order, the :data:`UNLISTED` one last."""
    return sorted(accounts, key=lambda a: (a.startswith(UNLISTED), a))


def route(cfg: RemoteWriteEndpoint) -> Route:
    """The endpoint's :class:`Route`. Accounts that share a tenant keep their series apart
    by ``account_label``: every account's samples carry it when there is no tenant header
    (unless ``accounts`` names a single one), else those of a tenant that accounts may share
    (:func:`shared_tenants`: without an ``accounts`` list, every value of ``tenants`` an
    account of that name could also reach; and ``default_tenant``). With
    ``account_label: null`` such a configuration is a :class:`ConfigError` naming the
    tenant and its accounts."""
    name = endpoint_name(cfg)
    single = len(cfg.accounts) == 1
    if cfg.account_label is None:
        if cfg.tenant_header is None and not single:
            raise ConfigError(
                f"remote_write endpoint {name}: tenant_header is null, so every account's "
                "samples go to one tenant, where two accounts' series of one name and labels "
                "would merge; set account_label (l2m_account by default) to keep them apart, "
                "or list the one account to send under accounts")
        folded = shared_tenants(cfg)
        if cfg.tenant_header is not None and folded:
            # A fold the configuration spells out (two accounts it names) before one that
            # only an unlisted account would make.
            tenant, accounts = min(folded.items(), key=lambda ta: (
                sum(not a.startswith(UNLISTED) for a in ta[1]) < 2, ta[0]))
            hint = ("give each account its own tenant" if
                    sum(not a.startswith(UNLISTED) for a in accounts) >= 2 else
                    "list the endpoint's accounts under accounts")
            raise ConfigError(
                f"remote_write endpoint {name}: accounts {', '.join(accounts)} go to one "
                f"tenant, {tenant}, where their series of one name and labels would merge; "
                f"set account_label (l2m_account by default) to keep them apart, or {hint}")
    if cfg.tenant_header is None:
        shared: frozenset[str] | None = frozenset() if single else None
    else:
        shared = frozenset(shared_tenants(cfg)) | (
            {cfg.default_tenant} if cfg.default_tenant is not None else set())
    return Route(frozenset(cfg.accounts) if cfg.accounts else None, dict(cfg.tenants),
                 cfg.default_tenant, cfg.tenant_header is not None, cfg.account_label, shared)


def _skip_histograms(request: Request, tally: Tally) -> Request | None:
    """``request``'s native histograms skipped and counted (:data:`HISTOGRAMS_REFUSED`):
    its floats and metadata to send instead, None when nothing is left."""
    tally.skip(HISTOGRAMS_REFUSED, request.histograms)
    floats = request.floats()
    return floats if floats.series or floats.metadata else None


@dataclass
class EndpointDelivery:
    """One endpoint's loop: its consumer, sender and tally."""

    job: JobConfig
    cfg: RemoteWriteEndpoint
    stop: threading.Event
    once_idle_s: float | None = None  # once: end after the topic gave nothing this long
    families: dict[str, Metadata] | None = None  # the rules' metadata by rule id
    log: Callable[[str], None] = _stderr
    clock: Callable[[], float] = time.monotonic  # seconds: when refused histograms are retried

    def __post_init__(self) -> None:
        self.name = endpoint_name(self.cfg)
        self.tally = Tally()
        self.route = route(self.cfg)
        self.sender = Sender(client_endpoint(self.cfg), stop=self.stop.is_set,
                             on_retry=self._retried, on_auth=self._auth_failed,
                             credentials=self._credentials,
                             auth_attempts=ONCE_AUTH_ATTEMPTS if self.once_idle_s is not None
                             else None)
        self.error: BaseException | None = None  # a failure that ends delivery (ConfigError)
        # Since an unexpected error, until a poll is delivered and committed: /healthz fails.
        self.failing = False
        self._suspect = False  # the next poll is built record by record (after an error)
        self._backoff = RESTART_MIN_S  # before the loop starts again after an error
        self._in_a_row = 0  # errors since the last poll delivered
        self._auth_logged = False
        self._append_logged = False
        # The receiver refused native histograms: they are skipped until this clock() time.
        self._histograms_until: float | None = None
        self.ready = False  # reading the topic
        self._running = False
        self._beat = time.monotonic()
        self._stall_s = STALL_S + 2 * self.cfg.timeout_ms / 1000
        self._live: Any = None  # the consumer, while the loop runs (in its thread only)
        self._partitions: list[int] = []
        self._committed: dict[int, int] = {}  # per partition: the next offset to deliver
        self._ends: dict[int, int] = {}  # per partition: the last end (high watermark) seen
        self._lag_at = 0.0

    def healthy(self) -> bool:
        """No failure, and the loop moved recently (a poll, an answer, a retry)."""
        if self.error is not None or self.failing:
            return False
        return not self._running or time.monotonic() - self._beat < self._stall_s

    def _consumer(self) -> Any:
        from confluent_kafka import OFFSET_STORED, Consumer, KafkaError, TopicPartition

        group = f"{self.job.remote_write.group_id}-{self.name}"
        consumer = Consumer({**self.job.sink, "group.id": group, "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "log_level": "3"})
        topic = self.job.topics.metrics
        found = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if found is None or (found.error is not None and
                             found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            consumer.close()
            raise ConfigError(f"remote_write: metrics topic {topic} not found")
        if found.error is not None or not found.partitions:
            # Transient (LEADER_NOT_AVAILABLE while a broker restarts, a topic still being
            # created): this endpoint's loop starts again with its backoff, the others go on.
            consumer.close()
            why = found.error.str() if found.error is not None else "no partitions yet"
            raise KafkaUnavailableError(f"remote_write: metrics topic {topic}: metadata not "
                                        f"available ({why})")
        self._partitions = sorted(found.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_STORED) for p in self._partitions])
        # Where delivery resumes: the group's offsets, else (auto.offset.reset: earliest)
        # each partition's start.
        for tp in consumer.committed([TopicPartition(topic, p) for p in self._partitions],
                                     timeout=30):
            self._committed[tp.partition] = tp.offset if tp.offset >= 0 else \
                consumer.get_watermark_offsets(tp, timeout=30)[0]
        return consumer

    def _auth_failed(self, status: int) -> None:
        self.tally.auth_failed()
        if not self._auth_logged:
            self._auth_logged = True
            then = ("refused for good (auth_failures: refuse)" if self.cfg.auth_failures ==
                    "refuse" else "retried with backoff, its credentials read again each "
                    "time; nothing is committed meanwhile")
            self.log(f"l2m deliver: {self.name}: the receiver refuses l2m's credentials "
                     f"(HTTP {status}); requests are {then}")
        self._moved()

    def _credentials(self) -> dict[str, str]:
        """The headers read again (a rotated token); the current ones if that fails."""
        try:
            return credentials(self.cfg)
        except ConfigError as exc:
            self.log(f"l2m deliver: {self.name}: {exc}")
            return self.sender.headers

    def _retried(self, status: int, reason: str) -> None:
        self.tally.retried()
        self._moved()

    def _without_histograms(self, request: Request, tally: Tally) -> Request | None:
        """``request`` to send while the receiver's refusal of native histograms is recent:
        its histograms skipped (:data:`HISTOGRAMS_REFUSED`), None when nothing is left to
        send; as it is when it holds none, or once :data:`HISTOGRAMS_PAUSE_S` has passed
        (the receiver is tried again)."""
        if self._histograms_until is None or not request.histograms:
            return request
        if self.clock() >= self._histograms_until:
            return request
        return _skip_histograms(request, tally)

    def _histograms_refused(self, request: Request, status: int, reason: str,
                            tally: Tally) -> Request | None:
        """The receiver refused ``request`` because it takes no native histograms: they are
        skipped and counted, said once (until the receiver takes them again), left out
        without trying for :data:`HISTOGRAMS_PAUSE_S`; the request's floats to send instead
        (None: none)."""
        if self._histograms_until is None:
            self.log(f"l2m deliver: {self.name}: the receiver does not take native histograms "
                     f"(HTTP {status}: {self._scrubbed(reason)[:100]}); they are skipped "
                     f"({HISTOGRAMS_REFUSED}) and the other samples sent, tried again every "
                     f"{HISTOGRAMS_PAUSE_S / 60:g} minutes: start Prometheus with "
                     "--enable-feature=native-histograms (Mimir: "
                     "native_histograms_ingestion_enabled: true)")
        self._histograms_until = self.clock() + HISTOGRAMS_PAUSE_S
        return _skip_histograms(request, tally)

    def _moved(self) -> None:
        self._beat = time.monotonic()
        # A receiver that is down keeps the loop in one poll: the lag must still move.
        if self._live is not None and time.monotonic() - self._lag_at >= LAG_REFRESH_S:
            self._refresh_lag()

    def _refresh_lag(self) -> None:
        """The lag: each partition's end minus what this endpoint committed. The end is the
        high watermark of the consumer's latest fetch (kept by librdkafka: no request), or,
        before its first fetch, asked of the broker (ListOffsets, which the embedded broker,
        tansu, answers short of its newest record batch's tail). A receiver that is down
        stops the consumer's fetches once its queue is full, and with them the end: the lag
        is approximate, at most short of the truth."""
        from confluent_kafka import KafkaException, TopicPartition

        topic = self.job.topics.metrics
        for p in self._partitions:
            tp = TopicPartition(topic, p)
            try:
                end = self._live.get_watermark_offsets(tp, cached=True)[1]
                if end < 0:
                    end = self._live.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S)[1]
            except KafkaException:
                continue  # Kafka unreachable for now: the last end seen stands
            if end >= 0:
                self._ends[p] = end
        self.tally.set_lag(sum(max(0, end - self._committed.get(p, 0))
                               for p, end in self._ends.items()))
        self._lag_at = time.monotonic()

    def run(self) -> None:
        """The endpoint's loop until ``stop`` (or, once, the topic's end). An unexpected
        error is reported, counted and the loop starts again after a backoff, from the last
        commit (once: at most :data:`ONCE_ATTEMPTS` times in a row, then it is this endpoint's
        error; credentials refused :data:`ONCE_AUTH_ATTEMPTS` times in a row are its error at
        once); a :class:`ConfigError` (the topic missing) ends delivery."""
        self._beat = time.monotonic()
        self._running = True
        self._backoff = RESTART_MIN_S
        self._in_a_row = 0
        try:
            while not self.stop.is_set():
                try:
                    self._run()
                    return
                except ConfigError:
                    raise
                except CredentialsRefused as exc:  # once: this endpoint's end, not the others'
                    self.error = exc
                    return
                except Exception as exc:  # reported; the loop starts again
                    error = type(exc).__name__
                    self.tally.failed(error)
                    self.failing = True
                    self._suspect = True
                    self._in_a_row += 1
                    if self.once_idle_s is not None and self._in_a_row >= ONCE_ATTEMPTS:
                        self.error = exc  # raised by deliver() once the others are done
                        return
                    self.log(f"l2m deliver: {self.name}: unexpected error ({error}: "
                             f"{self._scrubbed(str(exc))}); the endpoint starts again in "
                             f"{self._backoff:g} s from its last commit")
                    self._beat = time.monotonic()
                    self.stop.wait(self._backoff)
                    # Reset by the next poll delivered (_run).
                    self._backoff = min(self._backoff * 2, RESTART_MAX_S)
        except BaseException as exc:  # reported by the caller, which stops the others
            self.error = exc
            self.stop.set()
        finally:
            self._running = False
            self.ready = False

    def _scrubbed(self, text: str) -> str:
        """``text`` without the endpoint's header values (an error may quote a header)."""
        for value in {*self.sender.endpoint.headers.values(), *self.sender.headers.values()}:
            for secret in {value, *value.split()}:
                if len(secret) >= 4:
                    text = text.replace(secret, "(not shown)")
        return text[:500]

    def _outbox(self, tally: Tally | None = None) -> Outbox:
        return Outbox(self.route, self.cfg.max_samples_per_send, tally or self.tally,
                      self.families)

    def _add(self, outbox: Outbox, record: Any) -> None:
        from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_NOT_AVAILABLE

        kind, at = record.timestamp()
        mark, batch = read_headers(record.headers())
        outbox.add(record.value(), None if kind == TIMESTAMP_NOT_AVAILABLE else at, mark,
                   batch, appended=kind == TIMESTAMP_LOG_APPEND_TIME)

    def _send(self, requests: list[Request], tally: Tally | None = None) -> bool:
        """Send the requests to their final answers, split when their samples may be what
        was refused, their outcomes counted in ``tally`` (the endpoint's by default); False
        when stopped meanwhile (nothing to commit)."""
        tally = tally or self.tally
        # Each request with, for a newer part of a request refused as too old, its older part.
        pending: list[tuple[Request, Request | None]] = [(r, None) for r in requests]
        while pending:
            request, older = pending.pop(0)
            kept = self._without_histograms(request, tally)
            if kept is None:
                continue
            request = kept
            answer = self.sender.send(request.body, request.tenant)
            if answer.status == 0:  # stopped while retrying: nothing committed
                return False
            if answer.status in AUTH_STATUSES and self.cfg.auth_failures != AUTH_REFUSE:
                # Once, the sender gave up: about the endpoint, so nothing is committed.
                raise CredentialsRefused(
                    f"remote_write endpoint {self.name}: the receiver refused l2m's "
                    f"credentials (HTTP {answer.status}, {ONCE_AUTH_ATTEMPTS} times in a "
                    "row); "
                    "nothing was committed: mend them and run again")
            tally.answered(answer.status, time.time())
            self._auth_logged = self._auth_logged and not answer.sent
            self._beat = time.monotonic()
            if request.histograms and histograms_disabled(answer.status, answer.reason):
                floats = self._histograms_refused(request, answer.status, answer.reason, tally)
                if floats is not None:
                    pending.insert(0, (floats, None))
                continue
            if answer.sent and request.histograms and self._histograms_until is not None:
                self._histograms_until = None
                self.log(f"l2m deliver: {self.name}: the receiver takes native histograms "
                         "again")
            too_old = not answer.sent and refusal_reason(answer.status, answer.reason) == TOO_OLD
            if older is not None and too_old:
                # Each of its samples is at most as new as one refused as too old: too old as
                # well, and refused without being sent (the TSDB's limit only moves on).
                pending = [(r, o) for r, o in pending if r is not older]
                settle(tally, older, answer.status, answer.reason)
            if splittable(request, answer.status, answer.reason):
                if too_old:
                    # The newer half first: refused too, it says the older one is too —
                    # unless the request mixes floats and native histograms, whose limits
                    # differ (Prometheus 2.42: the out-of-order window for floats, the head's
                    # hour for histograms): then the older half is tried as well.
                    old, new = request.by_time()
                    pending[:0] = [(new, None if request.mixed else old), (old, None)]
                else:
                    pending[:0] = [(half, None) for half in request.halves()]
                continue
            settle(tally, request, answer.status, answer.reason)
        return True

    def _deliver(self, records: list[Any]) -> bool:
        """A poll's records, sent; False when stopped meanwhile. After an unexpected error
        the poll's requests are first built in parts, halved down to single records: a record
        whose building (its sample read, its requests encoded) raises is skipped (counted as
        ``error``), and the others are built together and sent. An error while sending is
        about the endpoint (its connection, its TLS files), never a record's: it is raised,
        and the loop starts again with its backoff, nothing skipped nor committed."""
        # Everything the poll's delivery counts (samples sent, refused, skipped; requests
        # answered) is kept only once it is delivered: a poll delivered again after an error
        # counts once. (Retries and credentials refused count as they happen.)
        scratch = Tally()
        if not self._suspect:
            if not self._send(self._build(records, scratch), scratch):
                return False
            self.tally.merge(scratch)
            return True
        bad: list[tuple[Any, BaseException]] = []
        parts = [records] if records else []
        while parts:
            part = parts.pop(0)
            try:
                self._build(part, Tally())
            except Exception as exc:
                if len(part) > 1:
                    middle = len(part) // 2
                    parts[:0] = [part[:middle], part[middle:]]
                else:
                    bad.append((part[0], exc))
        skipped = {id(record) for record, _ in bad}
        requests = self._build([r for r in records if id(r) not in skipped], scratch)
        if not self._send(requests, scratch):
            return False
        self.tally.merge(scratch)
        for record, failure in bad:
            self.tally.skip(ERROR)
            self.log(f"l2m deliver: {self.name}: record {record.partition()}:"
                     f"{record.offset()} skipped: building its request failed twice "
                     f"({type(failure).__name__}: {self._scrubbed(str(failure))})")
        self._suspect = False
        return True

    def _build(self, records: list[Any], tally: Tally) -> list[Request]:
        """The records' requests, their skips counted in ``tally``."""
        outbox = self._outbox(tally)
        for record in records:
            self._add(outbox, record)
        return outbox.requests()

    def _run(self) -> None:
        from confluent_kafka import KafkaError, TopicPartition

        consumer = self._consumer()
        topic = self.job.topics.metrics
        poll_s = self.job.remote_write.poll_ms / 1000
        idle_since = time.monotonic()
        reported, last_report = "", time.monotonic()
        self._live = consumer
        self._refresh_lag()
        self.ready = True
        try:
            while not self.stop.is_set():
                self._beat = time.monotonic()
                polled = consumer.consume(POLL_RECORDS, timeout=poll_s)
                positions: dict[int, int] = {}
                records = []
                for record in polled:
                    error = record.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            self.log(f"l2m deliver: {self.name}: {error.str()}")
                        continue
                    records.append(record)
                    positions[record.partition()] = record.offset() + 1
                if not self._deliver(records):
                    return
                if positions:
                    consumer.commit(offsets=[TopicPartition(topic, p, o)
                                             for p, o in sorted(positions.items())],
                                    asynchronous=False)
                    self._committed.update(positions)
                    idle_since = time.monotonic()
                self.failing = False
                self._backoff = RESTART_MIN_S
                self._in_a_row = 0
                self._log_append_time()
                self._refresh_lag()
                if not positions and self.once_idle_s is not None and \
                        time.monotonic() - idle_since >= self.once_idle_s:
                    return
                line = summary(self.tally)
                if line != reported and time.monotonic() - last_report >= PROGRESS_S:
                    self.log(f"l2m deliver: {self.name}: {line}")
                    reported, last_report = line, time.monotonic()
        finally:
            self._live = None
            consumer.close()
            self.sender.close()

    def _log_append_time(self) -> None:
        if not self._append_logged and self.tally.snapshot().skipped.get(LOG_APPEND_TIME):
            self._append_logged = True
            self.log(f"l2m deliver: {self.name}: the metrics topic {self.job.topics.metrics} "
                     "stamps records with the broker's time (LogAppendTime) and some carry no "
                     "l2m-time header: their counters are skipped (log_append_time), since a "
                     "replayed batch would be stamped later and counted twice; set "
                     "message.timestamp.type=CreateTime on the topic (docs/prometheus.md)")


def deliver(job: JobConfig, once: bool = False, stop: threading.Event | None = None,
            once_idle_s: float = 3.0, rules: Iterable[Rule] = ()) -> dict[str, Tally]:
    """Deliver until ``stop`` is set (or, ``once``, until the topic has given nothing for
    ``once_idle_s`` on every endpoint); each endpoint's tally by name. ``rules``: the job's,
    whose metadata (TYPE, HELP, UNIT) goes with their samples. An endpoint's configuration
    error (the metrics topic missing) stops the others and is raised; any other error only
    restarts that endpoint's loop (:meth:`EndpointDelivery.run`). With
    ``monitoring.port`` set, ``/metrics``, ``/healthz`` and ``/readyz`` are served meanwhile
    (a :class:`ConfigError` if the port cannot be listened on)."""
    if not job.remote_write.endpoints:
        raise ConfigError("remote_write: no endpoints configured (remote_write.endpoints "
                          "in the configuration file; docs/prometheus.md)")
    stop = stop or threading.Event()
    families = metadata(rules)
    loops = [EndpointDelivery(job, cfg, stop, once_idle_s if once else None, families=families)
             for cfg in job.remote_write.endpoints]
    names = [loop.name for loop in loops]
    shared = sorted({n for n in names if names.count(n) > 1})
    if shared:
        raise ConfigError(f"remote_write: endpoints share the name {', '.join(shared)}; give "
                          "each its own name")
    telemetry, server = None, None
    if job.monitoring.port is not None:
        telemetry = DeliveryTelemetry(loops, job.monitoring.top_accounts)
        # Before the consumers start: probes get answers (not ready yet) meanwhile.
        server = MonitoringEndpoint(telemetry, job.monitoring.host, job.monitoring.port)
        _stderr(f"l2m deliver: metrics on {job.monitoring.host}:{server.port}/metrics")
    threads = [threading.Thread(target=loop.run, name=f"l2m-deliver-{loop.name}", daemon=True)
               for loop in loops]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.5)
    finally:
        if telemetry is not None:
            telemetry.stopping = True
        if server is not None:
            server.close()
    for loop in loops:
        loop.log(f"l2m deliver: {loop.name}: {summary(loop.tally)}")
    failed = next((loop.error for loop in loops if loop.error is not None), None)
    if failed is not None:
        raise failed
    return {loop.name: loop.tally for loop in loops}
