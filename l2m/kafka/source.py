"""Source stage: a Kafka topic → Spark rows, as a PySpark Python Data Source on
confluent-kafka (``format("l2m-kafka")``; options: :mod:`l2m.kafka.options`).

* Offsets live in the Spark checkpoint (``{"topic": …, "partitions": {"0": 42, …}}``);
  partitions are read by explicit assignment, never through a consumer group, so there is no
  group rebalancing. ``groupId`` optionally commits processed offsets to a group only so that
  standard lag tools can see progress.
* Planning is skew-aware (:func:`l2m.kafka.offsets.plan_tasks`): the batch is cut into
  tasks of about equal size — a hot partition split over several tasks, small partitions
  sharing one — with no task over ``maxRecordsPerTask`` records and at least
  ``minPartitions`` tasks.
  ``planner=partition`` gives the classic one-task-per-partition plan.
* Admission control: ``maxRecordsPerTrigger`` is shared over partitions in proportion to their
  backlog, never starving a small one. ``Trigger.AvailableNow`` reads up to the end offsets
  seen when the query started.
* Ticks (option ``tickMs``, :class:`Ticker`): an idle topic's offset gains a ``tick`` when the
  state's timers are due, so that a batch without rows runs them; an offset without ``tick``
  (written before ticks) is at tick 0. Each offset says by when its batch's timers are due
  (``timers``), for a later available-now run's tick.
* With ``routing`` (the job's rules, :func:`l2m.engine.pipeline.routing_option`) each task parses,
  routes and pre-aggregates what it reads (:class:`l2m.engine.pipeline.TaskPipeline`) and yields
  only partials (``PARTIAL_SCHEMA``); with ``parsePlan`` (a JSON
  :class:`~l2m.engine.parse.ParsePlan`) it yields the parsed, typed logs; with neither, raw ``key,
  value, topic, partition, offset, timestamp`` rows. Malformed logs go to
  ``deadLetterTopic`` (original bytes, the reason in headers) when that option is set.
* Every ``kafka.*`` option is passed to the client (TLS, SASL…); none is ever logged.

Input: the source's options (:mod:`l2m.kafka.options`), the topic's offsets (driver) and a
task's offset ranges (executors). Output: offsets for the checkpoint, the micro-batch's tasks,
and each task's rows — partials, parsed logs or raw records, by the options.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from l2m.engine.columns import PARTIAL_SCHEMA, STREAM_PARTIAL_SCHEMA
from l2m.engine.rulesets import Versions, planned_version
from l2m.errors import DataLossError, KafkaUnavailableError
from l2m.kafka.consumer import EndProbe
from l2m.kafka.offsets import OffsetRange, plan_tasks, rate_limit
from l2m.kafka.options import CLIENT_LOG_LEVEL, SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa

    from l2m.kafka.consumer import Records

# What reads logs (Arrow, the read task: the parse and pipeline stages, luqum, msgspec, the
# rules) is imported in `read`, not here: Spark's driver runs this module in Python processes
# of its own, started one after another on every query start (the source's lookup and
# creation, its runner, the read planning), which only plan offsets — 0.06-0.15 s of imports
# less each, on the start's critical path. Executors' workers have them pre-imported
# (l2m.runtime.daemon).

RAW_SCHEMA = ("key binary, value binary, topic string, partition int, offset bigint, "
              "timestamp bigint")
# Ticks after the last batch with data, at most one per tick interval (below): the first lets
# the state's timers see the watermark that batch moved; the second covers a boundary
# crossed between planning that batch and its batch time. Without new data the watermark
# stands still, so no window can become final after them: an idle job then runs no batch.
TICKS_PER_IDLE = 2
# A batch's time — which its state's timers are set from — is taken after its offsets are
# planned, by a few ms: a planned offset's ``timers`` allow this much.
BATCH_SLACK_MS = 2_000
# The longest an available-now run's tick waits for an earlier run's timers: a job's recheck
# is a minute (l2m.streaming.job.RECHECK_MS); timers further ahead are a test's whose source
# never ticks, not waited for.
LONGEST_WAIT_MS = 2 * 60_000


class Ticker:
    """When an idle source advances its offset with no record in it — a *tick* — so that Spark
    runs a batch without rows in which the state processes its expired timers (the gauge
    windows' recheck, :mod:`l2m.state.processor`): Spark runs a batch only when an offset
    moved (the job turns ``noDataMicroBatches`` off, docs/streaming.md "Ticks").

    ``every_ms`` is the state's recheck interval; its timers are due on multiples of it
    (:meth:`l2m.state.windowkeys.WindowCall.schedule`), so a tick is due once a multiple
    has passed since the last batch, :data:`TICKS_PER_IDLE` times after data at most. Under
    ``Trigger.AvailableNow`` one tick follows the data: the run's last batch, in which the state
    publishes every window final by then (its timers are due at once in such a run).
    ``every_ms`` None or 0: never.

    Every offset planned says by when the timers set up to its batch are due (``timers``,
    :meth:`stamp`), so that an available-now run after a continuous one — whose keys
    without new logs keep timers up to a recheck ahead, and a timer runs only once due —
    plans its tick only once they are (:meth:`due`: it waits, a minute at most)."""

    def __init__(self, every_ms: int | None) -> None:
        self.every_ms = every_ms or 0
        self.last_ms = _now_ms()  # the last batch planned (or the reader's start)
        self.left = TICKS_PER_IDLE
        self.final = False  # available-now: its tick planned

    def data(self) -> None:
        """A batch with data was planned."""
        self.last_ms = _now_ms()
        self.left = TICKS_PER_IDLE

    def due(self, available_now: bool, start: dict[str, Any] | None = None) -> bool:
        """Whether the idle source ticks now (and counts the tick if so); ``start``: the
        offset it would tick from. Available-now: its one tick waits for the timers
        ``start`` names (:meth:`stamp`), if a minute or two ahead at most."""
        if not self.every_ms:
            return False
        if available_now:
            due, self.final = not self.final, True
            ahead = int((start or {}).get("timers", 0)) - _now_ms()
            if due and 0 < ahead <= LONGEST_WAIT_MS:
                _sleep_ms(ahead + 1)  # timers run once past due: after it, not at it
            return due
        now = _now_ms()
        if self.left <= 0 or now // self.every_ms <= self.last_ms // self.every_ms:
            return False
        self.left -= 1
        self.last_ms = now
        return True


    def stamp(self, offset: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
        """``offset`` (a batch's: data or a tick, planned from ``start``) with ``timers``:
        when every window timer set up to its batch is due, at the latest — this batch's at
        the next multiple of the recheck after its time, earlier batches' by ``start``'s.
        Keys the batch does not look at keep theirs, so it never goes back."""
        if not self.every_ms:
            return offset
        ahead = min(BATCH_SLACK_MS, self.every_ms)
        mine = ((_now_ms() + ahead) // self.every_ms + 1) * self.every_ms
        return {**offset, "timers": max(mine, int(start.get("timers", 0)))}


def ticked(offset: dict[str, Any]) -> dict[str, Any]:
    """``offset`` one tick later: the same positions (and rule set), ``tick`` counted up. An
    offset written before ticks (no ``tick``) is at tick 0."""
    return {**offset, "tick": int(offset.get("tick", 0)) + 1}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _sleep_ms(ms: int) -> None:
    time.sleep(ms / 1000)


class KafkaInputPartition(InputPartition):
    """One Spark task: one or more offset ranges, read one after the other."""

    def __init__(self, topic: str, ranges: Sequence[OffsetRange],
                 ruleset: str | None = None) -> None:
        super().__init__((topic, tuple((r.partition, r.start, r.end) for r in ranges), ruleset))
        self.topic = topic
        self.ranges = tuple(ranges)
        self.ruleset = ruleset  # the rules the batch was planned with (None: the query's)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        # One type end to end: the job's SourceConfig (``self.source``), read back from the
        # options, with the settings only the running job knows.
        self.settings = SourceOptions.parse(options)
        self.source = self.settings.source
        self.topic = self.settings.topic
        self.config = self.settings.kafka
        self.dead_letters = self.settings.dead_letter_topic
        self.stop_file = self.settings.stop_file
        self.routing = self.settings.routing
        self.versions = Versions(self.settings.ruleset, self.routing) \
            if self.routing and self.settings.ruleset else None
        self.parse_plan = self.settings.parse_plan
        self.schema = schema
        self._admin: Any = None
        self._probe: EndProbe | None = None  # the driver's end-offset check, made on first use
        self._latest: dict[int, int] | None = None
        self._target: dict[int, int] | None = None
        self.ticker = Ticker(int(self.settings.tick_ms or 0))

    @property
    def poll_timeout_s(self) -> float:
        return self.source.poll_timeout_ms / 1000

    # --- pickling: executors get options only, never driver-side clients -----------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        state["_probe"] = None
        return state

    # --- driver side ---------------------------------------------------------------------

    def _admin_client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({**self.config, "log_level": CLIENT_LOG_LEVEL})
        return self._admin

    def _partitions(self) -> list[int]:
        from confluent_kafka import KafkaException

        # Full metadata, not a request for this topic: brokers with topic auto-creation
        # (tansu always) would create a mistyped topic instead of reporting it.
        try:
            meta = self._admin_client().list_topics(timeout=30)
        except KafkaException as exc:
            raise KafkaUnavailableError(f"cannot read Kafka metadata: {exc}") from None
        topic = meta.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            error = topic.error if topic is not None else "unknown topic"
            # Retried like an outage: a topic being created or a broker restarting.
            raise KafkaUnavailableError(f"Kafka topic '{self.topic}' is not available: {error}")
        return sorted(topic.partitions)

    def _offsets(self, spec: str) -> dict[int, int]:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        make = OffsetSpec.earliest if spec == "earliest" else OffsetSpec.latest
        request = {TopicPartition(self.topic, p): make() for p in self._partitions()}
        try:
            futures = self._admin_client().list_offsets(request, request_timeout=30)
            return {tp.partition: fut.result().offset for tp, fut in futures.items()}
        except Exception as exc:  # KafkaException, or a timeout inside the future
            raise KafkaUnavailableError(f"cannot list {spec} offsets of Kafka topic "
                                        f"'{self.topic}': {exc}") from None

    def _end_offsets(self, start: dict[int, int] | None = None) -> dict[int, int]:
        """Each partition's end: ListOffsets(latest), checked by a fetch (:class:`EndProbe`)
        where it does not show data past ``start`` (everywhere without one).

        A broker may report less than it holds: tansu, the embedded broker, answers the base
        offset of the partition's newest record batch + 1, so the rest of that batch would stay
        unread until newer data arrives (and ``--once`` would skip it). Its fetch responses
        carry the true end (the high watermark), as Kafka's do. A partition with new data is
        planned up to the reported end — on tansu, the newest batch's tail waits for the next
        micro-batch; one with none (idle, or the reported end behind what was already read) is
        probed with a fetch from its reported end, always a valid offset (tansu answers a
        fetch past its end with nothing at all, not an error): on Kafka a fetch at the end, no
        records, one round trip, and only for idle partitions."""
        reported = self._offsets("latest")
        idle = {p: o for p, o in reported.items() if start is None or o <= start.get(p, 0)}
        if not idle:
            return reported
        return {**reported, **self._end_probe().ends(idle)}

    def _end_probe(self) -> EndProbe:
        if self._probe is None:
            self._probe = EndProbe(self.topic, self.config, self.poll_timeout_s)
        return self._probe

    def _encode(self, offsets: dict[int, int], ruleset: str | None = None,
                tick: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"topic": self.topic,
                               "partitions": {str(p): int(o) for p, o in sorted(offsets.items())}}
        if ruleset is not None:
            out["ruleset"] = ruleset
        if tick:  # the ticks so far (Ticker): carried on, so an offset never goes back
            out["tick"] = tick
        return out

    def _ruleset(self) -> str | None:
        """The version new batches are planned with (None: the job has no live rules)."""
        if self.settings.ruleset is None:
            return None
        return planned_version(self.settings.ruleset_file, self.settings.ruleset)

    @staticmethod
    def _decode(offset: dict[str, Any]) -> dict[int, int]:
        return {int(p): int(o) for p, o in offset["partitions"].items()}

    def initialOffset(self) -> dict[str, Any]:
        if self.source.starting_offsets == "earliest":
            return self._encode(self._offsets("earliest"))
        if self.source.starting_offsets == "latest":
            return self._encode(self._end_offsets())
        wanted = json.loads(self.source.starting_offsets)
        wanted = wanted.get(self.topic, wanted)
        earliest = self._offsets("earliest")
        latest = self._end_offsets()
        start = {}
        for p in earliest:
            value = int(wanted.get(str(p), -2))
            start[p] = earliest[p] if value == -2 else latest[p] if value == -1 else value
        return self._encode(start)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._end_offsets()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.source.max_records_per_trigger:
            return ReadMaxRows(self.source.max_records_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if self.stop_file and os.path.exists(self.stop_file):
            return start
        begin = self._decode(start)
        latest = self._target if self._target is not None else self._end_offsets(begin)
        self._latest = latest
        # New partitions start at their beginning.
        begin = {p: begin.get(p, 0) for p in latest}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        else:
            end = dict(latest)
        for p, offset in begin.items():
            if end[p] < offset:
                self._data_loss(f"offsets of {self.topic}-{p} went back from {offset} to "
                                f"{end[p]}: the topic was recreated or truncated")
        if end == begin:
            # No new data: no batch, whatever the rules (no version change) — but a tick when
            # the state's timers are due (Ticker): a batch of no rows.
            if not self.ticker.due(self._target is not None, start):
                return start
            return self.ticker.stamp(ticked(start), start)
        self.ticker.data()
        # The batch's rules are part of its offset: Spark writes it to the offset log before
        # the batch runs, and a replay reads it back, so a replay gets the same rules.
        return self.ticker.stamp(self._encode(end, self._ruleset(), start.get("tick")), start)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._encode(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = self._decode(start)
        until = self._decode(end)
        ranges = []
        earliest: dict[int, int] | None = None
        for p, stop in sorted(until.items()):
            first = begin.get(p, 0)
            if stop < first:  # recreated topic, failOnDataLoss=false: read what is there now
                first = 0
            if stop > first:
                if earliest is None:
                    earliest = self._offsets("earliest")
                low = earliest.get(p, 0)
                if first < low:
                    self._data_loss(f"offsets {first}..{low - 1} of {self.topic}-{p} are gone "
                                    f"(retention): {low - first} records lost")
                    first = low
            ranges.append(OffsetRange(p, first, stop))
        src = self.source
        tasks = plan_tasks(ranges, src.max_records_per_task, src.min_partitions,
                           src.planner == "balanced")
        if self.source.plan_log and tasks:
            with open(self.source.plan_log, "a") as log:
                log.write(json.dumps({"time": time.time(),
                                      "tasks": [sum(r.size for r in t) for t in tasks]}) + "\n")
        ruleset = end.get("ruleset")
        return [KafkaInputPartition(self.topic, t, ruleset) for t in tasks]

    def _data_loss(self, message: str) -> None:
        if self.source.fail_on_data_loss:
            raise DataLossError(message + " (set failOnDataLoss=false to skip and count)")
        print(f"l2m source: data loss, skipped: {message}", file=sys.stderr, flush=True)

    def commit(self, end: dict[str, Any]) -> None:
        if not self.source.group_id:
            return
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**self.config, "group.id": self.source.group_id,
                             "enable.auto.commit": False, "log_level": CLIENT_LOG_LEVEL})
        try:
            consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                     for p, o in self._decode(end).items()],
                            asynchronous=False)
        except Exception as exc:  # lag visibility only: never fail the query for it
            print(f"l2m source: offset commit to group {self.source.group_id} failed: {exc}",
                  file=sys.stderr, flush=True)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._admin = None
        if self._probe is not None:
            self._probe.close()

    # --- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """A task: its records → partials (``routing``), parsed logs (``parsePlan``) or raw
        rows; dead letters flushed and acknowledged before the partials are handed over."""
        assert isinstance(partition, KafkaInputPartition)
        if partition.size <= 0:
            return
        from l2m.engine.readtask import ReadTask
        from l2m.engine.streamtask import StreamTask
        from l2m.kafka.consumer import PartitionReader
        from l2m.kafka.deadletters import DeadLetters

        if self.versions is not None:
            from pyspark import SparkFiles

            task: ReadTask | None = StreamTask(self.versions, partition.ruleset,
                                               SparkFiles.getRootDirectory(),
                                               int(self.settings.shards or 1),
                                               pack=self.settings.pack == "1")
        else:
            task = ReadTask.from_options(self.routing, self.parse_plan)
        dead_letters = DeadLetters(self.config, self.dead_letters, self.topic) \
            if self.dead_letters and task is not None else None
        started = time.time()
        reader = PartitionReader(self.topic, self.config, partition.ranges, self.poll_timeout_s,
                                 self._data_loss)
        for records in reader.batches():
            if task is None:
                yield raw_batch(records, self.topic)
                continue
            send = None if dead_letters is None else functools.partial(dead_letters.send,
                                                                       records)
            yield from task.add(records.values, records.timestamps, send)
        if dead_letters is not None:
            dead_letters.flush()
        if task is not None:
            yield from task.finish()
        if self.source.plan_log:
            self._log_task(started, partition.size)

    def _log_task(self, started: float, records: int) -> None:
        """Benchmarks: which executor read how many records (the Python worker's parent is
        its executor's worker daemon, one per executor)."""
        import socket

        with open(f"{self.source.plan_log}.tasks", "a") as log:
            log.write(json.dumps({"time": started, "records": records,
                                  "seconds": round(time.time() - started, 3),
                                  "executor": f"{socket.gethostname()}:{os.getppid()}"}) + "\n")



class KafkaSource(DataSource):
    """``spark.readStream.format("l2m-kafka")``."""

    @classmethod
    def name(cls) -> str:
        return "l2m-kafka"

    def schema(self) -> str:
        options = SourceOptions.parse(dict(self.options))
        if options.routing:
            return STREAM_PARTIAL_SCHEMA if options.ruleset else PARTIAL_SCHEMA
        if options.parse_plan:
            from l2m.engine.parse import ParsePlan

            return ParsePlan.from_json(options.parse_plan).spark_schema_ddl()
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options), schema)


def raw_batch(records: Records, topic: str) -> pa.RecordBatch:
    """Records as the source's raw rows (:data:`RAW_SCHEMA`)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([
        pa.array(records.keys, pa.binary()), pa.array(records.values, pa.binary()),
        pa.array([topic] * len(records), pa.string()),
        pa.array(records.partitions, pa.int32()),
        pa.array(records.offsets, pa.int64()), pa.array(records.timestamps, pa.int64()),
    ], names=["key", "value", "topic", "partition", "offset", "timestamp"])
