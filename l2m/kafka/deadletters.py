"""Dead letters: malformed and future-dated logs → the dead-letter topic, with the original
key and bytes (truncated past a limit), the reason, the origin and the original size in
headers, keyed deterministically (a retried task overwrites, never adds).

Input: the records of a read task (:class:`l2m.kafka.consumer.Records`) and the rows the parse
stage dead-lettered. Output: messages on the dead-letter topic, flushed and checked before
the task ends (:class:`~l2m.errors.SinkError` otherwise); a record the topic refuses for good
(too large for it, invalid) is dropped and counted instead, so no record can fail the task.
The sink (:mod:`l2m.kafka.sink`) sends the samples the metrics topic refuses here too."""

from __future__ import annotations

import sys
from typing import Any

from l2m.errors import SinkError
from l2m.kafka.options import CLIENT_LOG_LEVEL
from l2m.kafka.producer import cached_producer, drop_producer, produce, refused

# Dead letters keep at most this many bytes of the original record: a 5 MB log must not be
# refused by the dead-letter topic (its broker limit is unknown; tansu answers no
# DescribeConfigs) and fail the job. Its full size is in the `l2m.size` header.
DEAD_LETTER_MAX_BYTES = 256 * 1024


class DeadLetters:
    """Malformed logs → the dead-letter topic: the original key and bytes (truncated past
    ``max_bytes``), the reason, the origin and the original size in headers, keyed
    deterministically (a retried task overwrites, never adds)."""

    def __init__(self, config: dict[str, str], topic: str, source_topic: str,
                 max_bytes: int = DEAD_LETTER_MAX_BYTES) -> None:
        self.topic = topic
        self.source_topic = source_topic
        self.max_bytes = max_bytes
        self.producer = cached_producer({"enable.idempotence": True, "linger.ms": 20,
                                         "log_level": CLIENT_LOG_LEVEL, **config}, topic)
        self.errors: list[str] = []
        self.dropped: list[str] = []  # records the topic refused for good (their reasons)
        self.sent = 0

    def send(self, buffer: Any, i: int, reason: str) -> None:
        origin = f"{self.source_topic}/{buffer.partitions[i]}/{buffer.offsets[i]}"
        self.send_record(buffer.keys[i], buffer.values[i], reason, origin)

    def send_record(self, key: bytes | None, value: bytes | None, reason: str, origin: str,
                    headers: list[tuple[str, bytes]] | None = None) -> None:
        """One record (a log, or a sample the metrics topic refused: :mod:`l2m.kafka.sink`)
        with its reason and origin; a record the dead-letter topic refuses for good
        (:func:`~l2m.kafka.producer.refused`) is dropped and counted in :attr:`dropped`."""
        from confluent_kafka import KafkaException

        key = key if key is not None else origin.encode()
        headers = [("l2m.error", reason[:1024].encode("utf-8", "replace")),
                   ("l2m.origin", origin.encode()), *(headers or [])]
        if value is not None:
            headers.append(("l2m.size", str(len(value)).encode()))
            if len(value) > self.max_bytes:
                value = value[:self.max_bytes]
                headers.append(("l2m.truncated", b"true"))
        if len(key) > self.max_bytes // 4:
            key = origin.encode()
        try:
            produce(self.producer, self.topic, value=value, key=key, headers=headers,
                    on_delivery=self._delivered)
        except KafkaException as exc:
            if not refused(exc.args[0]):
                raise
            self.dropped.append(str(exc.args[0]))
        self.sent += 1
        self.producer.poll(0)

    def _delivered(self, err: Any, msg: Any) -> None:
        if refused(err):
            self.dropped.append(str(err))
        elif err is not None:
            self.errors.append(str(err))

    def flush(self) -> None:
        remaining = self.producer.flush(60)
        if remaining or self.errors:
            drop_producer(self.producer)
            raise SinkError(f"dead-letter topic {self.topic}: {remaining} undelivered, "
                            f"errors: {self.errors[:3]}")
        if self.dropped:
            print(f"l2m: dead-letter topic {self.topic} refused {len(self.dropped)} record(s) "
                  f"for good ({self.dropped[0]}): dropped", file=sys.stderr, flush=True)
