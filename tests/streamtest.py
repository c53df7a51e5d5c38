"""An in-memory streaming harness, in the manner of Spark's ``StreamTest``: the real job —
parse → route → pre-aggregate → state, one query, a checkpoint — fed by the memory source
(:mod:`l2m.memory`) instead of Kafka and writing samples to a list instead of a topic.

Actions: :meth:`StreamTest.add` (logs, with record timestamps), :meth:`StreamTest.process`
(process everything added so far, in one or more micro-batches of a running query, started on
the checkpoint if needed), :meth:`StreamTest.stop`, :meth:`StreamTest.restart` (a new query
on the same checkpoint, optionally with other rules), :meth:`StreamTest.advance` (a log that
moves the watermark), and :meth:`StreamTest.samples` / :meth:`StreamTest.check` (the last
sample per Kafka key, as downstream keeps it). Stateful semantics are tested in seconds; Kafka
stays for the source, the sink and end-to-end tests."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import DataFrame, SparkSession

from l2m.config import JobConfig
from l2m.memory import MemorySource, append
from l2m.rules import Rule
from l2m.streaming import Job, start_job

OWN = ("l2m-input", "l2m-late")  # l2m's own counters


class StreamTest:
    """One streaming job on a checkpoint under ``folder``, fed from memory."""

    def __init__(self, spark: SparkSession, rules: Sequence[Rule], folder: Path,
                 partitions: int = 2, **config: Any) -> None:
        spark.dataSource.register(MemorySource)
        self.spark = spark
        self.rules = list(rules)
        self.partitions = partitions
        self.source_folder = folder / "source"
        # A short trigger: process() waits for the running query, never for a timer.
        self.cfg = replace(JobConfig(checkpoint=str(folder / "checkpoint"), counter_shards=2,
                                     trigger_ms=100), **config)
        self.received: list[tuple[str, str]] = []
        self.added = 0
        self.job: Job | None = None

    # --- actions ----------------------------------------------------------------------------

    def add(self, lines: Iterable[bytes | str | None], record_ts: int | None = None) -> None:
        """Append records round-robin over the partitions, dated ``record_ts`` (default: now,
        as a producer's CreateTime)."""
        values = [x.encode() if isinstance(x, str) else x for x in lines]
        ts = record_ts if record_ts is not None else int(time.time() * 1000)
        for p in range(self.partitions):
            mine = values[p::self.partitions]
            if mine:
                append(self.source_folder, p, mine, [ts] * len(mine))
        self.added += len(values)

    def advance(self, event_time: int) -> None:
        """A log at ``event_time`` that matches no rule field: it moves the watermark."""
        self.add([orjson.dumps({"@timestamp": event_time})])

    def process(self) -> Job:
        """Process everything added so far (a running query's next micro-batches; the query
        starts on the checkpoint if it is not running)."""
        if self.job is None:
            self.job = self._start()
        self.job.query.processAllAvailable()
        error = self.job.query.exception()
        assert error is None, error
        return self.job

    def stop(self) -> None:
        """Stop the query (its last batch is committed)."""
        if self.job is not None:
            self.job.query.stop()
            self.job = None

    def restart(self, rules: Sequence[Rule] | None = None) -> Job:
        """Stop, start a new query on the same checkpoint (optionally with other rules), and
        process what was added."""
        self.stop()
        if rules is not None:
            self.rules = list(rules)
        return self.process()

    def _start(self) -> Job:
        def source(plan_json: str) -> DataFrame:
            return (self.spark.readStream.format("l2m-memory")
                    .option("path", str(self.source_folder))
                    .option("partitions", str(self.partitions))
                    .option("parsePlan", plan_json).load())

        def sink(frame: DataFrame, _batch_id: int) -> None:
            self.received.extend((r["key"], r["value"]) for r in frame.collect())

        return start_job(self.spark, self.cfg, self.rules, source=source, sink=sink)

    # --- checks -----------------------------------------------------------------------------

    def samples(self, own: bool = False) -> list[dict[str, Any]]:
        """The last sample per Kafka key (as a downstream store keeps them); l2m's own
        counters only with ``own``."""
        latest: dict[str, str] = {}
        for key, value in self.received:
            latest[key] = value
        out = [orjson.loads(v) for v in latest.values()]
        return [s for s in out if own or s["rule"] not in OWN]

    def values(self, rule: str) -> dict[tuple[tuple[tuple[str, str], ...], int], Any]:
        """{(labels, timestamp): value} of one rule's last samples."""
        return {(tuple(sorted(s["labels"].items())), s["timestamp"]): s["value"]
                for s in self.samples(own=True) if s["rule"] == rule}

    def check(self, expected: Iterable[dict[str, Any]]) -> None:
        """The last samples equal ``expected`` exactly (l2m's own counters aside)."""
        assert canonical(self.samples()) == canonical(expected)


def canonical(samples: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((s["rule"], s["name"], tuple(sorted(s["labels"].items())), s["timestamp"],
                   s["value"], s["kind"], s["account"]) for s in samples)


def harness(spark: SparkSession, rules: Sequence[Rule], folder: Path,
            **kw: Any) -> StreamTest:
    """A :class:`StreamTest` (a factory, for fixtures)."""
    return StreamTest(spark, rules, folder, **kw)
