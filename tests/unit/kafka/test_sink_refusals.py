"""No sample can make the sink fail (issue 20): a message Kafka refuses for good — over the
producer's message.max.bytes at produce(), or over the topic's limit in the delivery report,
where the broker refuses the whole record batch around it — is sent again alone, then
dead-lettered; every other sample of the batch is delivered and the task succeeds. A transient
error still fails the task (the batch is replayed). Without a broker: a fake producer that
behaves as librdkafka reports these errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

import l2m.kafka.deadletters as deadletters
import l2m.kafka.sink as sink
from l2m.errors import SinkError

TRANSPORT = KafkaError._TRANSPORT
NOW = 1_800_000_000_000  # the fake producer's clock


@dataclass
class Msg:
    topic: str
    k: bytes | None
    v: bytes | None
    h: list[tuple[str, bytes]]
    ts: int | None = None

    def headers(self) -> None:
        return None  # confluent-kafka's delivery reports carry no headers

    def key(self) -> bytes | None:
        return self.k

    def value(self) -> bytes | None:
        return self.v

    def timestamp(self) -> tuple[int, int]:
        # librdkafka dates a message without a timestamp when it is produced (CreateTime)
        return (1, self.ts if self.ts is not None else NOW)


@dataclass
class FakeProducer:
    """librdkafka as the sink sees it: ``local_max`` is message.max.bytes (produce() raises),
    ``topic_max`` the broker's limit (a record batch holding a larger message is refused whole,
    every message in it gets MSG_SIZE_TOO_LARGE), ``down``: every delivery fails transiently."""

    local_max: int = 1_000_000
    topic_max: int | None = None
    down: bool = False
    queued: list[tuple[Msg, Any]] = field(default_factory=list)
    delivered: list[Msg] = field(default_factory=list)

    def produce(self, topic: str, value: Any = None, key: Any = None, on_delivery: Any = None,
                headers: Any = None, timestamp: int | None = None) -> None:
        value = value.encode() if isinstance(value, str) else value
        key = key.encode() if isinstance(key, str) else key
        if len(value or b"") + len(key or b"") > self.local_max:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        self.queued.append((Msg(topic, key, value, list(headers or []), timestamp),
                            on_delivery))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        batch, self.queued = self.queued, []
        too_large = self.topic_max is not None and any(
            len(m.v or b"") > self.topic_max for m, _cb in batch)
        for msg, callback in batch:
            if self.down:
                callback(KafkaError(TRANSPORT), msg)
            elif too_large:
                callback(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), msg)
            else:
                self.delivered.append(msg)
                callback(None, msg)
        return 0


def writer(monkeypatch: pytest.MonkeyPatch, metrics: FakeProducer, dead: FakeProducer | None,
           dead_letters: bool = True) -> sink._Producing:
    monkeypatch.setattr(sink, "cached_producer", lambda _config, _topic=None: metrics)
    monkeypatch.setattr(deadletters, "cached_producer", lambda _config, _topic=None: dead)
    options = {"topic": "metrics", "kafka.bootstrap.servers": "127.0.0.1:1"}
    if dead_letters:
        options |= {"deadletters.topic": "dead", "deadletters.kafka.bootstrap.servers": "x:1"}
    return sink._Producing(options)


def batch(values: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"key": [f"k{i}" for i in range(len(values))], "value": values})


SAMPLES = [f'{{"name":"a","value":{i}}}' for i in range(20)]
HUGE = '{"name":"a","labels":{"service":"' + "x" * 1_100_000 + '"}}'


@pytest.mark.parametrize("metrics", [
    FakeProducer(),  # refused at produce(): over message.max.bytes
    FakeProducer(local_max=10_000_000, topic_max=1_000_000),  # refused by the broker
], ids=["producer-limit", "topic-limit"])
def test_an_oversize_sample_is_dead_lettered_and_every_other_one_delivered(
        monkeypatch, metrics, capsys):
    dead = FakeProducer()
    done = writer(monkeypatch, metrics, dead).write(
        iter([batch([*SAMPLES[:10], HUGE, *SAMPLES[10:]])]))
    assert (done.rows, done.refused, done.dropped) == (21, 1, 0)
    assert sorted(m.v.decode() for m in metrics.delivered) == sorted(SAMPLES)
    [letter] = dead.delivered
    headers = dict(letter.h)
    assert letter.topic == "dead" and letter.k == b"k10"
    assert headers["l2m.kind"] == b"sample" and headers["l2m.origin"] == b"metrics"
    assert headers["l2m.error"].startswith(b"sample refused: ")
    assert b"too large" in headers["l2m.error"]
    assert headers["l2m.size"] == str(len(HUGE)).encode()
    assert headers["l2m.truncated"] == b"true" and len(letter.v) <= 256 * 1024
    assert "refused by topic metrics for good" in capsys.readouterr().err


def test_without_a_dead_letter_topic_the_sample_is_dropped_and_counted(monkeypatch):
    metrics = FakeProducer()
    done = writer(monkeypatch, metrics, None, dead_letters=False).write(
        iter([batch([HUGE, *SAMPLES])]))
    assert (done.rows, done.refused, done.dropped) == (21, 1, 1)
    assert len(metrics.delivered) == 20


def test_a_dead_letter_topic_that_refuses_it_too_drops_it_without_failing(monkeypatch):
    dead = FakeProducer(local_max=100)
    done = writer(monkeypatch, FakeProducer(), dead).write(iter([batch([HUGE, *SAMPLES])]))
    assert (done.refused, done.dropped) == (1, 1)


def test_a_transient_error_still_fails_the_batch(monkeypatch):
    with pytest.raises(SinkError, match="did not acknowledge"):
        writer(monkeypatch, FakeProducer(down=True), FakeProducer()).write(
            iter([batch(SAMPLES)]))


def stamped(values: list[str], marks: list[str | None], time: int = 1_795_341_600_000
            ) -> pa.RecordBatch:
    """The state stage's rows: key, value, the micro-batch's time and each sample's mark."""
    return pa.record_batch({"key": [f"k{i}" for i in range(len(values))], "value": values,
                            "time": pa.array([time] * len(values), pa.int64()),
                            "mark": pa.array(marks, pa.string())})


@pytest.mark.parametrize("metrics", [
    FakeProducer(),
    FakeProducer(local_max=10_000_000, topic_max=1_000_000),
], ids=["producer-limit", "topic-limit"])
def test_every_sample_record_keeps_its_time_and_mark_when_sent_again_alone(monkeypatch, metrics):
    """The neighbours of an oversize sample, refused with it in one record batch, are sent
    again with the micro-batch's time as their timestamp and in ``l2m-time``, and their
    ``l2m-mark``: what remote write stamps and sends them by (issue 53). The dead letter keeps
    the sample's headers too."""
    t = 1_795_341_600_000
    marks = ["new", None, "final", "correction"] * 5
    dead = FakeProducer()
    done = writer(monkeypatch, metrics, dead).write(
        iter([stamped([*SAMPLES[:10], HUGE, *SAMPLES[10:]], [*marks[:10], "final", *marks[10:]])]))
    assert (done.rows, done.refused, done.dropped) == (21, 1, 0)
    got = sorted((m.v.decode(), m.ts, m.h) for m in metrics.delivered)
    want = sorted((v, t, ([] if mark is None else [("l2m-mark", mark.encode())])
                   + [("l2m-time", str(t).encode())])
                  for v, mark in zip(SAMPLES, marks, strict=True))
    assert got == want
    [letter] = dead.delivered
    assert letter.h[2:4] == [("l2m.kind", b"sample"), ("l2m-mark", b"final")]
    assert letter.h[4] == ("l2m-time", str(t).encode())


def test_a_sample_without_a_time_gets_no_time_header_and_keeps_its_producer_time(monkeypatch):
    metrics = FakeProducer(local_max=10_000_000, topic_max=1_000_000)
    writer(monkeypatch, metrics, FakeProducer()).write(iter([batch([SAMPLES[0], HUGE])]))
    [msg] = metrics.delivered
    assert (msg.v.decode(), msg.ts, msg.h) == (SAMPLES[0], NOW, [])


def test_the_driver_s_samples_carry_their_time_and_marks(monkeypatch):
    """l2m's own samples from the driver (the per-account view): dated with their
    ``timestamp`` (record and ``l2m-time``), a gauge final, a counter's mark its own."""
    metrics = FakeProducer()
    monkeypatch.setattr(sink, "cached_producer", lambda _config, _topic=None: metrics)
    t = 1_795_341_600_123
    base = {"labels": {"account": "a"}, "value": 1.0, "timestamp": t, "account": None,
            "rule": "l2m-accounts"}
    samples = [{**base, "name": "l2m_account_series", "kind": "gauge"},
               {**base, "name": "l2m_account_samples_total", "kind": "counter", "_mark": "new"},
               {**base, "name": "l2m_account_logs_matched_total", "kind": "counter"}]
    sink.produce_samples(samples, "metrics", {})
    time = ("l2m-time", str(t).encode())
    assert [(m.ts, m.h, "_mark" in m.v.decode()) for m in metrics.delivered] == [
        (t, [("l2m-mark", b"final"), time], False), (t, [("l2m-mark", b"new"), time], False),
        (t, [time], False)]
    assert "_mark" in samples[1]  # the caller's samples are left as they were
