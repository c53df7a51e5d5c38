"""The worker's producer cache (l2m.kafka.producer): one producer per client settings, and a
new one asks for its topic's metadata at once, off the caller's thread."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import confluent_kafka
import pytest

from l2m.kafka import producer as producers


class FakeProducer:
    instances: ClassVar[list[FakeProducer]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.asked: list[tuple[str, float]] = []
        self.done = threading.Event()
        FakeProducer.instances.append(self)

    def list_topics(self, topic: str, timeout: float) -> None:
        self.asked.append((topic, timeout))
        self.done.set()
        if topic == "broken":
            raise confluent_kafka.KafkaException("no broker")


@pytest.fixture(autouse=True)
def fake_producers(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeProducer.instances = []
    monkeypatch.setattr(confluent_kafka, "Producer", FakeProducer)
    monkeypatch.setattr(producers, "_PRODUCERS", {})


def test_a_new_producer_asks_for_its_topic_once_and_is_then_shared() -> None:
    first = producers.cached_producer({"bootstrap.servers": "x:1"}, "metrics")
    assert first.done.wait(5)
    again = producers.cached_producer({"bootstrap.servers": "x:1"}, "metrics")
    assert again is first
    assert first.asked == [("metrics", 10)]
    assert len(FakeProducer.instances) == 1


def test_other_settings_make_another_producer_and_no_topic_asks_nothing() -> None:
    plain = producers.cached_producer({"bootstrap.servers": "x:1"})
    other = producers.cached_producer({"bootstrap.servers": "y:1"}, "dead")
    assert other.done.wait(5)
    assert plain is not other
    assert plain.asked == []
    assert other.asked == [("dead", 10)]


def test_a_failed_metadata_request_is_left_to_the_first_message() -> None:
    made = producers.cached_producer({"bootstrap.servers": "x:1"}, "broken")
    assert made.done.wait(5)
    assert producers.cached_producer({"bootstrap.servers": "x:1"}, "broken") is made
