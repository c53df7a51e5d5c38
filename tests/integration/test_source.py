"""The Kafka source: planning (unit), and the reader against the real broker — split and
unsplit plans read the same rows, data loss fails clearly or is skipped."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from l2m.dev.broker import create_topics
from l2m.errors import DataLossError
from l2m.kafka.offsets import OffsetRange, plan_tasks, rate_limit
from l2m.kafka.options import SourceOptions
from l2m.kafka.source import KafkaStreamReader
from tests.support.kafka_helpers import fresh_topics, produce


def test_balanced_plan_splits_hot_ranges_and_packs_small_ones():
    tasks = plan_tasks([OffsetRange(0, 0, 700), OffsetRange(1, 10, 110), OffsetRange(2, 5, 5)],
                       max_per_task=250)
    # 800 records, 4 tasks of 200 laid end to end: at most one piece per partition each
    assert tasks == [
        [OffsetRange(0, 0, 200)],
        [OffsetRange(0, 200, 400)],
        [OffsetRange(0, 400, 600)],
        [OffsetRange(0, 600, 700), OffsetRange(1, 10, 110)],
    ]
    # the classic plan: one task per partition range
    assert plan_tasks([OffsetRange(0, 0, 700), OffsetRange(1, 0, 5)], 250, balanced=False) == [
        [OffsetRange(0, 0, 700)], [OffsetRange(1, 0, 5)]]
    # small batch, two cores: two tasks share the partitions
    small = plan_tasks([OffsetRange(p, 0, 10) for p in range(16)], 100_000, min_tasks=2)
    assert [sum(r.size for r in t) for t in small] == [80, 80]


@pytest.mark.parametrize(("hot_share", "total"), [(0.7, 160_000), (0.7, 1_000_000),
                                                  (0.9, 50_000), (0.0625, 160_000)])
def test_balanced_plan_evens_out_a_hot_partition(hot_share, total):
    hot = int(total * hot_share)
    rest = (total - hot) // 15
    ranges = [OffsetRange(0, 0, hot)] + [OffsetRange(p, 0, rest) for p in range(1, 16)]
    tasks = plan_tasks(ranges, max_per_task=total // 16, min_tasks=2)
    loads = [sum(r.size for r in t) for t in tasks]
    assert sum(loads) == hot + 15 * rest
    assert max(loads) - min(loads) <= 1  # equal sizes
    assert all(len({r.partition for r in t}) == len(t) for t in tasks)
    classic = [r.size for t in plan_tasks(ranges, balanced=False) for r in t]
    if hot_share == 0.7:
        assert max(classic) / (sum(classic) / len(classic)) > 11


def test_rate_limit_shares_by_backlog_and_never_starves():
    start = {0: 0, 1: 100, 2: 50}
    latest = {0: 1000, 1: 110, 2: 50}
    assert rate_limit(start, latest, 101) == {0: 100, 1: 101, 2: 50}
    assert rate_limit(start, latest, 10_000) == latest
    # a tiny backlog still moves on
    assert rate_limit({0: 0, 1: 100}, {0: 10_000, 1: 101}, 100) == {0: 99, 1: 101}


def reader(bootstrap: str, topic: str, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                              "pollTimeoutMs": "10000", **options}, None)  # type: ignore[arg-type]


def read_all(r: KafkaStreamReader, start: dict, end: dict) -> tuple[list, int]:
    parts = r.partitions(start, end)
    rows = []
    for part in parts:
        for batch in r.read(part):
            d = batch.to_pydict()
            rows += list(zip(d["partition"], d["offset"], d["value"], strict=True))
    return sorted(rows), len(parts)


def test_split_and_unsplit_plans_read_the_same_rows(broker):
    t = fresh_topics(broker.bootstrap, partitions=3)
    lines = [f'{{"i": {i}}}'.encode() for i in range(3000)]
    # a hot partition: 80% of the records on partition 0
    produce(t.bootstrap, t.topics.logs, lines, 3, partition_of=lambda i: 0 if i % 5 else i % 3)
    plain = reader(t.bootstrap, t.topics.logs, planner="partition")
    start = plain.initialOffset()
    end = plain.latestOffset(start, ReadAllAvailable())
    rows, tasks = read_all(plain, start, end)
    split = reader(t.bootstrap, t.topics.logs, maxRecordsPerTask="300", planner="balanced")
    split_rows, split_tasks = read_all(split, start, end)
    assert tasks == 3
    assert split_tasks > 10
    assert split_rows == rows
    assert len(rows) == 3003  # and the three empty closing records
    assert sorted(v for _, _, v in rows if v) == sorted(lines)


def test_admission_control_and_available_now(broker):
    t = fresh_topics(broker.bootstrap, partitions=2)
    produce(t.bootstrap, t.topics.logs, [b"{}"] * 1000, 2)
    r = reader(t.bootstrap, t.topics.logs, maxRecordsPerTrigger="100")
    start = r.initialOffset()
    assert r.getDefaultReadLimit() == ReadMaxRows(100)
    first = r.latestOffset(start, ReadMaxRows(100))
    assert sum(first["partitions"].values()) == 100
    r.prepareForTriggerAvailableNow()
    produce(t.bootstrap, t.topics.logs, [b"{}"] * 10, 2)  # after the target: not read
    everything = r.latestOffset(first, ReadAllAvailable())
    assert everything["partitions"] == {"0": 501, "1": 501}
    assert r.reportLatestOffset() == everything


def test_recreated_topic_fails_clearly_or_is_skipped(broker):
    t = fresh_topics(broker.bootstrap, partitions=1)
    produce(t.bootstrap, t.topics.logs, [b"{}"] * 50, 1)
    r = reader(t.bootstrap, t.topics.logs)
    start = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    admin = AdminClient({"bootstrap.servers": t.bootstrap})
    admin.delete_topics([t.topics.logs], operation_timeout=10)[t.topics.logs].result()
    time.sleep(0.5)
    create_topics(t.bootstrap, [t.topics.logs], partitions=1)
    produce(t.bootstrap, t.topics.logs, [b'{"new": 1}'] * 5, 1)
    with pytest.raises(DataLossError, match="went back from 51 to 6"):
        reader(t.bootstrap, t.topics.logs).latestOffset(start, ReadAllAvailable())
    lenient = reader(t.bootstrap, t.topics.logs, failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    rows, _ = read_all(lenient, start, end)
    assert [v for _, _, v in rows if v] == [b'{"new": 1}'] * 5


def test_unknown_topic_is_a_clear_error(broker):
    with pytest.raises(RuntimeError, match="topic 'no-such-topic"):
        reader(broker.bootstrap, "no-such-topic").initialOffset()


def test_options_are_case_insensitive_and_secrets_stay_in_config():
    r = reader("127.0.0.1:1", "x", **{"kafka.sasl.password": "s3cret",
                                       "MAXRECORDSPERTASK": "5"})
    assert r.max_per_task == 5
    assert r.config["sasl.password"] == "s3cret"
    assert "s3cret" not in repr(vars(r).get("topic"))


def test_processed_offsets_are_committed_to_the_lag_group(broker):
    from confluent_kafka import Consumer, TopicPartition

    t = fresh_topics(broker.bootstrap, partitions=2)
    produce(t.bootstrap, t.topics.logs, [b"{}"] * 20, 2)
    r = reader(t.bootstrap, t.topics.logs, groupId="l2m-lag")
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    r.commit(end)
    consumer = Consumer({"bootstrap.servers": t.bootstrap, "group.id": "l2m-lag"})
    committed = consumer.committed([TopicPartition(t.topics.logs, p) for p in (0, 1)],
                                   timeout=10)
    consumer.close()
    assert {tp.partition: tp.offset for tp in committed} == {0: 11, 1: 11}


@pytest.mark.parametrize(("options", "problem"), [
    ({}, "option topic is required"),
    ({"topic": "t"}, "option kafka.bootstrap.servers is required"),
    ({"maxRecordsPerTask": "ten"}, "option maxrecordspertask must be a whole number"),
    ({"maxRecordsPerTrigger": "-5"}, "option maxrecordspertrigger must not be negative"),
    ({"pollTimeoutMs": "0"}, "option polltimeoutms must be positive"),
    ({"failOnDataLoss": "maybe"}, "option failondataloss must be true or false"),
    ({"planner": "random"}, "option planner must be balanced or partition"),
])
def test_source_options_are_checked_in_one_place(options, problem):
    base = {"topic": "t", "kafka.bootstrap.servers": "127.0.0.1:1"}
    raw = options if options in ({}, {"topic": "t"}) else {**base, **options}
    with pytest.raises(ValueError, match=problem):
        SourceOptions.parse(raw)


def test_source_options_parse_what_the_job_sets():
    parsed = SourceOptions.parse({"topic": "logs", "kafka.bootstrap.servers": "b:1",
                                  "kafka.security.protocol": "SSL", "maxRecordsPerTask": "0",
                                  "minPartitions": "4", "planner": "PARTITION",
                                  "failOnDataLoss": "false", "pollTimeoutMs": "1500"})
    assert parsed.kafka == {"bootstrap.servers": "b:1", "security.protocol": "SSL"}
    assert (parsed.max_per_task, parsed.min_partitions, parsed.balanced) == (None, 4, False)
    assert (parsed.fail_on_data_loss, parsed.poll_timeout_s) == (False, 1.5)


class _Msg:
    def __init__(self, partition: int, offset: int, error: object = None) -> None:
        self._p, self._o, self._e = partition, offset, error

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> object:
        return self._e


def _take(messages: list[_Msg], whole: bool) -> tuple[list[_Msg], dict[int, int], list[int]]:
    from l2m.kafka.source import _Buffer

    reader = KafkaStreamReader.__new__(KafkaStreamReader)
    reader.topic, reader.fail_on_data_loss = "logs", True
    position, ends, buffer = {0: 5, 1: 0, 2: 3}, {0: 10, 1: 10, 2: 4}, _Buffer()
    done = (KafkaStreamReader._take_all(messages, position, ends, buffer) if whole
            else reader._take_each(messages, position, ends, buffer))
    assert done is not None
    return buffer.messages, position, sorted(done)


@pytest.mark.parametrize(("messages", "whole"), [
    ([_Msg(0, 5), _Msg(0, 6), _Msg(0, 7)], True),   # the usual fetch
    ([_Msg(0, 5), _Msg(1, 0), _Msg(0, 6), _Msg(1, 1)], True),  # partitions interleaved
    ([_Msg(0, 5), _Msg(0, 7)], True),                # a gap (compaction, markers)
    ([_Msg(0, 8), _Msg(0, 9), _Msg(0, 10), _Msg(0, 11)], True),  # past the range's end
    ([_Msg(2, 3), _Msg(2, 4), _Msg(1, 9), _Msg(0, 9)], True),  # three pieces read to the end
    ([_Msg(0, 4), _Msg(0, 5)], False),               # before the position
    ([_Msg(0, 6), _Msg(0, 5)], False),               # out of order
    ([_Msg(0, 5), _Msg(0, 6, error=object())], False),  # an error event (EOF, ...)
    ([_Msg(3, 0)], False),                           # a partition not assigned
    ([_Msg(0, 5), _Msg(1, 0), _Msg(2, 2)], False),   # one of several before its position
])
def test_a_fetch_is_taken_whole_exactly_as_one_message_at_a_time(messages, whole):
    """_take_all (numpy over the whole fetch) takes what the per-message path takes, or
    declines (None) and leaves everything untouched."""
    from l2m.kafka.source import _Buffer

    position, ends, buffer = {0: 5, 1: 0, 2: 3}, {0: 10, 1: 10, 2: 4}, _Buffer()
    taken = KafkaStreamReader._take_all(messages, position, ends, buffer)
    if not whole:
        assert taken is None
        assert (len(buffer), position) == (0, {0: 5, 1: 0, 2: 3})
        return
    assert _take(messages, whole=True) == _take(messages, whole=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.integers(0, 14)), max_size=12))
def test_random_fetches_are_taken_whole_exactly_as_one_message_at_a_time(fetch):
    # Kafka hands each partition's messages in offset order; interleaving is arbitrary.
    seen: set[tuple[int, int]] = set()
    messages = []
    for p, offset in fetch:
        if (p, offset) not in seen:
            seen.add((p, offset))
            messages.append((p, offset))
    by_partition = {p: sorted(o for q, o in messages if q == p) for p in (0, 1, 2)}
    ordered = [_Msg(p, by_partition[p].pop(0)) for p, _ in messages]
    from l2m.kafka.source import _Buffer

    position, ends, buffer = {0: 5, 1: 0, 2: 3}, {0: 10, 1: 10, 2: 4}, _Buffer()
    if KafkaStreamReader._take_all(ordered, position, ends, buffer) is None:
        assert not ordered or any(m.offset() < {0: 5, 1: 0, 2: 3}[m.partition()]
                                  for m in ordered)
        # Declined: nothing taken, no position moved (the per-message path starts afresh).
        assert (len(buffer), position) == (0, {0: 5, 1: 0, 2: 3})
        return
    assert _take(ordered, whole=True) == _take(ordered, whole=False)
