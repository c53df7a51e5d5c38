"""l2m load's watchers without a broker: fake records and consumers, exact latencies (arrival −
sample timestamp, in ms), nearest-rank percentiles, the input counter's baseline and resets,
lag against a timeline, and Prometheus' answers through an injected fetch."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from l2m.dev.loadwatch import (
    INPUT_METRIC,
    INPUT_RULE_ID,
    LagPoint,
    Latencies,
    LatencyStats,
    MetricsWatcher,
    PrometheusWatcher,
    SecondLatency,
    answer_value,
    produced_at,
    prometheus_query_url,
    sent_at,
)
from l2m.engine.samples import MARK_HEADER, NEW, TIME_HEADER
from l2m.errors import ConfigError

START = 1_795_000_000_000  # ms
T0 = START / 1000


class Record:
    """A consumed Kafka message as confluent-kafka hands it over."""

    def __init__(self, value: bytes | None, batch_ms: int | None = None,
                 mark: str | None = None, error: Any = None) -> None:
        self._value = value
        self._time = batch_ms
        self._headers = ([(MARK_HEADER, mark.encode())] if mark else []) + \
            ([(TIME_HEADER, str(batch_ms).encode())] if batch_ms is not None else [])
        self._error = error

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, self._time) if self._time is not None else (0, -1)

    def error(self) -> Any:
        return self._error


def sample(ts: int, rule: str = "errors", kind: str = "counter", name: str = "errors_total",
           labels: dict[str, str] | None = None, value: float = 1.0) -> bytes:
    return orjson.dumps({"name": name, "kind": kind, "labels": labels or {}, "value": value,
                         "timestamp": ts, "account": "acme", "rule": rule})


def histogram(ts: int) -> bytes:
    return orjson.dumps({"name": "lat", "kind": "counter", "labels": {},
                         "histogram": {"schema": 3, "zero_threshold": 0.0, "zero_count": 0,
                                       "count": 1, "sum": 2.0, "positive": [[8, 1]],
                                       "negative": []},
                         "timestamp": ts, "account": None, "rule": "lat", "format": 2})


def inputs(status: str, value: float) -> bytes:
    return orjson.dumps({"name": INPUT_METRIC, "kind": "counter", "labels": {"status": status},
                         "value": value, "timestamp": START, "account": None,
                         "rule": INPUT_RULE_ID})


def watcher() -> MetricsWatcher:
    return MetricsWatcher({"bootstrap.servers": "127.0.0.1:1"}, "metrics", START)


def test_input_rule_is_the_states() -> None:
    from l2m.state.counters import INPUT_RULE

    assert (INPUT_RULE.name, INPUT_RULE.id) == (INPUT_METRIC, INPUT_RULE_ID)


def test_latency_of_counter_samples_only() -> None:
    w = watcher()
    w.observe([
        Record(sample(START + 100), START + 900),                  # 1,400 ms
        Record(histogram(START + 500), START + 900),               # format 2: 1,000 ms
        Record(sample(START + 100, kind="gauge"), START + 900),    # gauge: window start
        Record(sample(START + 100, rule="l2m-late", name="l2m_late_logs_total"), START + 900),
        Record(sample(START - 1), START + 900),                    # dated before the load
        Record(b"not json", START + 900),
        Record(b'{"name": "x"}', START + 900),
        Record(None, START + 900),
        Record(sample(START + 100), START + 900, error="broken"),  # a consumer error
    ], T0 + 1.5)
    w.observe([Record(sample(START + 3_000), START + 3_100)], T0 + 2.9)  # -100 ms: clocks
    result = w.snapshot()
    assert (result.records, result.not_samples, result.samples, result.before_start,
            result.negative) == (9, 3, 3, 1, 1)
    assert result.latency == LatencyStats(3, 1000, 1400, 1400, 1400, -100)
    assert result.latency_series == [SecondLatency(1, 2, 1200.0, 1400),
                                     SecondLatency(2, 1, -100.0, -100)]
    assert result.error is None


def test_nearest_rank_percentiles() -> None:
    kept = Latencies()
    for ms in range(1, 101):
        kept.add(ms, 0)
    kept.add(5000, 3)
    assert kept.stats() == LatencyStats(101, 51, 91, 100, 5000, 1)
    assert Latencies().stats() is None
    # Memory follows distinct milliseconds, not samples.
    many = Latencies()
    for _ in range(10_000):
        many.add(250, 7)
    assert len(many._by_ms) == 1 and many.stats() == LatencyStats(10_000, 250, 250, 250, 250,
                                                                   250)


def test_processed_from_input_counter_with_baseline_before_start() -> None:
    w = watcher()
    w.observe([
        Record(inputs("ok", 1000), START - 5_000),            # before the load: baseline
        Record(inputs("malformed", 10), START - 5_000),
        Record(sample(START - 10), START - 5_000),            # skipped before the start
    ], T0 + 0.2)
    w.observe([Record(inputs("ok", 1300), START + 1_000),
               Record(inputs("malformed", 12), START + 1_000)], T0 + 1.2)
    w.observe([Record(inputs("ok", 1500), START + 2_000),
               Record(inputs("blank", 3), START + 2_000, mark=NEW)], T0 + 2.4)
    result = w.snapshot()
    assert result.processed == [(T0 + 1.2, 302), (T0 + 2.4, 505)]
    assert result.baseline_exact is True
    assert result.records == 4  # before the start: not counted
    timeline = [(T0, 0), (T0 + 1.0, 400), (T0 + 2.0, 800), (T0 + 3.0, 1000)]
    assert result.lag(timeline) == [LagPoint(1.2, 480, 302, 178, 0.443),
                                    LagPoint(2.4, 880, 505, 375, 1.135)]


def test_processed_first_sight_and_reset() -> None:
    w = watcher()
    w.observe([Record(inputs("ok", 900), START + 500)], T0 + 0.6)   # no baseline: inexact
    w.observe([Record(inputs("ok", 1000), START + 1_500)], T0 + 1.6)
    w.observe([Record(inputs("ok", 40), START + 2_500)], T0 + 2.6)  # restarted counter
    w.observe([Record(inputs("ok", float("nan")), START + 3_500)], T0 + 3.6)  # not a count
    result = w.snapshot()
    assert result.processed == [(T0 + 0.6, 0), (T0 + 1.6, 100), (T0 + 2.6, 140)]
    assert result.baseline_exact is False


def test_timeline_interpolation() -> None:
    timeline = [(10.0, 0), (11.0, 100), (12.0, 100), (13.0, 400)]
    assert [sent_at(timeline, t) for t in (9.0, 10.5, 12.0, 12.5, 20.0)] == \
        [0.0, 50.0, 100.0, 250.0, 400.0]
    assert [produced_at(timeline, n) for n in (0, 1, 50, 100, 250, 400, 401)] == \
        [None, 10.01, 10.5, 11.0, 12.5, 13.0, None]
    assert produced_at([], 1) is None and sent_at([], 1.0) == 0.0


class FakeMeta:
    def __init__(self, partitions: list[int] | None) -> None:
        topic = None
        if partitions is not None:
            topic = type("T", (), {"error": None, "partitions": {p: None for p in partitions}})()
        self.topics = {"metrics": topic} if topic else {}


class FakeConsumer:
    """Hands over its batches one per consume(), then nothing."""

    def __init__(self, batches: list[list[Record]], partitions: list[int] | None = None
                 ) -> None:
        self.batches = list(batches)
        self.partitions = [0, 1] if partitions is None else partitions
        self.settings: dict[str, Any] = {}
        self.assigned: list[Any] = []
        self.closed = threading.Event()
        self.drained = threading.Event()

    def list_topics(self, topic: str, timeout: float) -> FakeMeta:
        return FakeMeta(self.partitions if self.partitions else None)

    def offsets_for_times(self, partitions: list[Any], timeout: float) -> list[Any]:
        from confluent_kafka import TopicPartition

        # Partition 0 has records since then, partition 1 none.
        return [TopicPartition(tp.topic, tp.partition, 42 if tp.partition == 0 else -1)
                for tp in partitions]

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = partitions

    def consume(self, num_messages: int, timeout: float) -> list[Record]:
        if self.batches:
            return self.batches.pop(0)
        self.drained.set()
        threading.Event().wait(0.01)
        return []

    def close(self) -> None:
        self.closed.set()


def test_thread_reads_from_lookback_and_stops() -> None:
    from confluent_kafka import OFFSET_END

    fake = FakeConsumer([[Record(sample(START + 200), START + 300)]])

    def factory(settings: dict[str, Any]) -> FakeConsumer:
        fake.settings = settings
        return fake

    w = MetricsWatcher({"bootstrap.servers": "b:9092", "sasl.password": "x"}, "metrics",
                       START, clock=lambda: T0 + 0.45, consumer_factory=factory).start()
    assert fake.drained.wait(5)
    result = w.stop()
    assert fake.closed.is_set()
    assert [(tp.partition, tp.offset) for tp in fake.assigned] == [(0, 42), (1, OFFSET_END)]
    assert fake.settings["enable.auto.commit"] is False
    assert fake.settings["sasl.password"] == "x"
    assert result.latency == LatencyStats(1, 250, 250, 250, 250, 250)
    assert w.stop() is result  # again: the same


def test_missing_topic_is_a_config_error() -> None:
    fake = FakeConsumer([], partitions=[])
    with pytest.raises(ConfigError, match="metrics topic metrics not found"):
        MetricsWatcher({}, "metrics", START, consumer_factory=lambda s: fake).start()
    assert fake.closed.is_set()


def test_consumer_failure_is_reported_not_raised() -> None:
    class Failing(FakeConsumer):
        def consume(self, num_messages: int, timeout: float) -> list[Record]:
            raise RuntimeError("broker gone")

    fake = Failing([])
    w = MetricsWatcher({}, "metrics", START, consumer_factory=lambda s: fake).start()
    assert fake.closed.wait(5)
    assert w.stop().error == "RuntimeError: broker gone"
    assert w.wait_processed(1, 5) is False


def answer(value: str | None) -> bytes:
    result = [] if value is None else [{"metric": {}, "value": [1.0, value]}]
    return orjson.dumps({"status": "success", "data": {"resultType": "vector",
                                                         "result": result}})


def test_prometheus_delays() -> None:
    answers = [answer(None), answer("100"), b"<html>", answer("400"), answer("50")]
    times = iter([T0 + 0.0, T0 + 1.5, T0 + 2.0, T0 + 3.5, T0 + 4.5])
    asked: list[str] = []

    def fetch(url: str, timeout: float) -> bytes:
        asked.append(url)
        return answers.pop(0)

    w = PrometheusWatcher("http://127.0.0.1:9090/", START, clock=lambda: next(times),
                          fetch=fetch)
    for _ in range(5):
        w.poll()
    result = w.stop()
    assert asked[0] == "http://127.0.0.1:9090/api/v1/query?query=sum%28l2m_input_logs_total%29"
    assert (result.polls, result.failed) == (5, 1)
    assert result.last_error == "ValueError: not an instant-query answer (JSONDecodeError)"
    assert result.processed == [(T0 + 1.5, 100), (T0 + 3.5, 400), (T0 + 4.5, 450)]
    timeline = [(T0, 0), (T0 + 1.0, 200), (T0 + 2.0, 400)]
    assert result.delays(timeline) == [(1.5, 1.0), (3.5, 1.5)]
    assert result.queryable_after(timeline) == 1.5
    assert result.queryable_after([(T0, 0), (T0 + 1.0, 1000)]) is None
    assert w.wait_processed(450, 0) is True


@pytest.mark.parametrize("body", [
    b'{"status": "error", "error": "bad query"}', b"[]", b'{"status": "success"}',
    b'{"status": "success", "data": {"result": [{"value": [1, "NaN"]}]}}',
    b'{"status": "success", "data": {"result": [{"value": [1, {"x": 1}]}]}}', b"\xff",
])
def test_prometheus_bad_answers(body: bytes) -> None:
    with pytest.raises(ValueError):
        answer_value(body)


def test_prometheus_url() -> None:
    assert prometheus_query_url("https://prom.example:9090/prometheus") == \
        "https://prom.example:9090/prometheus/api/v1/query?query=sum%28l2m_input_logs_total%29"
    for bad in ("ftp://x", "127.0.0.1:9090", "http://"):
        with pytest.raises(ConfigError):
            prometheus_query_url(bad)


def test_broker_without_offsets_by_time_reads_from_the_end() -> None:
    from confluent_kafka import OFFSET_END, KafkaException

    class NoTimes(FakeConsumer):
        def offsets_for_times(self, partitions: list[Any], timeout: float) -> list[Any]:
            raise KafkaException("unsupported")

    fake = NoTimes([])
    w = MetricsWatcher({}, "metrics", START, consumer_factory=lambda s: fake).start()
    w.stop()
    assert [(tp.partition, tp.offset) for tp in fake.assigned] == [(0, OFFSET_END),
                                                                    (1, OFFSET_END)]


def test_replayed_batches_are_not_resets() -> None:
    w = watcher()
    w.observe([Record(inputs("ok", 100), START - 1_000)], T0 + 0.1)         # baseline
    w.observe([Record(inputs("ok", 300), START + 1_000)], T0 + 1.1)
    w.observe([Record(inputs("ok", 200), START + 500),                     # replayed
               Record(inputs("ok", 100), START - 1_000)], T0 + 2.1)        # replayed too
    w.observe([Record(inputs("ok", 350), START + 3_000)], T0 + 3.1)
    w.observe([Record(inputs("ok", 20), START + 4_000)], T0 + 4.1)         # a real reset
    assert w.snapshot().processed == [(T0 + 1.1, 200), (T0 + 3.1, 250), (T0 + 4.1, 270)]


def test_input_values_that_are_no_counts_are_skipped() -> None:
    w = watcher()
    w.observe([Record(inputs("ok", 10), START - 1_000)], T0)
    for i, bad in enumerate([float("inf"), -5.0, 1e300, float("nan")]):
        value = orjson.dumps({"name": INPUT_METRIC, "kind": "counter",
                              "labels": {"status": "ok"},
                              "value": "+Inf" if bad == float("inf") else
                              "NaN" if bad != bad else bad,
                              "timestamp": START, "account": None, "rule": INPUT_RULE_ID})
        w.observe([Record(value, START + 1_000 * (i + 1))], T0 + i + 1)
    w.observe([Record(inputs("ok", 30), START + 9_000)], T0 + 9)
    result = w.stop()
    assert (result.processed, result.error) == ([(T0 + 9, 20)], None)
    fetched = [answer("5"), answer("1e300"), answer("-1"), answer("9")]
    p = PrometheusWatcher("http://127.0.0.1:9090", START, clock=lambda: T0 + 1,
                          fetch=lambda url, timeout: fetched.pop(0))
    for _ in range(4):
        p.poll()
    assert p.stop().processed == [(T0 + 1, 4)]
    assert p.stop().last_error == "ValueError: not a count of logs: -1"


def test_refused_client_settings_are_one_line_without_secrets() -> None:
    watch = MetricsWatcher({"bootstrap.servers": "127.0.0.1:1", "sasl.password": "hunter2",
                            "security.protocol": "sasl_nonsense"}, "metrics", START)
    with pytest.raises(ConfigError) as caught:
        watch.start()
    assert "hunter2" not in caught.value.message
    assert caught.value.message.startswith("--watch: kafka client settings: ")
    assert "\n" not in caught.value.message
