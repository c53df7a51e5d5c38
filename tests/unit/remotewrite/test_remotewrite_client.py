"""The remote-write sender (issue 22) against a local HTTP receiver that answers as scripted:
5xx, 429 and failed connections are retried with backoff until they pass, any other 4xx is
final after one attempt, the tenant header and the spec's headers go with every request."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from l2m.errors import RemoteWriteError
from l2m.remotewrite.client import Endpoint, Sender, retriable


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self, answers: list[tuple[int, dict[str, str]]]) -> None:
        self.answers = answers
        self.seen: list[tuple[dict[str, str], bytes]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((dict(self.headers), data))
        status, headers = self.server.answers.pop(0) if self.server.answers else (204, {})
        text = b"" if status < 300 else f"answer {status}".encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver([])
    # serve_forever's default 0.5 s poll is how long shutdown() would wait, in every test.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def sender(server: Receiver, waits: list[float], **kw) -> Sender:
    host, port = server.server_address[:2]
    return Sender(Endpoint(f"http://{host}:{port}/api/v1/write", **kw), sleep=waits.append)


def test_5xx_and_429_are_retried_with_backoff_until_they_pass(receiver):
    receiver.answers = [(500, {}), (503, {}), (429, {"Retry-After": "2"}), (502, {})]
    waits: list[float] = []
    got = sender(receiver, waits, headers={"Authorization": "Bearer t"}).send(b"body", "acme")
    assert (got.sent, got.status, got.attempts) == (True, 204, 5)
    assert waits == [0.03, 0.06, 2.0, 0.24]  # doubling; Retry-After honoured
    assert {d for _h, d in receiver.seen} == {b"body"}  # the same bytes every time
    headers = receiver.seen[-1][0]
    assert headers["X-Scope-OrgID"] == "acme" and headers["Authorization"] == "Bearer t"
    assert headers["Content-Encoding"] == "snappy"
    assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"


def test_any_other_4xx_is_final_after_one_attempt(receiver):
    receiver.answers = [(400, {})]
    waits: list[float] = []
    got = sender(receiver, waits, tenant_header=None).send(b"body", "acme")
    assert (got.sent, got.status, got.reason, got.attempts) == (False, 400, "answer 400", 1)
    assert waits == [] and "X-Scope-OrgID" not in receiver.seen[0][0]


def test_a_receiver_that_is_down_is_retried_until_the_sender_is_stopped():
    server = Receiver([])
    host, port = server.server_address[:2]
    server.server_close()  # nothing listens there now
    waits: list[float] = []
    stops = iter([False, False, True])  # the job stops during the third attempt's wait
    got = Sender(Endpoint(f"http://{host}:{port}/w", max_backoff_s=0.05), sleep=waits.append,
                 stop=lambda: next(stops)).send(b"x")
    assert (got.sent, got.status, got.attempts) == (False, 0, 3)
    assert "ConnectionRefusedError" in got.reason
    assert waits == [0.03, 0.05]  # doubling, capped by max_backoff_s


def test_retriable_answers_and_bad_urls():
    assert [s for s in (200, 204, 400, 404, 409, 413, 429, 500, 503) if retriable(s)] == \
        [429, 500, 503]
    with pytest.raises(RemoteWriteError, match="expected http"):
        Endpoint("ftp://example/write")


def test_each_retry_is_reported_before_its_backoff(receiver):
    """What l2m_remote_write_requests_total{outcome="retried"} counts: one per attempt that
    is made again, none for the final answer."""
    receiver.answers = [(503, {}), (500, {})]
    events: list[str] = []
    got = Sender(Endpoint(f"http://127.0.0.1:{receiver.server_address[1]}/w"),
                 sleep=lambda s: events.append(f"sleep {s}"),
                 on_retry=lambda status, text: events.append(f"retry {status}")).send(b"x")
    assert got.sent and events == ["retry 503", "sleep 0.03", "retry 500", "sleep 0.06"]


def test_a_connection_that_cannot_be_made_is_retried_not_raised(tmp_path):
    """A CA file missing mid-rotation (or a certificate that does not load) fails the
    connection, which is retried with backoff like any other, until the sender is stopped."""
    waits: list[float] = []
    stops = iter([False, True])
    got = Sender(Endpoint("https://127.0.0.1:9/w", ca_file=str(tmp_path / "ca.pem")),
                 sleep=waits.append, stop=lambda: next(stops)).send(b"x", "acme")
    assert (got.sent, got.status, got.attempts) == (False, 0, 2)
    assert got.reason.startswith("FileNotFoundError: ") and waits == [0.03]


@pytest.mark.parametrize(("header", "wait"), [
    ("\xb2", 0.03),  # "²".isdigit() is True; float() refuses it
    ("Wed, 21 Oct 2026 07:28:00 GMT", 0.03),  # an HTTP-date: ignored
    ("1e3", 0.03), ("-1", 0.03), ("1234567890", 0.03),
    (" 2 ", 2.0), ("9", 5.0),  # capped by max_backoff_s
])
def test_retry_after_counts_only_ascii_seconds(receiver, header, wait):
    receiver.answers = [(503, {"Retry-After": header})]
    waits: list[float] = []
    got = sender(receiver, waits).send(b"x", "acme")
    assert got.sent and waits == [wait]


def test_a_bounded_sender_returns_credentials_refused_that_many_times_in_a_row(receiver):
    """What l2m deliver --once uses: a 401/403 answered auth_attempts times in a row is
    returned; a 5xx between them starts the count again."""
    receiver.answers = [(401, {}), (503, {}), (403, {}), (401, {}), (401, {})]
    waits: list[float] = []
    host, port = receiver.server_address[:2]
    got = Sender(Endpoint(f"http://{host}:{port}/w"), sleep=waits.append,
                 auth_attempts=2).send(b"x")
    assert (got.sent, got.status, got.attempts) == (False, 401, 4) and len(waits) == 3
