"""Plain HTTP calls the tests make to l2m's and Prometheus' endpoints: the status and body,
an error status included (never raised); and a local HTTP server standing in for a
remote-write receiver."""

from __future__ import annotations

import contextlib
import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

# How often a test's server looks at whether it is asked to shut down.
POLL_S = 0.01


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A server on a free loopback port answering with ``handler`` while the block runs: its
    base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # serve_forever's default 0.5 s poll is how long shutdown() waits, paid by every test.
    threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str) -> tuple[int, str]:
    """GET ``url``: (status, body)."""
    return _call(urllib.request.Request(url), timeout=5)


def post(url: str) -> tuple[int, str]:
    """POST to ``url`` with no body: (status, body); a reload answers once it is done."""
    return _call(urllib.request.Request(url, method="POST"), timeout=120)


def _call(request: urllib.request.Request, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
