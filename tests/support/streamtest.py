"""An in-memory streaming harness, in the manner of Spark's ``StreamTest``: the real job —
parse → route → pre-aggregate → state, one query, a checkpoint — fed by the memory source
(:mod:`l2m.dev.memory`) instead of Kafka, writing samples to a driver-side list instead of a topic.

Input: rules, a folder (source records and the checkpoint live under it) and actions —
:meth:`StreamTest.add` (logs, with record timestamps), :meth:`StreamTest.advance` (a log that
moves the watermark), :meth:`StreamTest.process` (everything added so far, in the running
query's next micro-batch; the query starts on the checkpoint if it is not running),
:meth:`StreamTest.stop`, :meth:`StreamTest.restart` (a new query on the same checkpoint,
optionally with other rules), :meth:`StreamTest.run_once` (``l2m run --once`` on it).
Output: every ``key, value`` sample the sink received (and in :attr:`StreamTest.marked` each
one's mark); :meth:`StreamTest.samples` / :meth:`StreamTest.values` give the last sample per
Kafka key, as downstream keeps them, and :meth:`StreamTest.check` compares them exactly.

Why a running query and ``processAllAvailable`` rather than one availableNow run per
``process()``: starting a query costs about 2 s here (the Python source runner is a new
process), a micro-batch about 1 s; restarts stay honest because :meth:`restart` really stops
the query and starts a new run, which reloads state, offsets and watermark from the
checkpoint. Only one harness query runs at a time (the job's query name is fixed)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import DataFrame, SparkSession

from l2m.config.job import JobConfig
from l2m.dev.memory import NAME, MemorySource, append
from l2m.engine.samples import unpacked_samples
from l2m.rules.model import Rule
from l2m.streaming.job import Job, start_job
from tests.support.kafka_helpers import canonical as canonical

# l2m's own counters (l2m_input_logs_total, l2m_late_logs_total, …) have rule ids with this
# prefix; samples() leaves them out unless asked, so tests compare only their rules' samples.
OWN_PREFIX = "l2m-"
SHUFFLE = "spark.sql.shuffle.partitions"
# The harness's default recheck: none while a test runs, so no idle source's tick (due once a
# multiple of the recheck has passed since the last batch) comes between the batches a test
# counts; tests of ticks give theirs (the job's is l2m.streaming.job.RECHECK_MS).
NO_TICKS = 10**12

Labels = tuple[tuple[str, str], ...]


class StreamTest:
    """One streaming job on a checkpoint under ``folder``, fed from memory.

    ``partitions``: logical source partitions (read tasks). ``state_partitions``: Spark's
    shuffle partitions for a new checkpoint — two state tasks run in one wave on two cores,
    where the test session's four took two (a micro-batch 2.6 s → 1.3 s, measured). ``config``:
    :class:`~l2m.config.loader.JobConfig` fields (``grace_ms``, ``counter_shards``…)."""

    def __init__(self, spark: SparkSession, rules: Sequence[Rule], folder: Path,
                 partitions: int = 2, state_partitions: int = 2,
                 recheck_ms: int = NO_TICKS, **config: Any) -> None:
        spark.dataSource.register(MemorySource)
        self.spark = spark
        self.rules = list(rules)
        self.partitions = partitions
        self.state_partitions = state_partitions
        self.source_folder = folder / "source"
        # A short trigger: process() waits for the running query, never for a timer.
        self.cfg = replace(JobConfig(checkpoint=str(folder / "checkpoint"), counter_shards=2,
                                     trigger_ms=100), **config)
        self.received: list[tuple[str, str]] = []  # (key, value) in the order written
        # (key, value, mark) in the order written: the l2m-mark header of each record
        self.marked: list[tuple[str, str, str | None]] = []
        self.by_batch: dict[int, list[tuple[str, str, str | None]]] = {}  # … per batch id
        self.recheck_ms = recheck_ms  # how often a window key without logs is looked at
        self.batches: list[int] = []  # the batch id of every sink call (a replay repeats one)
        # The record times of every batch's samples (the state stage's micro-batch time).
        self.times: dict[int, set[int]] = {}
        self.added = 0
        self._next_partition = 0
        self.job: Job | None = None

    # --- actions ----------------------------------------------------------------------------

    def add(self, lines: Iterable[bytes | str | None],
            record_ts: int | Sequence[int | None] | None = None,
            partition: int | None = None) -> None:
        """Append records round-robin over the partitions (or all to ``partition``), dated
        ``record_ts`` — one time for all, or one per line (``None``: no record time) — by
        default now, as a producer's CreateTime. Not processed until :meth:`process`."""
        values = [x.encode() if isinstance(x, str) else x for x in lines]
        if record_ts is None or isinstance(record_ts, int):
            stamps: list[int | None] = [record_ts if record_ts is not None
                                        else int(time.time() * 1000)] * len(values)
        else:
            stamps = list(record_ts)
        if len(stamps) != len(values):
            raise ValueError(f"{len(values)} lines but {len(stamps)} record timestamps")
        by_partition: dict[int, tuple[list[bytes | None], list[int | None]]] = {}
        for value, stamp in zip(values, stamps, strict=True):
            if partition is not None:
                p = partition
            else:
                p = self._next_partition
                self._next_partition = (p + 1) % self.partitions
            vs, ts = by_partition.setdefault(p, ([], []))
            vs.append(value)
            ts.append(stamp)
        for p, (vs, ts) in sorted(by_partition.items()):
            append(self.source_folder, p, vs, ts)
        self.added += len(values)

    def advance(self, event_time: int) -> None:
        """Add a log at ``event_time`` with no field a rule aggregates (so it changes no
        sample): after the next batch the watermark is at least ``event_time`` − grace. Its
        record is dated ``event_time`` too, so the future bound never holds it back, whatever
        the machine's clock says."""
        self.add([orjson.dumps({"@timestamp": event_time})], record_ts=event_time)

    def process(self) -> Job:
        """Process everything added so far (the running query's next micro-batch; the query
        starts on the checkpoint if it is not running). Raises what the query raised."""
        if self.job is None:
            self.job = self._start()
        self.job.query.processAllAvailable()
        error = self.job.query.exception()
        assert error is None, error
        return self.job

    def stop(self) -> None:
        """Stop the query. After :meth:`process` no batch is running, so this is a clean stop;
        with records added since, the batch they started may be cut (and replayed on the next
        start, as after a crash)."""
        if self.job is not None:
            self.job.query.stop()
            self.job = None

    def run_once(self) -> Job:
        """Stop the running query, if any, and run ``l2m run --once`` on the checkpoint
        (``Trigger.AvailableNow``): everything added so far, then the run ends."""
        self.stop()
        job = self._start(once=True)
        job.query.awaitTermination()
        error = job.query.exception()
        assert error is None, error
        return job

    def restart(self, rules: Sequence[Rule] | None = None) -> Job:
        """Stop, start a new query on the same checkpoint (optionally with other rules), and
        process what was added since the last :meth:`process`."""
        self.stop()
        if rules is not None:
            self.rules = list(rules)
        return self.process()

    def _start(self, once: bool = False) -> Job:
        def source(rules: dict[str, str]) -> DataFrame:
            return (self.spark.readStream.format(NAME)
                    .option("path", str(self.source_folder))
                    .option("partitions", str(self.partitions))
                    .options(**rules).load())

        def sink(frame: DataFrame, batch_id: int) -> None:
            # foreachBatch runs on the driver: the list is this object's.
            # as the Kafka sink reads them: a state call's packed samples unpacked
            batches = unpacked_samples(frame.toArrow().to_batches())
            rows = [row for batch in batches for row in batch.to_pylist()]
            self.received.extend((r["key"], r["value"]) for r in rows)
            marked = [(r["key"], r["value"], r["mark"]) for r in rows]
            self.marked.extend(marked)
            self.by_batch[batch_id] = marked
            self.batches.append(batch_id)
            self.times[batch_id] = {r["time"] for r in rows}

        # The query copies the session's settings when it starts, and the checkpoint keeps
        # the number of state partitions of its first batch: set it for the start only.
        previous = self.spark.conf.get(SHUFFLE)
        self.spark.conf.set(SHUFFLE, str(self.state_partitions))
        try:
            return start_job(self.spark, self.cfg, self.rules, once=once, source=source,
                             sink=sink, recheck_ms=self.recheck_ms)
        finally:
            self.spark.conf.set(SHUFFLE, previous)

    # --- checks -----------------------------------------------------------------------------

    def samples(self, own: bool = False) -> list[dict[str, Any]]:
        """The last sample per Kafka key (as a downstream store keeps them); l2m's own
        counters only with ``own``."""
        latest: dict[str, str] = {}
        for key, value in self.received:
            latest[key] = value
        out = [orjson.loads(v) for v in latest.values()]
        return [s for s in out if own or not s["rule"].startswith(OWN_PREFIX)]

    def values(self, rule: str) -> dict[tuple[Labels, int], Any]:
        """``{(sorted labels, timestamp): value}`` of one rule's last samples."""
        return {(tuple(sorted(s["labels"].items())), s["timestamp"]): s["value"]
                for s in self.samples(own=True) if s["rule"] == rule}

    def check(self, expected: Iterable[dict[str, Any]]) -> None:
        """The last samples equal ``expected`` exactly — every field, no sample more or
        less (l2m's own counters aside)."""
        got, want = canonical(self.samples()), canonical(expected)
        if got != want:
            missing = [s for s in want if s not in got]
            unexpected = [s for s in got if s not in want]
            raise AssertionError(f"samples differ: {len(missing)} expected but not received "
                                 f"{missing[:5]}; {len(unexpected)} received but not expected "
                                 f"{unexpected[:5]}")

