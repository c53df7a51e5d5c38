"""A topic read as it grows, for tests that wait on what a running job has written: one
consumer kept open for the test, each :meth:`TopicReader.read` taking only what arrived since
the last. :func:`tests.support.kafka_helpers.consume_all` opens a consumer per call and reads
to the ends the broker reports — right for a final comparison, but a wait polling it paid a
connection and a watermark request on every look."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from tests.support.kafka_helpers import reader


class TopicReader:
    """Every record of ``topic`` (``partitions`` of it) from the start, read on demand on the
    real broker. Use it as a context manager (the consumer is closed at the end)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 1) -> None:
        # caught up, a fetch waits this long for new records
        self.consumer = reader(bootstrap, topic, partitions, **{"fetch.wait.max.ms": 100})
        self.records: list[Any] = []

    def read(self, quiet_s: float = 0.3) -> list[Any]:
        """Every record so far: what arrived since the last call is consumed until the topic
        has been quiet for ``quiet_s``. A record written later is in a later call — callers
        poll until their condition holds, and compare with ``consume_all`` at the end."""
        while True:
            batch = self.consumer.consume(1000, timeout=quiet_s)
            if not batch:
                return self.records
            self.records.extend(m for m in batch if m.error() is None)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
