"""Plain HTTP calls the tests make to l2m's and Prometheus' endpoints: the status and body,
an error status included (never raised)."""

from __future__ import annotations

import urllib.error
import urllib.request


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
