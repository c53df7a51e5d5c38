"""A remote-write receiver that misbehaves on cue, in front of a real Prometheus: an HTTP
server forwarding each POST to Prometheus's ``/api/v1/write`` unless the test's script says
otherwise — a status held for every request (a 401 while a token is "rotated"), statuses for
the next few requests (5xx for a while), a 400 for any request holding a series with a marked
label value, slow answers — and a record of every request it was sent, its samples decoded,
so that a test can check that no (series, timestamp) was ever sent with two values.

The body is decoded here independently of :mod:`l2m.remotewrite.encode` (snappy block format,
then the protobuf ``WriteRequest`` read field by field): a test of the encoder's output should
not read it back with the encoder's own assumptions."""

from __future__ import annotations

import http.server
import math
import struct
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cramjam

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it: the tenant header, the series (sorted labels →
    (timestamp ms, value) samples), the status the client got, whether Prometheus was asked
    (``forwarded``), and the number of the delivery process that sent it (the test's
    :attr:`Receiver.era` when it arrived)."""

    tenant: str | None
    series: tuple[tuple[Labels, tuple[tuple[int, float], ...]], ...]
    status: int
    forwarded: bool
    era: int

    @property
    def samples(self) -> int:
        return sum(len(points) for _, points in self.series)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of a protobuf message: an int for a varint, 8 raw bytes for a
    64-bit field, the bytes of a length-delimited one."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at:at + size], at + size
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        else:
            raise ValueError(f"protobuf wire type {wire} in a WriteRequest")
        yield number, value


def decode(body: bytes) -> list[tuple[Labels, tuple[tuple[int, float], ...]]]:
    """A remote-write 1.0 body's series: sorted (name, value) labels and (timestamp, value)
    samples; metadata is ignored."""
    out = []
    for number, series in _fields(bytes(cramjam.snappy.decompress_raw(body))):
        if number != 1:  # 3: metadata
            continue
        labels, samples = [], []
        for part, value in _fields(series):
            if part == 1:
                label = dict(_fields(value))
                labels.append((label.get(1, b"").decode(), label.get(2, b"").decode()))
            elif part == 2:
                sample = dict(_fields(value))
                timestamp = sample.get(2, 0)
                if timestamp >= 1 << 63:
                    timestamp -= 1 << 64
                raw = sample.get(1)
                samples.append((timestamp, struct.unpack("<d", raw)[0] if raw else 0.0))
        out.append((tuple(sorted(labels)), tuple(samples)))
    return out


class Receiver:
    """The misbehaving receiver (module docstring) while used as a context manager; its
    :attr:`url` is where l2m sends. The script is changed by the test at any time:

    * :attr:`hold`: a status answered to every request while set (None: off);
    * :attr:`token`: when set, a 401 to every request without ``Authorization: Bearer
      <token>`` (l2m's credentials refused until it reads the rotated token);
    * :attr:`next`: statuses answered to the next requests, one each, before anything else
      (a status, or a status and the headers to answer it with);
    * :attr:`refuse_value`: a 400 to any request holding a series with a label of this value;
    * :attr:`delay_s`: how long each forwarded request waits first (a slow receiver).

    :attr:`era` is stamped on each :class:`Received`: the test raises it when it starts
    another delivery process."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.hold: int | None = None
        self.token: str | None = None
        self.next: deque[int | tuple[int, dict[str, str]]] = deque()
        self.refuse_value: str | None = None
        self.delay_s = 0.0
        self.era = 0
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver._handle(self)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/api/v1/write"

    def __enter__(self) -> Receiver:
        # serve_forever's default 0.5 s poll is how long __exit__'s shutdown() would wait.
        threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers["Content-Length"]))
        series = tuple(decode(body))
        headers: dict[str, str] = {}
        with self._lock:
            era = self.era
            if self.hold is not None:
                status: int | None = self.hold
            elif self.token is not None and \
                    handler.headers.get("Authorization") != f"Bearer {self.token}":
                status = 401
            elif self.next:
                scripted = self.next.popleft()
                status, headers = scripted if isinstance(scripted, tuple) else (scripted, {})
            elif self.refuse_value is not None and any(
                    value == self.refuse_value for labels, _ in series for _, value in labels):
                status = 400
            else:
                status = None
            delay = self.delay_s
        text = b"refused by the test's script"
        forwarded = status is None
        if status is None:
            time.sleep(delay)
            request = urllib.request.Request(
                self.target, data=body, method="POST",
                headers={k: v for k, v in handler.headers.items() if k.lower() != "host"})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, text = answer.status, answer.read()
            except urllib.error.HTTPError as refused:
                status, text = refused.code, refused.read()
        with self._lock:
            self.received.append(Received(handler.headers.get("X-Scope-OrgID"), series, status,
                                          forwarded, era))
        try:
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("Content-Length", str(len(text)))
            handler.end_headers()
            handler.wfile.write(text)
        except (BrokenPipeError, ConnectionResetError):  # the client was killed meanwhile
            pass

    def requests(self, era: int | None = None) -> list[Received]:
        """Every request received (those of delivery process ``era`` only, if given)."""
        with self._lock:
            return [r for r in self.received if era is None or r.era == era]

    def conflicts(self) -> dict[tuple[Labels, int], set[str]]:
        """Every (series, timestamp) sent in any request with two different values (values
        compared by their text, so that two NaNs are one value)."""
        seen: dict[tuple[Labels, int], set[str]] = {}
        for request in self.requests():
            for labels, points in request.series:
                for at, value in points:
                    seen.setdefault((labels, at), set()).add(
                        "NaN" if math.isnan(value) else repr(value))
        return {key: values for key, values in seen.items() if len(values) > 1}
