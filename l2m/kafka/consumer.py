"""The executor's consume loop: one read task's offset ranges → batches of Kafka records.

Input: the topic, the client settings and a task's :class:`~l2m.kafka.offsets.OffsetRange`
pieces (at most one per partition). Output: :class:`Records` batches of up to
:data:`~l2m.defaults.BATCH_ROWS` messages, exactly the offsets ``[start, end)`` of each
piece, in offset order per partition. Offsets out of range are data loss (``on_data_loss``
decides: fail or skip and say so); a broker that sends nothing for ``poll_timeout_s`` is
:class:`~l2m.errors.KafkaUnavailableError`. Messages are read one by one only when a fetch is
not the usual one (errors, gaps before the position, messages past a piece's end).

Also the driver's :class:`EndProbe`: where partitions end as a fetch sees them (tansu reports
less in ListOffsets; docs/streaming.md, "The topic's end")."""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

from l2m.defaults import BATCH_ROWS
from l2m.errors import KafkaUnavailableError
from l2m.kafka.offsets import OffsetRange
from l2m.kafka.options import CLIENT_LOG_LEVEL

# Settings of the read task's consumer; the job's `kafka.*` settings come on top.
CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 262144,
    "log_level": CLIENT_LOG_LEVEL,
}


class PartitionReader:
    """Reads a task's offset ranges of ``topic`` by explicit assignment (never through a
    consumer group: no rebalancing)."""

    def __init__(self, topic: str, config: dict[str, str], ranges: Sequence[OffsetRange],
                 poll_timeout_s: float, on_data_loss: Callable[[str], None]) -> None:
        self.topic = topic
        self.config = config
        self.ranges = tuple(ranges)
        self.poll_timeout = poll_timeout_s
        self.on_data_loss = on_data_loss

    def batches(self, rows: int = BATCH_ROWS) -> Iterator[Records]:
        """The pieces' records in batches of up to ``rows``; the consumer is closed when the
        iteration ends (or is abandoned)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({
            "group.id": f"l2m-reader-{self.topic}",  # required by the client; never joined
            **CONSUMER_DEFAULTS,
            **self.config,
        })
        ends = {r.partition: r.end for r in self.ranges}
        position = {r.partition: r.start for r in self.ranges}
        try:
            # All pieces at once (a task holds at most one per partition): one fetch session,
            # no per-range re-assignment round trips.
            consumer.assign([TopicPartition(self.topic, r.partition, r.start)
                             for r in self.ranges])
            buffer = Records()
            deadline = time.monotonic() + self.poll_timeout
            while (remaining := sum(max(0, ends[p] - position[p]) for p in ends)) > 0:
                # Ask for no more than is still due: consume() waits for the full count.
                messages = consumer.consume(num_messages=min(rows, remaining), timeout=1.0)
                if not messages and time.monotonic() > deadline:
                    behind = {p: position[p] for p in ends if position[p] < ends[p]}
                    raise KafkaUnavailableError(
                        f"no records from {self.topic} partitions/offsets {behind} within "
                        f"{self.poll_timeout:.0f}s (expected up to {ends})")
                done = self._take_all(messages, position, ends, buffer)
                if done is None:
                    done = self._take_each(messages, position, ends, buffer)
                if done:  # fetched to the end of their pieces: fetch no more of them
                    consumer.pause([TopicPartition(self.topic, p) for p in done])
                if messages:
                    deadline = time.monotonic() + self.poll_timeout
                if len(buffer) >= rows:
                    yield buffer
                    buffer = Records()
            if len(buffer):
                yield buffer
        finally:
            consumer.close()

    @staticmethod
    def _take_all(messages: list[Any], position: dict[int, int], ends: dict[int, int],
                  buffer: Records) -> list[int] | None:
        """The usual fetch — no errors, each partition's offsets increasing from its position
        — taken as :meth:`_take_each` would take it, without a Python step per message:
        messages past their piece's end dropped, the rest added to the buffer. Returns the
        partitions now read to their end; None: go through the messages one by one."""
        # any(): a KafkaError is true, and cannot be compared with None (it raises).
        if not messages or any(map(_ERROR, messages)):
            return None
        import numpy as np  # here: the driver's end probe (this module) never needs it

        n = len(messages)
        partitions = np.fromiter(map(_PARTITION, messages), np.int64, n)
        offsets = np.fromiter(map(_OFFSET, messages), np.int64, n)
        distinct = np.unique(partitions).tolist()
        pieces = []
        for p in distinct:  # every partition checked before anything is taken
            if p not in ends:
                return None
            rows = slice(None) if len(distinct) == 1 else partitions == p
            mine = offsets[rows]
            if mine[0] < position[p] or (len(mine) > 1 and (np.diff(mine) <= 0).any()):
                return None  # before the position or out of order: one by one decides
            pieces.append((p, rows, mine, mine < ends[p]))
        keep = np.ones(n, bool)
        done = []
        for p, rows, mine, due in pieces:
            if not due.all():  # fetched past this piece's end
                keep[rows] = due
            if due.any():
                position[p] = int(mine[due][-1]) + 1
            if position[p] >= ends[p]:
                done.append(p)
        buffer.messages.extend(messages if keep.all() else
                               itertools.compress(messages, keep.tolist()))
        return done

    def _take_each(self, messages: list[Any], position: dict[int, int],
                   ends: dict[int, int], buffer: Records) -> list[int]:
        """Messages one by one: error events (end of partition, offsets out of range,
        failures), offsets before the position or past the piece's end. Returns the
        partitions now read to their end."""
        from confluent_kafka import KafkaError

        done = []
        for msg in messages:
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if error.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                    p = msg.partition()
                    self.on_data_loss(f"offset {position.get(p)} of {self.topic}-{p} "
                                    "is out of range")
                    position[p] = ends[p]
                    continue
                raise KafkaUnavailableError(f"Kafka error reading {self.topic}: {error}")
            p = msg.partition()
            offset = msg.offset()
            if offset < position[p] or offset >= ends[p]:
                continue  # fetched past this piece's end
            buffer.add(msg)
            position[p] = offset + 1
            if position[p] >= ends[p]:
                done.append(p)
        return done


class EndProbe:
    """Where partitions really end, as a fetch sees them (the driver's check of the end offsets).

    Kafka's end of a partition (ListOffsets ``latest``) is its high watermark, the same number
    every fetch response carries. The embedded broker (tansu) answers ListOffsets with the base
    offset of the newest record batch + 1, while its fetch responses carry the true high
    watermark. :meth:`ends` fetches once from the given offsets and returns each partition's
    high watermark from that response. One consumer is kept for the driver's lifetime (no
    connection set-up per probe) and assigned only for the probe; it is never pickled."""

    # One fetch, answered at once: a fetch at the end waits `fetch.wait.max.ms` for data
    # (1 ms: a wait of 0 was never answered by tansu); a partition with records sends about
    # one batch (64 KiB, or its first batch if larger) — the probe wants the response's high
    # watermark, not the records.
    SETTINGS: ClassVar[dict[str, Any]] = {
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 1,
        "max.partition.fetch.bytes": 64 * 1024,
        "isolation.level": "read_uncommitted",  # as the admin client's ListOffsets
        "auto.offset.reset": "latest",  # an offset past the end (data loss): the end
        "log_level": CLIENT_LOG_LEVEL,
    }

    def __init__(self, topic: str, config: dict[str, str], timeout_s: float) -> None:
        self.topic = topic
        self.config = config
        self.timeout = timeout_s
        self._consumer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}

    def ends(self, offsets: dict[int, int]) -> dict[int, int]:
        """The high watermark of each partition of ``offsets`` as a fetch from that offset
        sees it (at least the offset itself when the fetch finds records there). A partition
        not answered within the timeout is :class:`~l2m.errors.KafkaUnavailableError`."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        if not offsets:
            return {}
        if self._consumer is None:
            self._consumer = Consumer({"group.id": f"l2m-end-probe-{self.topic}",  # never joined
                                       **self.config, **self.SETTINGS})
        consumer = self._consumer
        ends: dict[int, int] = {}
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in offsets.items()])
        try:
            deadline = time.monotonic() + self.timeout
            while len(ends) < len(offsets):
                # what has arrived, else wait for the next event (poll returns with it)
                events = consumer.consume(num_messages=100_000, timeout=0) or \
                    [e for e in [consumer.poll(0.1)] if e is not None]
                for msg in events:
                    p = msg.partition()
                    if msg.topic() != self.topic or p not in offsets or p in ends:
                        continue  # a client-wide event (a disconnect: the client retries)
                    error = msg.error()
                    if error is not None and error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaUnavailableError(
                            f"Kafka error checking where {self.topic}-{p} ends: {error}")
                    # a partition's first event follows the probe's fetch response, whose high
                    # watermark the client keeps; an end-of-partition event's offset is it
                    seen = msg.offset() + (0 if error is not None else 1)
                    _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                             cached=True)
                    ends[p] = max(seen, high)
                if len(ends) < len(offsets) and time.monotonic() > deadline:
                    missing = sorted(set(offsets) - set(ends))
                    raise KafkaUnavailableError(
                        f"no fetch answer for {self.topic} partitions {missing} within "
                        f"{self.timeout:.0f}s (checking where they end)")
        finally:
            consumer.unassign()  # no fetching between probes
        return ends

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


_ERROR = operator.methodcaller("error")
_PARTITION = operator.methodcaller("partition")
_OFFSET = operator.methodcaller("offset")


class Records:
    """The messages of one batch of a read task; their fields are read when first needed,
    each in one pass (keys, partitions and offsets only for raw rows and dead letters)."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self._fields: dict[str, list[Any]] = {}

    def add(self, msg: Any) -> None:
        self.messages.append(msg)

    def _field(self, name: str) -> list[Any]:
        found = self._fields.get(name)
        if found is None:
            getter = operator.methodcaller(name)
            found = self._fields[name] = list(map(getter, self.messages))
        return found

    @property
    def keys(self) -> list[bytes | None]:
        return self._field("key")

    @property
    def values(self) -> list[bytes | None]:
        return self._field("value")

    @property
    def partitions(self) -> list[int]:
        return self._field("partition")

    @property
    def offsets(self) -> list[int]:
        return self._field("offset")

    @property
    def timestamps(self) -> list[int | None]:
        found = self._fields.get("timestamp")
        if found is None:
            found = self._fields["timestamp"] = [ts if kind else None for kind, ts in
                                                 map(operator.methodcaller("timestamp"),
                                                     self.messages)]
        return found

    def __len__(self) -> int:
        return len(self.messages)
