"""An endpoint's delivery loop (l2m.runtime.deliver.EndpointDelivery) over a scripted consumer
and sender, no broker (issue 53): an unexpected error is reported, counted and survived, the
poll that caused it is built record by record with the failing record skipped; a refused
request is split only when its samples may be the cause, a request refused as too old costs
about log2 of its samples; a LogAppendTime topic is said once."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import cramjam
import orjson
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from l2m.config.job import JobConfig, RemoteWriteConfig, RemoteWriteEndpoint
from l2m.errors import RemoteWriteError
from l2m.remotewrite.client import Delivery
from l2m.remotewrite.outbox import ERROR, LOG_APPEND_TIME, Request
from l2m.runtime import deliver as deliver_module
from l2m.runtime.deliver import EndpointDelivery
from tests.unit.remotewrite.test_remotewrite import decode
from tests.unit.remotewrite.test_remotewrite_outbox import W, sample


@dataclass
class Record:
    value_: bytes
    offset_: int
    kind: int = TIMESTAMP_CREATE_TIME
    headers_: list[tuple[str, bytes]] = field(default_factory=list)

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return self.kind, W + self.offset_

    def headers(self) -> list[tuple[str, bytes]]:
        return self.headers_

    def value(self) -> bytes:
        return self.value_

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.offset_


class Consumer:
    """One partition: each consume() gives the records from the committed offset on, as a
    consumer made again after a failure would."""

    def __init__(self, records: list[Record], consumers: list[Consumer]) -> None:
        self.records = records
        self.at = consumers[-1].at if consumers else 0
        self.commits: list[int] = []
        consumers.append(self)

    def consume(self, n: int, timeout: float) -> list[Record]:
        return [r for r in self.records if r.offset_ >= self.at][:n]

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        self.at = offsets[-1].offset
        self.commits.append(self.at)

    def get_watermark_offsets(self, tp: Any, **kw: Any) -> tuple[int, int]:
        return 0, len(self.records)

    def close(self) -> None:
        pass


class Sender:
    """Answers by the request's tenant (``answer``) and records each request."""

    def __init__(self, answer: Any = None) -> None:
        self.seen: list[tuple[str | None, bytes]] = []
        self.answer = answer or (lambda body, tenant: Delivery(204, "", 1))
        self.endpoint = type("E", (), {"headers": {"Authorization": "Bearer old-token"}})()
        self.headers = {"Authorization": "Bearer s3cret-token"}  # read again since

    def send(self, body: bytes, tenant: str | None = None) -> Delivery:
        self.seen.append((tenant, body))
        return self.answer(body, tenant)

    def close(self) -> None:
        pass


def loop(records: list[Record], sender: Sender, monkeypatch, **cfg: Any
         ) -> tuple[EndpointDelivery, list[str], list[Consumer]]:
    monkeypatch.setattr(deliver_module, "RESTART_MIN_S", 0.0)
    lines: list[str] = []
    consumers: list[Consumer] = []
    endpoint = RemoteWriteEndpoint(url="http://x/", name="ep", **cfg)
    job = JobConfig(remote_write=RemoteWriteConfig(endpoints=(endpoint,)))
    delivery = EndpointDelivery(job, endpoint, threading.Event(), once_idle_s=0.0,
                                log=lines.append)
    delivery.sender = sender  # type: ignore[assignment]

    def consumer() -> Consumer:
        delivery._partitions = [0]
        return Consumer(records, consumers)

    monkeypatch.setattr(delivery, "_consumer", consumer)
    return delivery, lines, consumers


def _poisoned(monkeypatch, account: str = "poison") -> None:
    """Building a sample of ``account`` raises (a bug the record triggers)."""
    add = deliver_module.Outbox.add

    def broken(self, value, *args, **kw):
        if orjson.loads(value).get("account") == account:
            raise RuntimeError("the outbox broke on s3cret-token")
        return add(self, value, *args, **kw)

    monkeypatch.setattr(deliver_module.Outbox, "add", broken)


def test_an_unexpected_error_restarts_the_loop_and_the_record_failing_twice_is_skipped(
        monkeypatch):
    records = [Record(sample(account=a), i) for i, a in enumerate(["acme", "poison", "globex"])]
    _poisoned(monkeypatch)
    sender = Sender()
    delivery, lines, consumers = loop(records, sender, monkeypatch)
    delivery.run()
    assert delivery.error is None and not delivery.stop.is_set()
    # The first attempt failed while building; the second built each record alone, the
    # poison skipped, then sent the others together, once.
    assert consumers[0].commits == [] and consumers[1].commits == [3]
    assert delivery.tally.errors == {"RuntimeError": 1}
    assert delivery.tally.skipped == {ERROR: 1}
    assert delivery.tally.sent == 2 and delivery.healthy()
    assert [t for t, _ in sender.seen] == ["acme", "globex"]
    assert lines[0] == ("l2m deliver: ep: unexpected error (RuntimeError: the outbox broke on "
                        "(not shown)); the endpoint starts again in 0 s from its last commit")
    assert lines[1] == ("l2m deliver: ep: record 0:1 skipped: building its request failed "
                        "twice (RuntimeError: the outbox broke on (not shown))")
    assert not any("s3cret" in line for line in lines)


def test_an_error_while_sending_skips_and_commits_nothing(monkeypatch):
    """An error of the endpoint (a CA file missing mid-rotation, raised by the sender) is no
    record's: the poll is neither skipped nor committed, however often it recurs (once: the
    endpoint gives up with it after three in a row)."""
    records = [Record(sample(account="acme"), i) for i in range(8)]

    def answer(body: bytes, tenant: str | None) -> Delivery:
        raise FileNotFoundError(2, "No such file or directory", "/etc/ca.pem")

    delivery, lines, consumers = loop(records, Sender(answer), monkeypatch)
    delivery.run()
    assert isinstance(delivery.error, FileNotFoundError)
    assert [c.commits for c in consumers] == [[], [], []]
    assert delivery.tally.skipped == {} and delivery.tally.sent == 0
    assert delivery.tally.errors == {"FileNotFoundError": 3}
    assert not any("skipped" in line for line in lines)


def test_after_a_sending_error_that_passes_the_poll_is_sent_whole(monkeypatch):
    records = [Record(sample(account="acme"), i) for i in range(4)]
    calls: list[str | None] = []

    def answer(body: bytes, tenant: str | None) -> Delivery:
        calls.append(tenant)
        if len(calls) == 1:
            raise OSError("connection reset")
        return Delivery(204, "", 1)

    delivery, _, consumers = loop(records, Sender(answer), monkeypatch)
    delivery.run()
    assert [c.commits for c in consumers] == [[], [4]] and len(calls) == 2
    assert (delivery.tally.sent, delivery.tally.skipped) == (4, {})


def test_an_error_that_passes_loses_nothing_and_healthz_fails_while_it_lasts(monkeypatch):
    records = [Record(sample(account="acme"), 0)]
    calls = []

    def answer(body: bytes, tenant: str | None) -> Delivery:
        calls.append(tenant)
        if len(calls) == 1:
            assert delivery.healthy()
            raise OSError("once")
        assert not delivery.healthy()  # recovering: /healthz fails until a poll is delivered
        return Delivery(204, "", 1)

    delivery, _, consumers = loop(records, Sender(answer), monkeypatch)
    delivery.run()
    assert (delivery.tally.sent, delivery.tally.skipped, consumers[-1].commits) == (1, {}, [1])
    assert delivery.healthy()


def _refusing(status: int, text: str):
    """A receiver refusing every request."""
    def answer(body: bytes, tenant: str | None) -> Delivery:
        return Delivery(status, text, 1)
    return answer


def _request(n: int) -> Request:
    from l2m.remotewrite.encode import Series
    return Request.of("acme", [Series({"__name__": "x_total", "i": str(i)}, [(W + i, 1.0)])
                               for i in range(n)], [])


@pytest.mark.parametrize(("status", "text", "requests", "reason"), [
    (401, "unauthorized", 1, "http_401"),  # about the endpoint: never split
    (403, "forbidden", 1, "http_403"),
    (404, "not found", 1, "http_404"),
    (413, "request too large", 1, "http_413"),
    (500, "too old sample", 12, "too_old"),  # Prometheus 2.42: a whole request too old
    (400, "out of bounds", 12, "too_old"),
    (400, "bad sample", 2 * 2000 - 1, "http_400"),  # a sample's: split down to each alone
])
def test_what_a_refusal_of_2000_samples_costs(status, text, requests, reason, monkeypatch):
    sender = Sender(_refusing(status, text))
    # A 401/403 is final here only with auth_failures: refuse (else it is retried).
    delivery, _, _ = loop([], sender, monkeypatch, auth_failures="refuse")
    assert delivery._send([_request(2000)])
    assert len(sender.seen) == requests
    assert delivery.tally.refused == {(reason, "acme"): 2000}


def test_a_request_partly_too_old_sends_every_sample_that_is_not(monkeypatch):
    from l2m.remotewrite.encode import Series

    def answer(body: bytes, tenant: str | None) -> Delivery:
        times = [s.timestamp for ts in decode(bytes(cramjam.snappy.decompress_raw(body)))
                 .timeseries for s in ts.samples]
        if min(times) < W + 700:
            return Delivery(500, "too old sample", 1)
        return Delivery(204, "", 1)

    sender = Sender(answer)
    delivery, _, _ = loop([], sender, monkeypatch)
    request = Request.of("acme", [Series({"__name__": "x_total", "i": str(i)},
                                         [(W + i, 1.0)]) for i in range(1000)], [])
    assert delivery._send([request])
    assert delivery.tally.sent == 300
    assert delivery.tally.refused == {("too_old", "acme"): 700}
    assert len(sender.seen) <= 2 * 10 + 1


def test_a_request_of_floats_and_histograms_partly_too_old_sends_every_one_that_is_not(
        monkeypatch):
    """Native histograms have another limit than floats (Prometheus 2.42: the head's hour, no
    out-of-order window): a newer half refused as too old for a histogram says nothing of the
    older half's floats, so that half is sent too."""
    from l2m.remotewrite.encode import Series, WireHistogram
    from tests.unit.remotewrite.test_encode_histograms import decode as decode_histograms

    def answer(body: bytes, tenant: str | None) -> Delivery:
        series = decode_histograms(bytes(cramjam.snappy.decompress_raw(body))).timeseries
        floats = [s.timestamp for ts in series for s in ts.samples]
        histograms = [h.timestamp for ts in series for h in ts.histograms]
        if min(floats, default=W + 100) < W + 100 or min(histograms, default=W + 700) < W + 700:
            return Delivery(400, "out of bounds", 1)
        return Delivery(204, "", 1)

    sender = Sender(answer)
    delivery, _, _ = loop([], sender, monkeypatch)
    request = Request.of("acme", [
        Series({"__name__": "x_total", "i": str(i)}, [(W + 2 * i, 1.0)]) if i % 2 == 0 else
        Series({"__name__": "h", "i": str(i)},
               histograms=[WireHistogram(W + 2 * i + 1, 1, 1.0, 0, zero_count=1)])
        for i in range(500)], [])
    assert request.mixed
    assert delivery._send([request])
    # floats from W + 100 on: i = 50, 52, … 498; histograms from W + 700: i = 351, 353, … 499
    assert delivery.tally.sent == 225 + 75
    assert delivery.tally.refused == {("too_old", "acme"): 200}


def test_a_topic_with_log_append_time_is_said_once_and_its_counters_skipped(monkeypatch):
    records = [Record(sample(), i, kind=TIMESTAMP_LOG_APPEND_TIME) for i in range(3)]
    records.append(Record(sample(), 3, kind=TIMESTAMP_LOG_APPEND_TIME,
                          headers_=[("l2m-time", str(W).encode())]))
    sender = Sender()
    delivery, lines, _ = loop(records, sender, monkeypatch)
    delivery.run()
    assert delivery.tally.skipped == {LOG_APPEND_TIME: 3} and delivery.tally.sent == 1
    said = [line for line in lines if "LogAppendTime" in line]
    assert len(said) == 1 and "message.timestamp.type=CreateTime" in said[0]
    assert orjson.loads(records[0].value_)["name"] == "x_total"


def test_once_an_endpoint_that_keeps_failing_gives_up_with_its_error(monkeypatch):
    """A run that must end (l2m deliver --once) does not retry for ever: after three errors in
    a row the endpoint's error is kept for deliver() to raise; the others are not stopped."""
    delivery, lines, _ = loop([], Sender(), monkeypatch)

    def broken() -> None:
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(delivery, "_consumer", broken)
    delivery.run()
    assert isinstance(delivery.error, ConnectionError) and not delivery.stop.is_set()
    assert delivery.tally.errors == {"ConnectionError": 3} and len(lines) == 2


def test_once_credentials_refused_end_the_endpoint_with_an_error_naming_it(monkeypatch):
    """l2m deliver --once must end: a receiver that keeps answering 401 (auth_failures:
    retry) ends the endpoint with an error naming it and the status — never a credential —
    and nothing is committed."""
    from tests.unit.remotewrite.test_remotewrite_client import Receiver

    monkeypatch.setattr(deliver_module, "ONCE_AUTH_ATTEMPTS", 3)
    server = Receiver([(401, {})] * 10)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    try:
        delivery, lines, consumers = loop([Record(sample(account="acme"), 0)], Sender(),
                                          monkeypatch)
        real = EndpointDelivery(delivery.job, RemoteWriteEndpoint(
            url=f"http://127.0.0.1:{server.server_address[1]}/w", name="ep",
            headers={"Authorization": "Bearer s3cret-token"}), threading.Event(),
            once_idle_s=0.0, log=lines.append)
        monkeypatch.setattr(real, "_consumer", delivery._consumer)
        running = threading.Thread(target=real.run, daemon=True)
        running.start()
        running.join(10)
        ended = not running.is_alive()
        real.stop.set()  # (before the fix it never ended)
        running.join(10)
    finally:
        server.shutdown()
        server.server_close()
    assert ended
    assert str(real.error) == ("remote_write endpoint ep: the receiver refused l2m's "
                               "credentials (HTTP 401, 3 times in a row); nothing was "
                               "committed: mend them and run again")
    assert isinstance(real.error, RemoteWriteError)
    assert len(server.seen) == 3 and [c.commits for c in consumers] == [[]]
    assert real.tally.requests["auth_failed"] == 3 and real.tally.errors == {}
    assert not any("s3cret" in line for line in lines)


class _Metadata:
    """What Consumer.list_topics answers for the metrics topic: ``error`` (a KafkaError
    code, or None) and its partitions."""

    def __init__(self, code: int | None, partitions: dict[int, Any]) -> None:
        from confluent_kafka import KafkaError
        self.error = KafkaError(code) if code is not None else None
        self.partitions = partitions


@pytest.mark.parametrize(("code", "partitions", "error", "stops"), [
    ("LEADER_NOT_AVAILABLE", {0: None}, "KafkaUnavailableError", False),  # a broker restart
    (None, {}, "KafkaUnavailableError", False),  # a topic being created
    ("UNKNOWN_TOPIC_OR_PART", {}, "ConfigError", True),  # missing: a configuration error
])
def test_only_a_missing_topic_stops_delivery_a_transient_metadata_error_is_retried(
        code, partitions, error, stops, monkeypatch):
    import confluent_kafka
    from confluent_kafka import KafkaError

    monkeypatch.setattr(deliver_module, "RESTART_MIN_S", 0.0)
    made: list[str] = []

    class Consumer:
        def __init__(self, conf: dict[str, Any]) -> None:
            made.append(conf["group.id"])

        def list_topics(self, topic: str, timeout: float) -> Any:
            found = _Metadata(getattr(KafkaError, code) if code else None, partitions)
            return type("M", (), {"topics": {topic: found}})()

        def close(self) -> None:
            pass

    monkeypatch.setattr(confluent_kafka, "Consumer", Consumer)
    endpoint = RemoteWriteEndpoint(url="http://x/", name="ep")
    job = JobConfig(remote_write=RemoteWriteConfig(endpoints=(endpoint,)))
    lines: list[str] = []
    delivery = EndpointDelivery(job, endpoint, threading.Event(), once_idle_s=0.0,
                                log=lines.append)
    delivery.run()
    assert type(delivery.error).__name__ == error and delivery.stop.is_set() == stops
    # Retried with the loop's backoff (once: three times, then the endpoint's error).
    assert len(made) == (1 if stops else 3)


def test_a_poll_delivered_again_after_an_error_counts_once(monkeypatch):
    """What a poll's delivery counts is kept once the poll is delivered: the request sent
    before the error is sent again (at least once) but counted once, as are the skips."""
    records = [Record(sample(account="acme", i="1"), 0), Record(sample(account="globex"), 1),
               Record(b"not json", 2)]
    calls: list[str | None] = []

    def answer(body: bytes, tenant: str | None) -> Delivery:
        calls.append(tenant)
        if len(calls) == 2:
            raise OSError("connection reset")
        return Delivery(204, "", 1)

    delivery, _, consumers = loop(records, Sender(answer), monkeypatch)
    delivery.run()
    assert calls == ["acme", "globex", "acme", "globex"]
    assert [c.commits for c in consumers] == [[], [3]]
    tally = delivery.tally
    assert (tally.sent, tally.requests["sent"], tally.skipped) == (2, 2, {"malformed": 1})
    assert tally.last_success > 0
