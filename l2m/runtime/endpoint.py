"""The HTTP endpoint of ``l2m run`` and ``l2m deliver`` (docs/metrics.md): ``/metrics``
(Prometheus text, from a ``prometheus_client`` registry), ``/healthz`` (liveness) and
``/readyz`` (readiness); for ``l2m run`` with live rules, ``POST /-/reload`` (docs/streaming.md
"Live rule changes"), taken only from the loopback address — whoever can reach it can only
make the job read its own rule files again, and a pod's loopback is the pod's own.

Input: what is monitored — :class:`l2m.runtime.telemetry.Telemetry` (the driver) or
:class:`l2m.runtime.delivermetrics.DeliveryTelemetry` (delivery), any :class:`Monitored` — and
the configured host and port. Output: a server on a daemon thread, answering until
:meth:`Endpoint.close`. Scrapes never touch Spark nor Kafka: they read what the runner or the
delivery threads recorded."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from l2m.errors import ConfigError


class Monitored(Protocol):
    """What the endpoint serves: the metrics' registry, liveness and readiness."""

    @property
    def registry(self) -> CollectorRegistry: ...

    @property
    def ready(self) -> bool: ...

    def healthy(self) -> bool: ...


# How often the server looks at whether close() asked it to stop: close() waits up to this
# (serve_forever's default, 0.5 s, was paid by every `l2m run` and `l2m deliver` as it ended).
POLL_S = 0.05

# A reload asked over HTTP: it returns (HTTP status, text) once the job has tried it.
Reload = Callable[[], tuple[int, str]]


class Endpoint:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` (port 0: a free one; see
    :attr:`port`); ``POST /-/reload`` calls ``reload`` when there is one."""

    def __init__(self, telemetry: Monitored, host: str, port: int,
                 reload: Reload | None = None) -> None:
        self.telemetry = telemetry
        handler = type("Handler", (_Handler,), {"telemetry": telemetry,
                                                "reload": staticmethod(reload) if reload
                                                else None})
        try:
            self.server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"monitoring: cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}") from None
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, args=(POLL_S,),
                                        name="l2m-endpoint", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    telemetry: Monitored
    reload: Reload | None = None
    server_version = "l2m"

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/-/reload":
            self._send(404, b"not found: POST /-/reload\n")
            return
        if self.reload is None:
            self._send(404, b"live rules are off here (l2m run --once, l2m deliver)\n")
            return
        if not ipaddress.ip_address(self.client_address[0]).is_loopback:
            self._send(403, b"reload is taken from the loopback address only (kubectl exec "
                            b"into the driver's pod, or send it SIGHUP)\n")
            return
        status, text = self.reload()
        self._send(status, text.encode() + b"\n")

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._send(200, encoder(self.telemetry.registry), content_type)
        elif path == "/healthz":
            ok = self.telemetry.healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n")
        elif path == "/readyz":
            ok = self.telemetry.ready
            self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n")
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n")

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
              ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # probes every few seconds would drown the progress lines
