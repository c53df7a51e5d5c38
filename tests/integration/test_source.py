"""The Kafka source against the real broker: split and unsplit plans read the same rows, data
loss fails clearly or is skipped (planning and fetch handling:
tests/unit/kafka/test_kafka_source.py)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from l2m.dev.broker import create_topics
from l2m.errors import DataLossError
from l2m.kafka.source import KafkaStreamReader
from tests.support.kafka_helpers import fresh_topics, produce


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
