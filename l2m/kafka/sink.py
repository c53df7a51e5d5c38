"""Sink stage: ``key, value`` rows → a Kafka topic, as a PySpark Python Data Source
(``format("l2m-kafka-sink")``).

Input: ``key, value`` rows (strings or bytes: the state stage's samples) and the
``kafka.*`` client settings. Output: messages on the topic, every one acknowledged before the
task returns, or :class:`~l2m.errors.SinkError`.

Each task produces its rows with an idempotent producer, flushes, and fails if any message
was not acknowledged — so a micro-batch commits only when every sample is in Kafka, and a
broker error fails the query with a clear message instead of dropping samples. Replays after
a failure re-send the same deterministic keys (SPEC §4): at-least-once, idempotent samples.

Spark accepts Python stream writers only in append mode, while l2m's query runs in update
mode; the job therefore writes each micro-batch with the batch writer from ``foreachBatch``
(:func:`write_batch`), which has the same delivery guarantees. The stream writer serves
append-mode queries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from l2m.errors import SinkError
from l2m.kafka.options import CLIENT_LOG_LEVEL, kafka_config
from l2m.kafka.producer import cached_producer, drop_producer, produce


@dataclass
class Delivered(WriterCommitMessage):
    rows: int


class _Producing:
    def __init__(self, options: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in options.items()}
        self.topic = options["topic"]
        self.config = kafka_config(options)
        default = self.config.get("message.timeout.ms", "60000")
        self.timeout = float(options.get("flushtimeoutms", default)) / 1000

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Delivered:
        from confluent_kafka import KafkaException

        errors: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        producer = cached_producer({
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",
            "message.timeout.ms": int(self.timeout * 1000),
            "log_level": CLIENT_LOG_LEVEL,
            **self.config,
        })
        rows = 0
        try:
            for batch in iterator:
                keys = batch.column("key").to_pylist()
                values = batch.column("value").to_pylist()
                for key, value in zip(keys, values, strict=True):
                    produce(producer, self.topic, value=value, key=key, on_delivery=delivered)
                    rows += 1
                producer.poll(0)
                if errors:
                    break
            remaining = producer.flush(self.timeout)
        except KafkaException as exc:
            drop_producer(producer)
            raise SinkError(f"cannot produce to Kafka topic '{self.topic}': {exc}") from None
        if errors or remaining:
            drop_producer(producer)
            raise SinkError(
                f"Kafka did not acknowledge {len(errors) + remaining} of {rows} samples for "
                f"topic '{self.topic}' (first error: {errors[0] if errors else 'timed out'}); "
                "the micro-batch is not committed and will be replayed on restart")
        return Delivered(rows)


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
    from l2m.errors import ConfigError  # a usage error (code CONFIG), not a Spark failure

    missing = {"key", "value"} - set(schema.fieldNames())
    if missing:
        raise ConfigError(f"l2m-kafka-sink needs columns key and value; missing "
                          f"{', '.join(sorted(missing))}")


def write_batch(frame: DataFrame, topic: str, kafka: dict[str, str]) -> None:
    """Write one micro-batch (or any DataFrame of ``key, value``) to ``topic``."""
    writer = frame.write.format("l2m-kafka-sink").mode("append").option("topic", topic)
    for key, value in kafka.items():
        writer = writer.option(f"kafka.{key}", value)
    writer.save()
