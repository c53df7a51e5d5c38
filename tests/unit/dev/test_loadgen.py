"""l2m.dev.loadgen without a broker: a fake producer and a fake clock — the pace (no log before
its due time, none much after it, no long sleep), the partition each log goes to (the skew,
interleaved), each log stamped with its production time, a full local queue waited out,
failed deliveries counted apart, the merged timeline, and run_load end to end on a thread."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from l2m.dev.loadgen import (
    MAX_TICK_S,
    MIN_TICK_S,
    LoadSpec,
    LoadSummary,
    Progress,
    merged_timeline,
    produce_share,
    run_load,
    topic_partitions,
)
from l2m.dev.skew import Skew
from l2m.errors import ConfigError
from l2m.semantics.values import parse_timestamp

START = 1_800_000_000.0  # seconds since the epoch: exact in binary at ms resolution


class FakeClock:
    """Wall time that moves only when the producer sleeps."""

    def __init__(self) -> None:
        self.now = START
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeProducer:
    """Records each message with the clock's time; ``full``: produce() calls that raise
    BufferError first; ``fail``: message numbers (from 0) whose delivery fails at flush."""

    def __init__(self, clock: FakeClock | None = None, full: int = 0,
                 fail: frozenset[int] = frozenset()) -> None:
        self.clock = clock
        self.full = full
        self.fail = fail
        self.sent: list[tuple[float, int, bytes]] = []
        self.callbacks: list[Any] = []
        self.polls: list[float] = []
        self.flushed = False
        self.stuck = 0  # messages flush() leaves undelivered

    def produce(self, topic: str, value: bytes, partition: int, on_delivery: Any) -> None:
        assert topic == "logs"
        if self.full:
            self.full -= 1
            raise BufferError("Local: Queue full")
        self.sent.append((self.clock() if self.clock else 0.0, partition, value))
        self.callbacks.append(on_delivery)

    def poll(self, timeout: float) -> int:
        self.polls.append(timeout)
        return 0

    def flush(self, timeout: float) -> int:
        for i, callback in enumerate(self.callbacks):
            callback("MSG_TIMED_OUT" if i in self.fail else None, None)
        self.flushed = True
        return self.stuck


def spec(**changes: Any) -> LoadSpec:
    fields: dict[str, Any] = {"kafka": {"bootstrap.servers": "127.0.0.1:9092"},
                              "topic": "logs", "rate": 1000.0, "logs": 1000}
    return LoadSpec(**{**fields, **changes})


def test_every_log_leaves_at_its_due_time_within_a_tick() -> None:
    clock = FakeClock()
    producer = FakeProducer(clock)
    result = produce_share(spec(), 0, 1000.0, 1000, 4, producer, clock=clock,
                           sleep=clock.sleep)
    assert result.sent == 1000 and result.failed == 0 and producer.flushed
    for k, (at, _, _) in enumerate(producer.sent):
        due = START + k / 1000.0
        assert due - 1e-9 <= at <= due + MIN_TICK_S + 1e-9, k
    # ticks of at least MIN_TICK_S, never asleep past MAX_TICK_S
    assert all(MIN_TICK_S - 1e-12 <= s <= MAX_TICK_S for s in clock.sleeps)
    assert clock.now - START == pytest.approx(0.999, abs=MIN_TICK_S)


def test_a_low_rate_sleeps_in_short_ticks() -> None:
    clock = FakeClock()
    producer = FakeProducer(clock)
    produce_share(spec(rate=2.0, logs=3), 0, 2.0, 3, 1, producer, clock=clock,
                  sleep=clock.sleep)
    assert [at - START for at, _, _ in producer.sent] == pytest.approx([0.0, 0.5, 1.0],
                                                                      abs=MIN_TICK_S)
    assert max(clock.sleeps) == MAX_TICK_S


def test_partitions_follow_the_skew_interleaved() -> None:
    producer = FakeProducer()
    result = produce_share(spec(skew=Skew("hot", hot_share=0.7)), 0, 1e9, 1000, 4, producer)
    assert result.counts == [700, 100, 100, 100]
    partitions = [p for _, p, _ in producer.sent]
    assert [partitions.count(p) for p in range(4)] == [700, 100, 100, 100]
    assert max(partitions[i:i + 10].count(0) for i in range(990)) <= 8


def test_workers_share_the_skew() -> None:
    counts = [0] * 4
    for worker in (0, 1):
        result = produce_share(spec(processes=2, skew=Skew("hot", hot_share=0.7)), worker,
                               1e9, 500, 4, FakeProducer())
        counts = [a + b for a, b in zip(counts, result.counts, strict=True)]
    assert counts == [700, 100, 100, 100]


def test_each_log_is_stamped_with_its_production_time() -> None:
    clock = FakeClock()
    producer = FakeProducer(clock)
    produce_share(spec(accounts=3), 0, 1000.0, 200, 2, producer, clock=clock,
                  sleep=clock.sleep)
    for at, _, value in producer.sent:
        doc = orjson.loads(value)
        assert parse_timestamp(doc["@timestamp"]) == int(at * 1000)
    accounts = {orjson.loads(v)["account"] for _, _, v in producer.sent}
    assert accounts <= {"acct-0000", "acct-0001", "acct-0002", "platform"}


def test_late_logs_are_older_and_malformed_lines_are_not_objects() -> None:
    clock = FakeClock()
    late = FakeProducer(clock)
    produce_share(spec(late_share=1.0), 0, 1000.0, 50, 1, late, clock=clock, sleep=clock.sleep)
    for at, _, value in late.sent:
        age = int(at * 1000) - parse_timestamp(orjson.loads(value)["@timestamp"])
        assert 60_000 <= age <= 30 * 60_000
    broken = FakeProducer()
    produce_share(spec(malformed_share=1.0), 0, 1e9, 20, 1, broken)
    for _, _, value in broken.sent:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        assert not isinstance(doc, dict)


def test_the_same_seed_gives_the_same_logs() -> None:
    a, b, c = FakeProducer(), FakeProducer(), FakeProducer()
    for producer, seed in ((a, 5), (b, 5), (c, 6)):
        clock = FakeClock()
        produce_share(spec(seed=seed), 0, 1000.0, 20, 1, producer, clock=clock,
                      sleep=clock.sleep)
    assert [v for _, _, v in a.sent] == [v for _, _, v in b.sent]
    assert [v for _, _, v in a.sent] != [v for _, _, v in c.sent]


def test_a_full_queue_is_waited_out_and_failed_deliveries_counted_apart() -> None:
    producer = FakeProducer(full=3, fail=frozenset({0, 5}))
    result = produce_share(spec(), 0, 1e9, 10, 2, producer)
    assert len(producer.sent) == 10
    assert producer.polls.count(0.05) == 3
    assert (result.sent, result.failed, sum(result.counts)) == (8, 2, 10)
    stuck = FakeProducer()
    stuck.stuck = 4
    result = produce_share(spec(), 0, 1e9, 10, 2, stuck)
    assert (result.sent, result.failed) == (6, 4)


def test_reports_and_timeline() -> None:
    clock = FakeClock()
    reports: list[tuple[int, float, int]] = []
    result = produce_share(spec(), 3, 1000.0, 1000, 1, FakeProducer(clock),
                           lambda w, t, n: reports.append((w, t, n)), clock=clock,
                           sleep=clock.sleep)
    assert result.timeline[0] == (START, 0)
    assert result.timeline[-1][1] == 1000
    assert [(t, n) for _, t, n in reports] == result.timeline[1:]
    assert {w for w, _, _ in reports} == {3}
    gaps = [b[0] - a[0] for a, b in zip(result.timeline, result.timeline[1:], strict=False)]
    assert max(gaps) <= 0.5
    assert [n for _, n in result.timeline] == sorted(n for _, n in result.timeline)


def test_merged_timeline_sums_each_workers_latest_count() -> None:
    assert merged_timeline([[(1.0, 0), (1.2, 10), (1.4, 20)],
                            [(1.1, 0), (1.3, 5)]]) == [
        (1.0, 0), (1.1, 0), (1.2, 10), (1.3, 15), (1.4, 25)]


def test_the_achieved_rate() -> None:
    summary = LoadSummary("logs", 10.0, 1, 1, Skew(), 100.0, 2.0, 20, 0, [20],
                          [(100.0, 0), (101.0, 10), (102.0, 20)])
    assert summary.rate == 10.0


def test_total_logs() -> None:
    assert spec(logs=None, duration_s=20.0, rate=2000.0).total == 40_000
    assert spec(logs=7, duration_s=20.0).total == 7
    assert spec(logs=None, duration_s=0.1, rate=1.0).total == 1


class Meta:
    def __init__(self, topics: dict[str, Any]) -> None:
        self.topics = topics


class Topic:
    def __init__(self, partitions: int, error: Any = None) -> None:
        self.partitions = dict.fromkeys(range(partitions))
        self.error = error


class MetaProducer:
    def __init__(self, topics: dict[str, Any]) -> None:
        self.meta = Meta(topics)

    def list_topics(self, topic: str, timeout: float) -> Meta:
        return self.meta


def test_partitions_come_from_the_topic_unless_given() -> None:
    producer = MetaProducer({"logs": Topic(6)})
    assert topic_partitions(producer, spec()) == 6
    assert topic_partitions(producer, spec(partitions=2)) == 2
    with pytest.raises(ConfigError) as caught:
        topic_partitions(producer, spec(partitions=8))
    assert str(caught.value) == "--partitions 8: topic 'logs' has 6 partition(s)"
    for missing in ({}, {"logs": Topic(0, error="UNKNOWN_TOPIC_OR_PART")}):
        with pytest.raises(ConfigError) as caught:
            topic_partitions(MetaProducer(missing), spec())
        assert str(caught.value) == "topic 'logs' does not exist on 127.0.0.1:9092"


def test_run_load_on_a_thread() -> None:
    producers: list[FakeProducer] = []

    def factory(kafka: Any) -> FakeProducer:
        assert kafka == {"bootstrap.servers": "127.0.0.1:9092"}
        producers.append(FakeProducer())
        return producers[-1]

    seen: list[Progress] = []
    summary = run_load(spec(rate=2000.0, logs=600, partitions=3,
                            skew=Skew("hot", hot_share=0.5)),
                       progress=seen.append, progress_every=0.1, producer_factory=factory)
    assert (summary.sent, summary.failed, summary.partitions) == (600, 0, 3)
    assert summary.partition_counts == [300, 150, 150]
    assert summary.timeline[0] == (summary.started, 0)
    assert summary.timeline[-1][1] == 600
    assert 0.25 <= summary.seconds <= 1.0
    assert seen and all(p.target_rate == 2000.0 for p in seen)
    assert len(producers) == 1 and len(producers[0].sent) == 600


def test_a_setting_librdkafka_refuses_is_one_line_without_secrets() -> None:
    from l2m.dev.loadgen import _new_producer

    with pytest.raises(ConfigError) as caught:
        _new_producer({"bootstrap.servers": "127.0.0.1:1", "security.protocol": "hunter2",
                       "sasl.password": "hunter2"})
    assert str(caught.value) == ('kafka client settings: Invalid value "***" for '
                                 'configuration property "security.protocol"')
