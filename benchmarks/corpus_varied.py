"""A second benchmark corpus, unlike the harness's own (:mod:`l2m.dev.generator`) and not
shaped by l2m (issue 58, deliverable 3): logs from six kinds of sources behind one topic,
as a shared logging pipeline receives them.

* **edge** — an ingress's access log in ECS style: dotted top-level keys
  (``http.response.status_code``), the status a numeric string in a fifth of the logs, the
  duration in nanoseconds as a string, the raw access line as ``message``;
* **app** — JVM services: nested ``log``/``service``/``trace`` objects, the level in upper
  case, errors with a Java stack trace in the message (up to 4 KB a log), ``user`` null;
* **db** — a database's slow-query log: the duration a numeric string, the statement in the
  message, a space between date and time in the timestamp;
* **audit** — nested five or six levels (``audit.target.resource.owner.org.id``), lists;
* **telemetry** — devices sending 15–60 flat readings a log, some of them null;
* **syslog** — short host lines (≈ 100 bytes): sshd, cron, the kernel's OOM killer.

Timestamps, one of: ISO-8601 with ``Z``, with an offset (``+05:30``, ``-08:00``, ``+0100``),
with milliseconds, microseconds or none, a space instead of ``T``; epoch milliseconds as an
integer or with a fraction. Deterministic by seed; event times move forward as the harness's
do. Input: a seed, a start time. Output: log documents (:meth:`VariedGenerator.next_doc`) or
their JSON bytes (:meth:`VariedGenerator.next_line`), 100 bytes to 4 KB each."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson

# (kind, weight): what a shared pipeline's topic carries, by share of logs.
SOURCES = (("edge", 30), ("app", 25), ("db", 10), ("audit", 8), ("telemetry", 15),
           ("syslog", 12))
OFFSETS = (timedelta(hours=5, minutes=30), timedelta(hours=-8), timedelta(hours=1),
           timedelta(hours=-3), timedelta(hours=9), timedelta(0))
HOSTS = [f"ip-10-{a}-{b}-{c}" for a in (0, 4) for b in (12, 77) for c in (5, 19, 201)]
EDGE_ROUTES = ["/", "/static/app.{h}.js", "/api/v2/orders/{n}", "/api/v2/orders",
               "/api/v2/catalog/items/{n}", "/api/v2/cart", "/graphql", "/login",
               "/api/v2/users/{n}/preferences", "/favicon.ico", "/metrics", "/ws/notify"]
AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "okhttp/4.12.0", "curl/8.5.0", "Go-http-client/2.0",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "python-requests/2.32.3", "kube-probe/1.31",
]
STATUSES = ([200] * 70 + [201] * 5 + [204] * 4 + [304] * 6 + [301, 302, 400, 400, 401, 403]
            + [404] * 4 + [429, 499, 500, 502, 502, 503, 504])
APP_SERVICES = {
    "orders": "com.acme.orders", "billing": "com.acme.billing",
    "inventory": "io.acme.inventory", "notifications": "com.acme.notify",
    "gateway": "io.acme.gateway",
}
APP_INFO = [
    "Order {n} created for customer {c} with {k} items",
    "Processed {k} messages from queue orders.events in {ms} ms",
    "Cache refresh completed: {k} entries loaded",
    "Scheduled job InvoiceReconciliation finished in {ms} ms",
    "HTTP GET /internal/health returned 200",
    "Started {cls} in {s} seconds (process running for {s2})",
    "User {c} updated notification preferences",
    "Retrying request to payment-provider (attempt {a} of 3)",
]
APP_WARN = [
    "Slow response from inventory-service: {ms} ms exceeds threshold of 500 ms",
    "Connection pool HikariPool-1 is at {p}% capacity",
    "Deprecated API /api/v1/orders called by client {c}",
    "Rate limit approaching for tenant {c}: {k} requests in the last minute",
]
APP_ERRORS = [
    ("java.net.SocketTimeoutException", "Read timed out", "Request to payment-provider failed"),
    ("java.net.ConnectException", "Connection refused (Connection refused)",
     "Could not reach inventory-service"),
    ("org.springframework.dao.DataIntegrityViolationException",
     "could not execute statement; constraint [orders_pkey]", "Failed to persist order {n}"),
    ("java.lang.NullPointerException", "Cannot invoke \"Customer.getId()\" because "
     "\"customer\" is null", "Unhandled exception in request handler"),
    ("io.grpc.StatusRuntimeException", "DEADLINE_EXCEEDED: deadline exceeded after 4.99s",
     "gRPC call to notifications failed"),
    ("org.postgresql.util.PSQLException", "ERROR: deadlock detected",
     "Transaction rolled back after deadlock"),
]
FRAMES = [
    "org.springframework.web.servlet.FrameworkServlet.processRequest(FrameworkServlet.java:1014)",
    "org.apache.catalina.core.ApplicationFilterChain.doFilter(ApplicationFilterChain.java:166)",
    "org.springframework.transaction.support.TransactionTemplate.execute(TransactionTemplate"
    ".java:140)",
    "com.zaxxer.hikari.pool.HikariProxyPreparedStatement.executeUpdate(HikariProxyPrepared"
    "Statement.java)",
    "io.netty.channel.AbstractChannelHandlerContext.invokeChannelRead(AbstractChannelHandler"
    "Context.java:444)",
    "java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1144)",
    "java.base/java.lang.Thread.run(Thread.java:1583)",
    "reactor.core.publisher.MonoFlatMap$FlatMapMain.onNext(MonoFlatMap.java:132)",
    "okhttp3.internal.connection.RealCall.execute(RealCall.kt:154)",
]
TABLES = ["orders", "order_items", "customers", "invoices", "inventory_levels", "audit_log"]
STATEMENTS = [
    "SELECT o.id, o.status, o.total FROM {t} o WHERE o.customer_id = ${k} ORDER BY o.created_at "
    "DESC LIMIT 50",
    "UPDATE {t} SET status = $1, updated_at = now() WHERE id = ${k}",
    "INSERT INTO {t} (id, payload, created_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING",
    "SELECT count(*) FROM {t} WHERE created_at > now() - interval '1 hour'",
    "DELETE FROM {t} WHERE expires_at < now()",
    "SELECT * FROM {t} JOIN customers c ON c.id = {t}.customer_id WHERE c.region = $1 AND "
    "{t}.total > $2",
]
ACTIONS = ["iam.role.assign", "iam.user.login", "storage.bucket.read", "storage.object.delete",
           "secrets.version.access", "billing.invoice.export", "cluster.node.drain"]
ROLES = ["viewer", "editor", "admin", "billing-admin", "auditor"]
SENSORS = ["temp_c", "humidity_pct", "pressure_hpa", "battery_v", "rssi_dbm", "co2_ppm",
           "lux", "vibration_g", "voltage_v", "current_a", "fan_rpm", "door_open",
           "uptime_s", "packets_lost", "fw_build"]
SYSLOG = [
    ("sshd", "Failed password for invalid user {u} from 203.0.113.{n} port {p} ssh2"),
    ("sshd", "Accepted publickey for deploy from 10.0.{n}.{m} port {p} ssh2"),
    ("CRON", "(root) CMD (/usr/local/bin/backup.sh --incremental)"),
    ("CRON", "(root) CMD (run-parts /etc/cron.hourly)"),
    ("kernel", "Out of memory: Killed process {p} (java) total-vm:{k}kB"),
    ("systemd", "Started Session {p} of User ubuntu."),
    ("systemd", "Stopped nginx."),
    ("kernel", "TCP: request_sock_TCP: Possible SYN flooding on port 443. Sending cookies."),
    ("dockerd", "time=\"{iso}\" level=warning msg=\"Health check for container {h} error: "
     "timeout\""),
]


@dataclass
class VariedConfig:
    seed: int = 58
    start_ms: int = 1_795_341_600_000  # 2026-11-22T10:00:00Z, as the harness's corpus
    rate_per_s: float = 2000.0  # event-time spacing, not wall clock


class VariedGenerator:
    """Logs of the six sources in event-time order, one seeded stream."""

    def __init__(self, config: VariedConfig | None = None) -> None:
        self.config = config or VariedConfig()
        self.rng = random.Random(self.config.seed)
        self.clock = float(self.config.start_ms)
        kinds, weights = zip(*SOURCES, strict=True)
        self._kinds = list(kinds)
        self._weights = list(weights)
        self._make = {"edge": self._edge, "app": self._app, "db": self._db,
                      "audit": self._audit, "telemetry": self._telemetry,
                      "syslog": self._syslog}

    def next_doc(self) -> dict[str, Any]:
        """The next log document."""
        self.clock += self.rng.expovariate(self.config.rate_per_s) * 1000.0
        kind = self.rng.choices(self._kinds, self._weights)[0]
        return self._make[kind](int(self.clock))

    def next_line(self) -> bytes:
        """The next log as JSON bytes."""
        return orjson.dumps(self.next_doc())

    def lines(self, n: int) -> Iterator[bytes]:
        """``n`` logs as JSON bytes."""
        for _ in range(n):
            yield self.next_line()

    # --- timestamps ---

    def _time(self, ts: int) -> Any:
        rng = self.rng
        form = rng.random()
        if form < 0.25:
            return ts
        if form < 0.32:
            # some shippers write epoch milliseconds with a sub-millisecond fraction
            return ts + rng.randrange(1000) / 1000
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ts)
        if form < 0.55:
            return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        local = moment.astimezone(timezone(rng.choice(OFFSETS)))
        if form < 0.75:
            return local.isoformat(timespec="microseconds")
        if form < 0.85:
            return local.isoformat(timespec="seconds")
        if form < 0.93:
            return local.isoformat(sep=" ", timespec="milliseconds")
        # Python's logging %z: an offset without its colon
        text = local.isoformat(timespec="milliseconds")
        return text[:-3] + text[-2:]

    # --- sources ---

    def _edge(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        route = rng.choice(EDGE_ROUTES)
        path = route.replace("{n}", str(rng.randint(1, 99_999))).replace(
            "{h}", f"{rng.getrandbits(32):08x}")
        method = "GET" if rng.random() < 0.75 else rng.choice(["POST", "PUT", "PATCH",
                                                                 "DELETE", "OPTIONS"])
        status = rng.choice(STATUSES)
        size = 0 if status in (204, 304) else int(rng.lognormvariate(7.5, 1.6))
        nanos = int(rng.lognormvariate(17.0, 1.2) * (6 if status >= 500 else 1))
        ip = f"{rng.choice([10, 172, 198, 203])}.{rng.randint(0, 255)}.{rng.randint(0, 255)}." \
             f"{rng.randint(1, 254)}"
        agent = rng.choice(AGENTS)
        when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ts)
        line = (f'{ip} - - [{when.strftime("%d/%b/%Y:%H:%M:%S +0000")}] "{method} {path} '
                f'HTTP/1.1" {status} {size} "-" "{agent}" {nanos / 1e9:.3f}')
        doc: dict[str, Any] = {
            "@timestamp": self._time(ts),
            "event.dataset": "ingress.access",
            "host.name": rng.choice(HOSTS),
            "source.ip": ip,
            "http.request.method": method,
            "url.path": path,
            # a fifth of the ingresses write every field as a string
            "http.response.status_code": status if rng.random() < 0.8 else str(status),
            "http.response.body.bytes": size,
            "event.duration": str(nanos),
            "user_agent.original": agent,
            "message": line,
        }
        if rng.random() < 0.3:
            doc["http.request.referrer"] = None
        if rng.random() < 0.15:
            doc["url.query"] = "&".join(f"{k}={rng.randint(0, 999)}" for k in
                                        rng.sample(["page", "size", "sort", "q", "lang", "v"],
                                                   rng.randint(1, 4)))
        return doc

    def _app(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        service = rng.choice(list(APP_SERVICES))
        package = APP_SERVICES[service]
        roll = rng.random()
        fill = {"n": rng.randint(10_000, 999_999), "c": f"cus_{rng.getrandbits(40):010x}",
                "k": rng.randint(1, 400), "ms": rng.randint(3, 4_000), "p": rng.randint(60, 100),
                "a": rng.randint(1, 3), "s": round(rng.uniform(3, 40), 3),
                "s2": round(rng.uniform(40, 90), 3),
                "cls": f"{service.capitalize()}Application"}
        if roll < 0.07:
            level = "ERROR"
            kind, reason, headline = rng.choice(APP_ERRORS)
            frames = rng.randint(4, 48)
            trace = "\n\tat ".join(rng.choice(FRAMES) for _ in range(frames))
            message = (f"{headline.format(**fill)}\n{kind}: {reason}\n\tat {package}."
                       f"{service.capitalize()}Service.handle({service.capitalize()}Service"
                       f".java:{rng.randint(40, 900)})\n\tat {trace}")
            # a shipper cuts a multi-line event at 4 KB
            message = message[:3_550]
        elif roll < 0.2:
            level = "WARN"
            message = rng.choice(APP_WARN).format(**fill)
        elif roll < 0.3:
            level = "DEBUG"
            message = rng.choice(APP_INFO).format(**fill)
        else:
            level = "INFO"
            message = rng.choice(APP_INFO).format(**fill)
        doc: dict[str, Any] = {
            "@timestamp": self._time(ts),
            "log": {"level": level, "logger": f"{package}.{rng.choice(['web', 'core', 'jobs'])}"
                    f".{service.capitalize()}{rng.choice(['Controller', 'Service', 'Worker'])}"},
            "service": {"name": service, "version": f"2.{rng.randint(10, 14)}.{rng.randint(0, 9)}",
                        "environment": "production" if rng.random() < 0.9 else "staging"},
            "process": {"thread": {"name": f"http-nio-8080-exec-{rng.randint(1, 200)}"}},
            "trace": {"id": f"{rng.getrandbits(128):032x}"},
            "span": {"id": f"{rng.getrandbits(64):016x}"},
            "message": message,
            "user": None if rng.random() < 0.6 else {"id": fill["c"]},
        }
        if level == "ERROR":
            doc["error"] = {"type": kind}
        if "queue" in message:
            doc["labels"] = {"queue": "orders.events", "batch_size": str(fill["k"])}
        return doc

    def _db(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        table = rng.choice(TABLES)
        statement = rng.choice(STATEMENTS).format(t=table, k=rng.randint(1, 9))
        duration = round(rng.lognormvariate(4.5, 1.3), 3)
        doc: dict[str, Any] = {
            "@timestamp": self._time(ts),
            "event": {"dataset": "postgresql.log", "kind": "event"},
            "postgresql": {"log": {
                "duration_ms": f"{duration:.3f}",  # the log's text, kept a string
                "database": rng.choice(["shop", "shop", "billing", "analytics"]),
                "user": rng.choice(["app", "app", "app", "reporting", "migrator"]),
                "sql_state_code": "00000" if rng.random() < 0.97 else rng.choice(
                    ["40P01", "57014", "23505"]),
            }},
            "host": {"name": f"pg-{rng.choice(['primary', 'replica-1', 'replica-2'])}"},
            "message": f"duration: {duration:.3f} ms  statement: {statement}",
        }
        if rng.random() < 0.2:
            doc["postgresql"]["log"]["application_name"] = None
        return doc

    def _audit(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        action = rng.choice(ACTIONS)
        outcome = "success" if rng.random() < 0.9 else "failure"
        user = f"u{rng.randint(1, 5000):05d}"
        org = f"org-{rng.randint(1, 40):03d}"
        return {
            "@timestamp": self._time(ts),
            "audit": {
                "action": action,
                "outcome": outcome,
                "actor": {"user": {"id": user, "roles": rng.sample(ROLES, rng.randint(1, 3)),
                                   "mfa": rng.random() < 0.8},
                          "client": {"ip": f"198.51.100.{rng.randint(1, 254)}",
                                     "geo": {"country": rng.choice(["DE", "US", "FR", "IN",
                                                                    "BR", "JP"])}}},
                "target": {"resource": {"type": action.split(".")[1],
                                        "id": f"res-{rng.getrandbits(48):012x}",
                                        "owner": {"org": {"id": org,
                                                          "tier": rng.choice(["free", "pro",
                                                                              "enterprise"])}}}},
                "request": {"id": f"{rng.getrandbits(96):024x}", "latency_ms": rng.randint(1, 900)},
            },
            "message": f"{action} by {user} on behalf of {org}: {outcome}",
        }

    def _telemetry(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        device = f"dev-{rng.randint(1, 3000):05d}"
        doc: dict[str, Any] = {"@timestamp": self._time(ts), "device.id": device,
                               "device.model": rng.choice(["TH-200", "TH-210", "GW-9", "PX-4"]),
                               "site": rng.choice(["ber-1", "ber-2", "par-1", "blr-3"])}
        readings = rng.randint(15, 60)
        for i in range(readings):
            name = f"{SENSORS[i % len(SENSORS)]}" + (f"_{i // len(SENSORS)}" if i >= len(SENSORS)
                                                     else "")
            roll = rng.random()
            if roll < 0.05:
                value: Any = None
            elif name.startswith("door_open"):
                value = rng.random() < 0.1
            elif name.startswith("fw_build"):
                value = str(rng.randint(1000, 1100))
            else:
                value = round(rng.uniform(-20, 1200), rng.choice([0, 1, 2, 4]))
            doc[f"m.{name}"] = value
        doc["message"] = f"telemetry {device} {readings} readings"
        return doc

    def _syslog(self, ts: int) -> dict[str, Any]:
        rng = self.rng
        program, text = rng.choice(SYSLOG)
        iso = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ts)).isoformat(
            timespec="seconds")
        message = text.format(u=rng.choice(["admin", "oracle", "test", "ubuntu", "git"]),
                              n=rng.randint(1, 254), m=rng.randint(1, 254),
                              p=rng.randint(1024, 65535), k=rng.randint(2_000_000, 9_000_000),
                              h=f"{rng.getrandbits(48):012x}", iso=iso)
        return {"@timestamp": self._time(ts), "host": rng.choice(HOSTS), "program": program,
                "pid": rng.randint(100, 99_999), "message": message}


def _produce_slice(bootstrap: str, topic: str, seed: int, worker: int, workers: int,
                   counts: list[int]) -> int:
    """This worker's share of every partition's records, from a generator of its own."""
    from benchmarks.load import produce_share

    gen = VariedGenerator(VariedConfig(seed=seed + worker))
    return produce_share(bootstrap, topic, counts, worker, workers, gen.next_line)


def preload_varied(bootstrap: str, topic: str, partitions: int, records: int, seed: int = 58,
                   workers: int = 2) -> float:
    """A backlog of ``records`` logs of this corpus spread evenly over ``partitions`` of an
    existing ``topic``, by ``workers`` processes, each partition then closed as
    :func:`benchmarks.load.preload` closes them. Returns seconds."""
    import multiprocessing as mp
    import time

    from benchmarks.load import close_partitions

    counts = [records // partitions + (1 if p < records % partitions else 0)
              for p in range(partitions)]
    started = time.monotonic()
    with mp.get_context("spawn").Pool(workers) as pool:
        pool.starmap(_produce_slice, [(bootstrap, topic, seed, w, workers, counts)
                                      for w in range(workers)])
    close_partitions(bootstrap, topic, partitions)
    return time.monotonic() - started
