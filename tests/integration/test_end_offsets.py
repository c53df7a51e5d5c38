"""The embedded broker (tansu) reports a partition's end (ListOffsets latest) as the base offset
of its newest record batch + 1, so the rest of that batch is invisible to a reader that trusts
it. l2m reads to the true end all the same (docs/streaming.md, "End offsets"): logs from a
default-config producer — many records per batch — are all counted by `l2m run --once`, with
no closing records."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql.streaming.datasource import ReadAllAvailable

from l2m.kafka.source import KafkaStreamReader
from tests.integration.test_streaming import generated
from tests.support.kafka_helpers import consume_all, fresh_topics, job_yaml, latest_samples


def produce_default(bootstrap: str, topic: str, lines: list[bytes], partitions: int) -> None:
    """As a user's program would: a default-config producer, one flush at the end."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, line in enumerate(lines):
        producer.produce(topic, value=line, partition=i % partitions)
    assert producer.flush(30) == 0


def reported_latest(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import TopicPartition

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                  for p in range(partitions)}, request_timeout=10)
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def reader(bootstrap: str, topic: str) -> KafkaStreamReader:
    return KafkaStreamReader({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                              "pollTimeoutMs": "10000"}, None)  # type: ignore[arg-type]


def test_run_once_counts_every_log_of_a_default_producer(broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    lines = generated(1000, seed=19)
    produce_default(t.bootstrap, t.topics.logs, lines, t.partitions)
    # the broker's quirk is still there: without l2m's probe most logs would be skipped
    assert sum(reported_latest(t.bootstrap, t.topics.logs, t.partitions).values()) < 1000

    config = job_yaml(t, tmp_path)
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(config),
                          "--once"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "in     1000 rows" in res.stderr, res.stderr[-3000:]
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    inputs = {s["labels"]["status"]: s["value"] for s in samples if s["rule"] == "l2m-input"}
    assert sum(inputs.values()) == 1000, inputs
    assert inputs.get("blank", 0) == 0  # no closing records


def test_the_source_plans_to_the_true_end_and_probes_only_idle_partitions(broker,
                                                                          monkeypatch):
    t = fresh_topics(broker.bootstrap, partitions=2)
    produce_default(t.bootstrap, t.topics.logs, [b"{}"] * 1000, t.partitions)
    r = reader(t.bootstrap, t.topics.logs)
    start = r.initialOffset()
    assert start["partitions"] == {"0": 0, "1": 0}
    # availableNow: the target is the true end, whatever the broker reports
    r.prepareForTriggerAvailableNow()
    assert r.latestOffset(start, ReadAllAvailable())["partitions"] == {"0": 500, "1": 500}
    assert r.reportLatestOffset()["partitions"] == {"0": 500, "1": 500}

    # a running query: a partition whose reported end is past the last batch's end is not
    # probed (on Kafka: one with new data); one whose reported end has not moved past it is,
    # and its invisible tail read
    running = reader(t.bootstrap, t.topics.logs)
    probed: list[dict[int, int]] = []
    probe = running._end_probe()
    ends = probe.ends
    monkeypatch.setattr(probe, "ends", lambda offsets: probed.append(offsets) or ends(offsets))
    first = running.latestOffset(start, ReadAllAvailable())
    assert probed == [] and 0 < sum(first["partitions"].values()) < 1000
    end = running.latestOffset(first, ReadAllAvailable())
    reported = {int(p): o for p, o in first["partitions"].items()}
    assert probed == [reported]  # from the reported end: an offset the broker holds
    assert end["partitions"] == {"0": 500, "1": 500}
    # idle, the reported end behind what was read: probed, the end stays (no data loss)
    assert running.latestOffset(end, ReadAllAvailable()) == end
    assert probed == [reported, reported]

    # starting at "latest" starts after every record, not inside the newest batch
    late = KafkaStreamReader({"kafka.bootstrap.servers": t.bootstrap, "topic": t.topics.logs,
                              "startingOffsets": "latest"}, None)  # type: ignore[arg-type]
    assert late.initialOffset()["partitions"] == {"0": 500, "1": 500}
    for source in (r, running, late):
        source.stop()


def test_probe_cost_is_one_fetch(broker):
    """The probe of idle partitions costs one fetch round trip per micro-batch (a kept
    consumer): bounded well under the trigger interval."""
    t = fresh_topics(broker.bootstrap, partitions=4)
    produce_default(t.bootstrap, t.topics.logs, [b"{}"] * 400, t.partitions)
    r = reader(t.bootstrap, t.topics.logs)
    end = r.latestOffset(r.initialOffset(), ReadAllAvailable())
    end = r.latestOffset(end, ReadAllAvailable())
    assert sum(end["partitions"].values()) == 400
    took = []
    for _ in range(5):
        began = time.perf_counter()
        assert r.latestOffset(end, ReadAllAvailable()) == end  # every partition probed
        took.append(time.perf_counter() - began)
    r.stop()
    assert min(took) < 0.5, took
