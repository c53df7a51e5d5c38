"""Sending remote-write requests as the spec says: retry what may succeed later, never what
cannot.

Input: an :class:`Endpoint` (URL, extra headers, the tenant header, timeouts, TLS) and request
bodies (:func:`l2m.remotewrite.encode.body`), each with the tenant it is for. Output: per
request, a :class:`Delivery` — sent, or refused by the receiver with its status and reason.

Spec 1.0, "Retries & Backoff": a 5xx or a 429 is retried, with backoff, for as long as it
lasts (the request is the same bytes each time: a receiver that stored part of it stores the
rest and keeps what it has); any other 4xx is final — the data is malformed or refused for
good, and sending it again only blocks what comes after. A connection that fails or times out
is retried like a 5xx. ``Retry-After`` (seconds) on a 429 or 503 is honoured, within
``max_backoff_s``. Two exceptions, each about what the answer means rather than its code:

* a 5xx that says its samples are too old (Prometheus before 2.50 answers 500 "too old" for
  samples past its out-of-order window) is final: sent again, it is refused again forever;
* a 5xx that says native histograms are disabled (Prometheus 2.40-3.7 without
  ``--enable-feature=native-histograms`` answers 500 "native histograms are disabled" to a
  request holding one) is final: the caller sends the request again without its histograms
  (:mod:`l2m.runtime.deliver`), else one tenant's native rule would stop every tenant's
  floats behind it;
* a 401 or 403 (the receiver refuses l2m's credentials) is about the endpoint, not the data:
  retried with backoff, the credentials read again before each retry (a rotated token is
  picked up), until they work — unless the endpoint's ``auth_failures`` is ``refuse``."""

from __future__ import annotations

import http.client
import re
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from l2m.config.job import shown_url
from l2m.errors import RemoteWriteError
from l2m.remotewrite.encode import HEADERS

TENANT_HEADER = "X-Scope-OrgID"  # Mimir, Cortex and Loki's; Thanos receive takes it too
AUTH_STATUSES = frozenset({401, 403})
AUTH_RETRY, AUTH_REFUSE = "retry", "refuse"
# Prometheus 2.40-3.7's answer (500) to a request holding a native histogram when started
# without --enable-feature=native-histograms: storage.ErrNativeHistogramsDisabled's text, the
# same from 2.40 to 3.7 (measured on 2.42: tests/integration/test_native_histograms_receiver.py).
NATIVE_DISABLED = "native histograms are disabled"
# A tenant as a header carries it unchanged: visible ASCII (no space, which a receiver may
# trim; no control character, which ends a header; nothing a latin-1 header would re-encode).
_TENANT = re.compile(r"[\x21-\x7e]+")
# A header value (a token, an extra header): visible ASCII, inner spaces and tabs allowed.
_HEADER_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?")
_RETRY_AFTER = re.compile(r"[0-9]{1,9}")  # delay-seconds; bounded, the wait is capped anyway
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110's token


def valid_tenant(tenant: str) -> bool:
    """Whether a tenant can go in the tenant header as it is (visible ASCII, no space)."""
    return _TENANT.fullmatch(tenant) is not None


def valid_header_value(value: str) -> bool:
    """Whether a value can go in an HTTP header as it is (visible ASCII, inner blanks)."""
    return _HEADER_VALUE.fullmatch(value) is not None


def valid_header_name(name: str) -> bool:
    """Whether ``name`` is an HTTP header name (RFC 9110's token)."""
    return _HEADER_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class Endpoint:
    """One remote-write receiver. ``headers``: sent with every request (an
    ``Authorization`` among them, read from a file or the environment by the caller);
    ``tenant_header``: the header naming a request's tenant (None: not sent)."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    tenant_header: str | None = TENANT_HEADER
    timeout_s: float = 30.0
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    min_backoff_s: float = 0.03
    max_backoff_s: float = 5.0
    auth_failures: str = AUTH_RETRY  # AUTH_REFUSE: a 401 or 403 is final

    def __post_init__(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise RemoteWriteError(f"remote write URL {shown_url(self.url)!r}: expected "
                                   "http(s)://host…")
        if parsed.username is not None or parsed.password is not None:
            raise RemoteWriteError(f"remote write URL {shown_url(self.url)!r}: user info "
                                   "in the URL is refused (credentials go in headers)")

    def __repr__(self) -> str:
        # Header values hold credentials (Authorization, API keys): never in a repr.
        shown = {name: "(not shown)" for name in self.headers}
        return (f"Endpoint(url={shown_url(self.url)!r}, headers={shown!r}, "
                f"tenant_header={self.tenant_header!r}, timeout_s={self.timeout_s!r}, "
                f"auth_failures={self.auth_failures!r})")


@dataclass(frozen=True)
class Delivery:
    """What became of one request: ``status`` the receiver's final answer (2xx: sent; else a
    4xx it refused it with, and its body as ``reason``); ``attempts`` made."""

    status: int
    reason: str
    attempts: int

    @property
    def sent(self) -> bool:
        return 200 <= self.status < 300


def too_old(text: str) -> bool:
    """Whether a receiver's answer says its samples are too old (Prometheus 2.42's 500 "too
    old", "out of bounds"; Mimir's err-mimir-sample-timestamp-too-old)."""
    lowered = text.lower()
    return any(needle in lowered for needle in ("too old", "out of bounds", "too-old"))


def histograms_disabled(status: int, text: str) -> bool:
    """Whether a receiver's answer says it does not take native histograms (a 5xx holding
    :data:`NATIVE_DISABLED`)."""
    return status >= 500 and NATIVE_DISABLED in text.lower()


def retriable(status: int, text: str = "") -> bool:
    """Spec 1.0: retry 5xx and 429; every other answer is final. A 5xx that says its samples
    are too old is final too: they would be refused again forever; so is one that says native
    histograms are disabled: the request goes again without them."""
    if status >= 500:
        return not too_old(text) and not histograms_disabled(status, text)
    return status == 429


def retry_seconds(header: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds, or None: only ASCII digits count
    (``str.isdigit`` takes "²", which ``float`` refuses); an HTTP-date is ignored."""
    if header is None or _RETRY_AFTER.fullmatch(header.strip()) is None:
        return None
    return float(header.strip())


class Sender:
    """Requests to one endpoint over one kept-alive connection (reopened after a failure).
    ``sleep`` is injectable for tests; ``stop`` ends a retry loop early (the
    job stopping): the request is then reported with status 0, not sent. ``on_retry`` is
    called before each backoff with the attempt's status and answer (0 and the error: no
    answer): it failed (a 5xx, a 429, no answer) and will be made again; ``on_auth``
    instead when it was answered 401 or 403, and ``credentials`` (when given) then gives
    the headers to send from now on (read again: a rotated token).
    ``auth_attempts``: a 401 or 403 answered that many times in a row is returned (for a
    run that must end), else it is retried until ``stop``."""

    def __init__(self, endpoint: Endpoint, sleep: Callable[[float], None] = time.sleep,
                 stop: Callable[[], bool] = lambda: False,
                 on_retry: Callable[[int, str], None] = lambda status, reason: None,
                 on_auth: Callable[[int], None] = lambda status: None,
                 credentials: Callable[[], Mapping[str, str]] | None = None,
                 auth_attempts: int | None = None) -> None:
        self.endpoint = endpoint
        # A run that must end (l2m deliver --once): a 401/403 this many times in a row is
        # returned even under auth_failures: retry (None: retried until stopped).
        self._auth_attempts = auth_attempts
        self._headers = dict(endpoint.headers)
        self._on_retry = on_retry
        self._on_auth = on_auth
        self._credentials = credentials
        self._parsed = urllib.parse.urlsplit(endpoint.url)
        self._path = (self._parsed.path or "/") + (f"?{self._parsed.query}"
                                                   if self._parsed.query else "")
        self._sleep = sleep
        self._stop = stop
        self._conn: http.client.HTTPConnection | None = None

    @property
    def headers(self) -> dict[str, str]:
        """The endpoint's headers as sent now (credentials read again after a 401/403)."""
        return dict(self._headers)

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = self._parsed.hostname or "", self._parsed.port
            if self._parsed.scheme == "https":
                context = ssl.create_default_context(cafile=self.endpoint.ca_file)
                if self.endpoint.cert_file:
                    context.load_cert_chain(self.endpoint.cert_file, self.endpoint.key_file)
                if self.endpoint.insecure_skip_verify:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                self._conn = http.client.HTTPSConnection(host, port,
                                                         timeout=self.endpoint.timeout_s,
                                                         context=context)
            else:
                self._conn = http.client.HTTPConnection(host, port,
                                                        timeout=self.endpoint.timeout_s)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _post(self, body: bytes, headers: Mapping[str, str]) -> tuple[int, str, str | None]:
        try:
            # Inside the try: a CA file missing mid-rotation or a certificate that does not
            # load is a failed connection, retried with backoff — not an error of the data.
            conn = self._connection()
            conn.request("POST", self._path, body=body, headers=dict(headers))
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
            return response.status, text.strip(), response.getheader("Retry-After")
        except (OSError, http.client.HTTPException) as exc:
            self.close()  # a broken connection is not reused
            return 0, f"{type(exc).__name__}: {exc}", None

    def send(self, body: bytes, tenant: str | None = None) -> Delivery:
        """POST ``body`` until it is answered with anything but a 5xx or 429 (or a failed
        connection), backing off between attempts."""
        backoff = self.endpoint.min_backoff_s
        attempts = refused = 0
        while True:
            attempts += 1
            headers = {**HEADERS, **self._headers}
            if tenant is not None and self.endpoint.tenant_header:
                headers[self.endpoint.tenant_header] = tenant
            status, reason, retry_after = self._post(body, headers)
            refused = refused + 1 if status in AUTH_STATUSES else 0
            if status in AUTH_STATUSES:
                self._on_auth(status)
                if self.endpoint.auth_failures == AUTH_REFUSE or (
                        self._auth_attempts is not None and refused >= self._auth_attempts):
                    return Delivery(status, reason, attempts)
            elif status and not retriable(status, reason):
                return Delivery(status, reason, attempts)
            if self._stop():
                return Delivery(0, reason, attempts)
            if status in AUTH_STATUSES:
                if self._credentials is not None:
                    self._headers = dict(self._credentials())
            else:
                self._on_retry(status, reason)
            wait = backoff
            seconds = retry_seconds(retry_after)
            if seconds is not None:
                wait = max(wait, seconds)
            self._sleep(min(wait, self.endpoint.max_backoff_s))
            backoff = min(backoff * 2, self.endpoint.max_backoff_s)
