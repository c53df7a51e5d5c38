"""A deterministic generator of realistic JSON logs: web/API services behind Kubernetes,
payment events and platform noise, with mixed timestamp formats and optional malformed
and late records. Feeds the bundled sample, the demo and the benchmarks.

Input: a :class:`GeneratorConfig`. Output: JSON lines (:meth:`LogGenerator.lines`), or a file of
them (:func:`write_logs`: ``l2m generate``)."""

from __future__ import annotations

import bisect
import gzip
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

SERVICES = {
    "web": ("shop", "storefront"),
    "cart": ("shop", "checkout"),
    "checkout": ("shop", "checkout"),
    "search": ("shop", "discovery"),
    "auth": ("identity", "identity"),
    "payments": ("payments", "payments"),
}
PATHS = {
    "web": ["/", "/product/{id}", "/category/{id}", "/healthz"],
    "cart": ["/api/cart", "/api/cart/items", "/api/cart/items/{id}", "/healthz"],
    "checkout": ["/api/checkout", "/api/checkout/confirm", "/healthz"],
    "search": ["/api/search", "/api/suggest", "/healthz"],
    "auth": ["/api/login", "/api/token/refresh", "/api/logout", "/healthz"],
    "payments": ["/api/payments", "/api/payments/{id}/capture", "/healthz"],
}
METHODS = ["GET", "GET", "GET", "POST", "POST", "PUT", "DELETE"]
NODES = [f"node-{i}" for i in range(1, 7)]
ACCOUNTS = ["acme", "acme", "acme", "globex"]
ERRORS = [
    "upstream connect error: connection refused to {dep}:8080",
    "request timeout after 3000ms calling {dep}",
    "Timeout waiting for connection from pool",
    "java.lang.OutOfMemoryError: Java heap space",
    "container killed: out of memory (OOMKilled)",
    "invalid password for user {user}",
    "database error: deadlock detected",
]
INFOS = [
    "request completed",
    "health check ok",
    "cache hit ratio {ratio}",
    "user {user} logged in",
    "GET /api/search?q=shoes completed in {ms}ms",
]
PROVIDERS = ["stripe", "adyen", "paypal"]
CURRENCIES = ["EUR", "EUR", "USD", "GBP"]
DECLINES = ["insufficient_funds", "card_declined", "expired_card", "fraud_suspected"]


@dataclass
class GeneratorConfig:
    seed: int = 7
    start_ms: int = 1_795_341_600_000  # 2026-11-22T10:00:00Z
    rate_per_s: float = 50.0  # event-time spacing, not wall clock
    malformed_ratio: float = 0.0
    late_ratio: float = 0.0  # share of logs whose event time is 1–30 minutes old
    no_timestamp_ratio: float = 0.0
    # > 0: logs of requests and payments belong to this many tenant accounts
    # (``acct-0000`` …), a few big ones and a long tail, instead of acme and globex.
    accounts: int = 0


class LogGenerator:
    """Generates logs in event-time order (but for the late ones)."""

    def __init__(self, config: GeneratorConfig | None = None) -> None:
        self.config = config or GeneratorConfig()
        self.rng = random.Random(self.config.seed)
        self.clock = float(self.config.start_ms)
        self.count = 0
        # Tenants' sizes fall off like 1/(k+10): the biggest account sends ~7x the median.
        self._tenant_weights = ([1.0 / (k + 10) for k in range(self.config.accounts)]
                                if self.config.accounts else [])
        self._tenant_cum: list[float] = []
        total = 0.0
        for w in self._tenant_weights:
            total += w
            self._tenant_cum.append(total)

    def _account(self) -> str:
        if not self._tenant_cum:
            return self.rng.choice(ACCOUNTS)
        k = bisect.bisect_left(self._tenant_cum, self.rng.random() * self._tenant_cum[-1])
        return tenant(min(k, len(self._tenant_cum) - 1))

    def next_doc(self) -> dict[str, Any]:
        rng = self.rng
        self.clock += rng.expovariate(self.config.rate_per_s) * 1000.0
        ts = int(self.clock)
        if self.config.late_ratio and rng.random() < self.config.late_ratio:
            ts -= rng.randint(60_000, 30 * 60_000)
        self.count += 1
        roll = rng.random()
        if roll < 0.12:
            doc = self._payment(ts)
        elif roll < 0.2:
            doc = self._platform(ts)
        else:
            doc = self._request(ts)
        if self.config.no_timestamp_ratio and rng.random() < self.config.no_timestamp_ratio:
            doc.pop("@timestamp", None)
        return doc

    def next_line(self) -> bytes:
        if self.config.malformed_ratio and self.rng.random() < self.config.malformed_ratio:
            return self.rng.choice([
                b'{"@timestamp": "2026-11-22T10:00:00Z", "service": "web", "http": {',
                b"GET /index.html 200",
                b'["not", "an", "object"]',
            ])
        return orjson.dumps(self.next_doc())

    def lines(self, n: int) -> Iterator[bytes]:
        for _ in range(n):
            yield self.next_line()

    # --- shapes ---

    def _timestamp(self, ts: int) -> Any:
        form = self.rng.random()
        if form < 0.6:
            return _iso(ts, UTC).replace("+00:00", "Z")
        if form < 0.8:
            return _iso(ts, timezone(timedelta(hours=self.rng.choice([-5, 1, 2, 5.5]))))
        return ts

    def _k8s(self, service: str) -> dict[str, Any]:
        namespace, team = SERVICES[service]
        pod = f"{service}-{self.rng.choice(['7d9f8', '5c6b4', '9a1e2'])}-{self.rng.randint(0, 4)}"
        return {"namespace": namespace, "pod": pod, "container": service,
                "node": self.rng.choice(NODES), "labels": {"app": service, "team": team}}

    def _request(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        service = rng.choice(list(SERVICES))
        path = rng.choice(PATHS[service]).replace("{id}", str(rng.randint(1, 500)))
        status = rng.choices([200, 201, 204, 301, 400, 401, 404, 429, 500, 502, 503, 504],
                             [60, 8, 4, 2, 4, 3, 5, 2, 3, 3, 2, 1])[0]
        duration = round(rng.lognormvariate(3.2, 1.0) * (4 if status >= 500 else 1), 3)
        level = "error" if status >= 500 else "warn" if status >= 400 else "info"
        if level == "error":
            message = rng.choice(ERRORS)
        else:
            message = rng.choice(INFOS) if path != "/healthz" else "health check ok"
        message = message.format(dep=rng.choice(list(SERVICES)), user=f"user{rng.randint(1, 99)}",
                                 ratio=round(rng.random(), 2), ms=int(duration))
        doc: dict[str, Any] = {
            "@timestamp": self._timestamp(ts),
            "account": self._account(),
            "service": service,
            "level": level,
            "message": message,
            "http": {
                "method": "GET" if path == "/healthz" else rng.choice(METHODS),
                "path": path,
                "status": status if rng.random() < 0.9 else str(status),
                "duration_ms": duration,
                "bytes": rng.randint(200, 60_000),
            },
            "kubernetes": self._k8s(service),
            "trace_id": f"{rng.getrandbits(64):016x}",
        }
        if rng.random() < 0.1:
            # Some shippers flatten metadata into dotted top-level keys.
            kube = doc.pop("kubernetes")
            doc["kubernetes.namespace"] = kube["namespace"]
            doc["kubernetes.pod"] = kube["pod"]
            doc["kubernetes.node"] = kube["node"]
        if service == "auth":
            doc["user"] = {"name": f"user{rng.randint(1, 99)}"}
        return doc

    def _payment(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        outcome = rng.choices(["captured", "declined", "refunded"], [80, 15, 5])[0]
        payment: dict[str, Any] = {
            "amount": round(rng.lognormvariate(3.5, 0.9), 2),
            "currency": rng.choice(CURRENCIES),
            "provider": rng.choice(PROVIDERS),
            "outcome": outcome,
        }
        if outcome == "declined":
            payment["decline_code"] = rng.choice(DECLINES)
        return {
            "@timestamp": self._timestamp(ts),
            "account": self._account(),
            "service": "payments",
            "level": "warn" if outcome == "declined" else "info",
            "event": f"payment.{outcome}",
            "message": f"payment {outcome} via {payment['provider']}",
            "payment": payment,
            "kubernetes": self._k8s("payments"),
        }

    def _platform(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        service = rng.choice(list(SERVICES))
        kind = rng.choice(["restart", "oom", "probe", "gc"])
        messages = {
            "restart": "Back-off restarting failed container",
            "oom": "Memory cgroup out of memory: Killed process (OOMKilled)",
            "probe": "Readiness probe failed: HTTP probe failed with statuscode: 503",
            "gc": f"GC pause {rng.randint(5, 900)}ms",
        }
        doc = {
            "@timestamp": self._timestamp(ts),
            "account": "platform",
            "service": service,
            "level": "error" if kind in ("restart", "oom") else "warn",
            "event": f"pod.{kind}",
            "message": messages[kind],
            "kubernetes": self._k8s(service),
        }
        if kind == "gc":
            doc["gc_pause_ms"] = int(messages["gc"].split()[2][:-2])
        return doc


def write_logs(path: str | Path, lines: int, config: GeneratorConfig) -> Path:
    """``l2m generate``: ``lines`` logs of ``config`` into the JSON-lines file ``path`` (gzip
    when it ends in ``.gz``), its folder made if missing; returns the path written."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wb") if out.suffix == ".gz" else out.open("wb") as f:
        for line in LogGenerator(config).lines(lines):
            f.write(line + b"\n")
    return out


def tenant(k: int) -> str:
    """The name of tenant account ``k`` (``GeneratorConfig.accounts``)."""
    return f"acct-{k:04d}"


def _iso(ts: int, tz: timezone) -> str:
    moment = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ts)).astimezone(tz)
    return moment.isoformat(timespec="milliseconds")
