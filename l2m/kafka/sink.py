"""Sink stage: ``key, value`` rows → a Kafka topic, as a PySpark Python Data Source
(``format("l2m-kafka-sink")``).

Input: ``key, value`` rows (strings or bytes: the state stage's samples), optionally
``time`` (the record's timestamp, ms: the state stage's micro-batch time, the same when the
batch is replayed; else the producer's clock), written again as the header
:data:`~l2m.engine.samples.TIME_HEADER`, and ``mark`` (a sample's
:data:`~l2m.engine.samples.MARK_HEADER`), and the ``kafka.*`` client settings. A message sent
again (below) keeps its timestamp and headers.
Output: messages on the topic, every one acknowledged before the task returns, or
:class:`~l2m.errors.SinkError`.

Each task produces its rows with an idempotent producer, flushes, and fails if any message
was not acknowledged — so a micro-batch commits only when every sample is in Kafka, and a
broker error fails the query with a clear message instead of dropping samples. The one
exception: a sample Kafka refuses for good (larger than the producer's ``message.max.bytes``
or the topic's ``max.message.bytes``, an invalid record) would fail every replay too, so it is
sent to the job's dead-letter topic (option ``deadletters.topic``, clients
``deadletters.kafka.*``) and reported on stderr, and the rest of the batch commits: no sample
can stop the stream. Replays after
a failure re-send the same deterministic keys (SPEC §4): at-least-once, idempotent samples.

Spark accepts Python stream writers only in append mode, while l2m's query runs in update
mode; the job therefore writes each micro-batch with the batch writer from ``foreachBatch``
(:func:`write_batch`), which has the same delivery guarantees. The stream writer serves
append-mode queries.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from l2m.errors import ConfigError, SinkError
from l2m.kafka.deadletters import DEAD_LETTER_MAX_BYTES, DeadLetters
from l2m.kafka.options import CLIENT_LOG_LEVEL, kafka_config
from l2m.kafka.producer import cached_producer, drop_producer, produce, refused

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

# The samples' module (and Arrow, pandas) only where rows are written: Spark's driver creates
# the writer and commits each batch in Python processes of its own (the first of each on a
# query start, on its critical path), which import this module and nothing they do not use.

# librdkafka's default message.max.bytes (the largest message a producer sends).
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000


@dataclass
class Delivered(WriterCommitMessage):
    rows: int
    refused: int = 0  # samples the topic refused for good: dead-lettered (or dropped)
    dropped: int = 0  # of those, the ones no dead-letter topic took


# A sample the topic refused: key, value, why, and its record's timestamp (ms; None: the
# producer's clock) and headers, which a re-send keeps (remote write needs both).
Refusal = tuple[bytes | None, bytes | None, str, int | None, list[tuple[str, bytes]]]


def _into(result: list[Any]) -> Callable[[Any, Any], None]:
    """A delivery callback that keeps the error (None: delivered) in ``result``."""

    def report(err: Any, _msg: Any) -> None:
        result.append(err)

    return report


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _stamp(at: int | None, mark: str | None) -> dict[str, Any]:
    """A sample record's timestamp and headers (``produce`` arguments): the micro-batch's
    time as the record's timestamp and again in :data:`~l2m.engine.samples.TIME_HEADER` (a
    topic with ``message.timestamp.type=LogAppendTime`` replaces the former, remote write
    reads the latter), and the sample's :data:`~l2m.engine.samples.MARK_HEADER`."""
    from l2m.engine.samples import record_headers

    headers = record_headers(mark, at)
    if at is None:
        return {"headers": headers} if headers else {}
    return {"timestamp": at, "headers": headers}


def _sent_at(msg: Any) -> int | None:
    """The timestamp a message of a delivery report was produced with (librdkafka dates one
    without at produce()). Its headers are not there (confluent-kafka's delivery reports carry
    none): the sink binds them to the report's callback."""
    kind, at = msg.timestamp()
    return at if kind and at is not None and at > 0 else None


class _Producing:
    def __init__(self, options: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in options.items()}
        self.topic = options["topic"]
        self.config = kafka_config(options)
        default = self.config.get("message.timeout.ms", "60000")
        self.timeout = float(options.get("flushtimeoutms", default)) / 1000
        # Where refused samples go: the job's dead-letter topic on the logs' cluster.
        self.dead_letter_topic = options.get("deadletters.topic")
        self.dead_letter_config = kafka_config(options, "deadletters.kafka.")

    def _producer(self) -> Any:
        return sink_producer(self.config, self.timeout, self.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Delivered:
        """Produce every row; a message Kafka refuses for good (:func:`~l2m.kafka.producer.
        refused`: too large, invalid) is sent again alone — a broker refuses a whole record
        batch for one oversized message in it — and if refused again, dead-lettered
        (:meth:`_dead_letter`). Any other error fails the task (:class:`SinkError`): the
        micro-batch is replayed."""
        from confluent_kafka import KafkaException

        from l2m.engine.samples import unpacked_samples

        errors: list[str] = []
        batched: list[Refusal] = []  # refused in the delivery report: maybe for a neighbour
        alone: list[Refusal] = []  # refused at produce(): for its own size

        def delivered(headers: list[tuple[str, bytes]], err: Any, msg: Any) -> None:
            if refused(err):
                batched.append((msg.key(), msg.value(), str(err), _sent_at(msg), headers))
            elif err is not None:
                errors.append(str(err))

        plain = functools.partial(delivered, [])

        # Each (time, mark)'s produce() arguments and report, built once: a task's samples
        # share their micro-batch's time and a few marks, and building them per record (the
        # headers, the time's digits, a partial) cost ≈ 1 µs a sample, a fifth of the sink.
        stamps: dict[tuple[int | None, str | None], tuple[dict[str, Any], Any]] = {}
        producer = self._producer()
        rows = 0
        try:
            for batch in unpacked_samples(iterator):
                keys = batch.column("key").to_pylist()
                values = batch.column("value").to_pylist()
                names = batch.schema.names
                times = batch.column("time").to_pylist() if "time" in names \
                    else [None] * len(keys)
                marks = batch.column("mark").to_pylist() if "mark" in names \
                    else [None] * len(keys)
                for key, value, at, mark in zip(keys, values, times, marks, strict=True):
                    cached = stamps.get((at, mark))
                    if cached is None:
                        stamp = _stamp(at, mark)
                        headers = stamp.get("headers")
                        # The report is the one place to know a refused record's headers
                        # again: they are bound to it.
                        cached = stamps[at, mark] = (stamp, plain if headers is None else
                                                     functools.partial(delivered, headers))
                    stamp, report = cached
                    try:
                        produce(producer, self.topic, value=value, key=key,
                                on_delivery=report, **stamp)
                    except KafkaException as exc:
                        if not refused(exc.args[0]):
                            raise
                        alone.append((_bytes(key), _bytes(value), str(exc.args[0]),
                                      stamp.get("timestamp"), stamp.get("headers", [])))
                    rows += 1
                producer.poll(0)
                if errors:
                    break
            remaining = producer.flush(self.timeout)
            if not errors and not remaining:
                alone += self._one_by_one(producer, batched, errors)
        except KafkaException as exc:
            drop_producer(producer)
            raise SinkError(f"cannot produce to Kafka topic '{self.topic}': {exc}") from None
        if errors or remaining:
            drop_producer(producer)
            raise SinkError(
                f"Kafka did not acknowledge {len(errors) + remaining} of {rows} samples for "
                f"topic '{self.topic}' (first error: {errors[0] if errors else 'timed out'}); "
                "the micro-batch is not committed and will be replayed on restart")
        return Delivered(rows, len(alone), self._dead_letter(alone))

    def _one_by_one(self, producer: Any, batched: list[Refusal],
                    errors: list[str]) -> list[Refusal]:
        """Send each message refused in a delivery report again, alone, with its timestamp and
        headers (a counter's time and ``new``, a window's ``final``): those refused again
        are refused for their own sake. A transient error goes to ``errors``."""
        out: list[Refusal] = []
        for key, value, _reason, at, headers in batched:
            result: list[Any] = []
            stamp: dict[str, Any] = {} if at is None else {"timestamp": at}
            if headers:
                stamp["headers"] = headers
            produce(producer, self.topic, value=value, key=key, on_delivery=_into(result),
                    **stamp)
            if producer.flush(self.timeout) or not result:
                errors.append("timed out")
            elif refused(result[0]):
                out.append((key, value, str(result[0]), at, headers))
            elif result[0] is not None:
                errors.append(str(result[0]))
            if errors:
                break
        return out

    def _dead_letter(self, refusals: list[Refusal]) -> int:
        """Samples the topic refused for good → the dead-letter topic (the sample's key, its
        value cut to what the dead-letter producer accepts, the reason, ``l2m.origin`` the
        metrics topic, ``l2m.kind: sample``, and the sample's own headers: its mark and
        time, for a re-send); one line each on stderr. Without a dead-letter
        topic, or when it refuses one for good too, the sample is dropped. Returns how many
        were dropped."""
        if not refusals:
            return 0
        dead_letters = None
        if self.dead_letter_topic:
            config = self.dead_letter_config or self.config
            limit = int(config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
            dead_letters = DeadLetters(config, self.dead_letter_topic, self.topic,
                                       max_bytes=min(DEAD_LETTER_MAX_BYTES, limit // 2))
        for key, value, reason, _at, headers in refusals:
            size = len(value or b"") + len(key or b"")
            where = f"dead-lettered to {self.dead_letter_topic}" if dead_letters else "dropped"
            print(f"l2m: a sample of {size} bytes was refused by topic {self.topic} for good "
                  f"({reason}): {where}", file=sys.stderr, flush=True)
            if dead_letters is not None:
                dead_letters.send_record(key, value, f"sample refused: {reason}", self.topic,
                                         [("l2m.kind", b"sample"), *headers])
        if dead_letters is None:
            return len(refusals)
        dead_letters.flush()
        return len(dead_letters.dropped)


class KafkaStreamWriter(_Producing, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class KafkaBatchWriter(_Producing, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class KafkaSink(DataSource):
    """``df.writeStream.format("l2m-kafka-sink").option("topic", …)``: rows ``key, value``
    (strings or bytes)."""

    @classmethod
    def name(cls) -> str:
        return "l2m-kafka-sink"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _check(schema)
        return KafkaStreamWriter(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _check(schema)
        return KafkaBatchWriter(dict(self.options))


def _check(schema: StructType) -> None:
    missing = {"key", "value"} - set(schema.fieldNames())
    if missing:
        raise ConfigError(f"l2m-kafka-sink needs columns key and value; missing "
                          f"{', '.join(sorted(missing))}")


def write_batch(frame: DataFrame, topic: str, kafka: dict[str, str],
                dead_letters: tuple[str, dict[str, str]] | None = None) -> None:
    """Write one micro-batch (or any DataFrame of ``key, value``) to ``topic``; samples the
    topic refuses for good go to ``dead_letters`` (topic, client settings), else are
    dropped."""
    writer = frame.write.format("l2m-kafka-sink").mode("append").option("topic", topic)
    for key, value in kafka.items():
        writer = writer.option(f"kafka.{key}", value)
    if dead_letters is not None:
        writer = writer.option("deadletters.topic", dead_letters[0])
        for key, value in dead_letters[1].items():
            writer = writer.option(f"deadletters.kafka.{key}", value)
    writer.save()


def sink_producer(config: dict[str, Any], timeout_s: float, topic: str | None = None) -> Any:
    """The (cached) producer of samples for these client settings: idempotent, every replica's
    acknowledgement, a message given up after ``timeout_s``; a new one readies ``topic``
    (:func:`~l2m.kafka.producer.cached_producer`)."""
    return cached_producer({
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        "message.timeout.ms": int(timeout_s * 1000),
        "log_level": CLIENT_LOG_LEVEL,
        **config,
    }, topic)


def produce_samples(samples: list[dict[str, Any]], topic: str, kafka: dict[str, str],
                    timeout_s: float = 30.0) -> None:
    """Write a few samples from the driver (l2m's own, :mod:`l2m.state.accounts`) with the
    sink's producer and keys, waiting for every acknowledgement; what was not delivered is a
    :class:`SinkError`. Their gauges are values at the moment, never corrected: each is final
    (:data:`~l2m.engine.samples.MARK_HEADER`); a counter's mark is its own (``MARK_KEY``: a
    series' first sample is ``new``). Each record is dated with its sample's ``timestamp``,
    also in :data:`~l2m.engine.samples.TIME_HEADER`, which remote write stamps counters
    with."""
    from l2m.engine.samples import FINAL, MARK_KEY, series_key

    if not samples:
        return
    producer = sink_producer(kafka, timeout_s, topic)
    errors: list[Any] = []
    for sample in samples:
        sample = dict(sample)
        mark = sample.pop(MARK_KEY, None)
        produce(producer, topic, key=series_key(sample), value=orjson.dumps(sample),
                on_delivery=_into(errors),
                **_stamp(int(sample["timestamp"]), FINAL if sample["kind"] == "gauge" else mark))
    left = producer.flush(timeout_s)
    failed = [e for e in errors if e is not None]
    if left or failed:
        drop_producer(producer)
        raise SinkError(f"l2m's account metrics were not delivered to {topic}: "
                        f"{failed[0] if failed else f'{left} still queued after {timeout_s} s'}")
