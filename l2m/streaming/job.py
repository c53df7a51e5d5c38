"""The streaming job (SPEC §6): one query in one Spark application.

    read task: consume → parse → route → pre-aggregate (Arrow, l2m.engine.readtask)
    → partials (rule, series, le, window) → watermark → shuffle by (shard, window)
    → state (counters: cumulative, key (shard, CUMULATIVE); gauges: one-minute windows, key
    (shard, window); all rules in each key) → sink

Input: a :class:`~l2m.config.job.JobConfig` and the rules (or, for the in-memory harness, a
source and a sink in place of Kafka's). Output: the running query (:class:`Job`) and its
accumulators (:class:`Counts`); its samples go to the metrics topic each micro-batch. The
state stage is the checkpoint's format's (:mod:`l2m.state.format`): format 9's processor
(:mod:`l2m.state.processor`), or format 2's function for a checkpoint of 0.1.0 or 0.2.0
(:mod:`l2m.state.format2`).

Every log is handled in Python inside the task that reads it; only partials — about one per
two hundred logs with the benchmark rules — reach the JVM, the shuffle and the state.

Counters and gauges share one query, so each log is read from Kafka, parsed and routed
once. Spark's own window aggregation cannot share a query with ``applyInPandasWithState`` in
update mode, so the gauge windows live in the same state stage as the counters, with the
same semantics: watermark = largest event time seen − grace,
corrected windows re-emitted, logs for windows past the watermark dropped and counted.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import Accumulator
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupStateTimeout

from l2m import defaults
from l2m.config.job import JobConfig
from l2m.engine.columns import PLACE_COLUMN
from l2m.engine.pipeline import CapsTable, RuleTable, routing_option
from l2m.engine.routing import plan_for
from l2m.engine.rulesets import Versions
from l2m.engine.status import ROUTED, STATUS_RULE
from l2m.kafka.sink import KafkaSink, produce_samples, write_batch
from l2m.kafka.source import KafkaSource
from l2m.rules.model import Rule
from l2m.rules.snapshot import snapshot
from l2m.state.accounts import AccountBook
from l2m.state.checkpoint import check_checkpoint, local_checkpoint
from l2m.state.counters import CounterState
from l2m.state.format import CUMULATIVE, STATE_FORMAT, STATE_KEY
from l2m.state.format2 import STATE_SCHEMA, MetricState
from l2m.state.gauges import GaugeState
from l2m.state.output import OUTPUT_SCHEMA
from l2m.state.processor import MetricProcessor
from l2m.state.rows import Reduction
from l2m.state.tally import Latest, Sums, Tally, task_sums
from l2m.streaming.accountmetrics import ACCOUNT_FLUSH_S, AccountMetrics
from l2m.streaming.rulesets import RulesetPublisher, ruleset_version

QUERY = "metrics"  # the query's name (l2m-metrics) and its checkpoint directory
# How often a gauge window key with no new logs is looked at (to publish it once final and
# to close it), on multiples of this; an idle source ticks then (l2m.kafka.source.Ticker).
RECHECK_MS = defaults.RECHECK_MS  # the default; a job's is cfg.recheck_ms (key `recheck`)
# Series keys (l2m.engine.fanout: length-prefixed) of the input statuses whose logs are routed.
ROUTED_STATUS_SERIES = sorted({status.series for status in ROUTED})


def stop_file(cfg: JobConfig) -> str:
    """While this file exists the source admits no new data (graceful stop).

    Only the driver writes and reads it, so it lives on local disk: beside a local checkpoint,
    and for an object-store checkpoint (``s3a://...``) in the temp folder under a name derived
    from the URI, one marker per checkpoint."""
    checkpoint = cfg.checkpoint
    local = local_checkpoint(checkpoint)
    if local is not None:
        return f"{local}/STOPPING"
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / f"l2m-stop-{digest}" / "STOPPING")


def register(spark: SparkSession) -> None:
    spark.dataSource.register(KafkaSource)
    spark.dataSource.register(KafkaSink)


def source_frame(spark: SparkSession, cfg: JobConfig, rules: dict[str, str],
                 dead_letters: bool = True) -> DataFrame:
    """The Kafka source's partials for the rules' options (:func:`rule_options`: ``routing``,
    and for live rules ``ruleset``, ``rulesetFile``, ``shards``, ``pack``): the job's ``source:``
    settings as they are, carried by :class:`l2m.kafka.options.SourceOptions`."""
    from dataclasses import replace

    from l2m.kafka.options import RUNTIME, SourceOptions

    source = cfg.source
    if not source.min_partitions:
        source = replace(source, min_partitions=spark.sparkContext.defaultParallelism)
    if not dead_letters:
        source = replace(source, group_id=None)
    # Every option of the rules' (rule_options) by its field: none is left behind.
    options = SourceOptions(
        topic=cfg.topics.logs, kafka=cfg.kafka, source=source,
        dead_letter_topic=cfg.topics.dead_letters if dead_letters else None,
        stop_file=stop_file(cfg), **{RUNTIME[name]: value for name, value in rules.items()})
    return spark.readStream.format("l2m-kafka").options(**options.spark_options()).load()


def rule_options(cfg: JobConfig, versions: Versions, current_file: str | None,
                 state_format: int = STATE_FORMAT, tick_ms: int = 0) -> dict[str, str]:
    """The options a source of partials takes for the job's rules: the first rules inline
    (``routing``, their version ``ruleset``), the driver's file naming the version to plan
    with (``rulesetFile``), the state shards partials are placed in (``shards``), whether
    a state key's partials travel in one row (``pack``: state format 9, whose processor
    unpacks them; :func:`l2m.engine.streamtask.packed`), and how often an idle
    source ticks for the state's timers (``tickMs``, :class:`l2m.kafka.source.Ticker`)."""
    out = {"routing": versions.option, "ruleset": versions.version,
           "shards": str(cfg.counter_shards)}
    if tick_ms:
        out["tickMs"] = str(tick_ms)
    if state_format == STATE_FORMAT:
        out["pack"] = "1"
    if current_file:
        out["rulesetFile"] = current_file
    return out


@dataclass
class Counts:
    """What the job counts about itself for its progress lines and metrics, over the query's
    life (Spark accumulators): the pre-aggregation's rows in → out and per rule, logs that
    came after their gauge window closed (the late count that persists is
    ``l2m_late_logs_total``), and what the state keys last reported (:mod:`l2m.state.tally`)."""

    reduction: Reduction
    late: Accumulator[int]
    tally: Accumulator[Tally] | None = None
    # Per rule: logs refused by a series cap, samples emitted (l2m.state.accounts).
    activity: Accumulator[Tally] | None = None

    @staticmethod
    def create(spark: SparkSession) -> Counts:
        sc = spark.sparkContext
        return Counts(Reduction(sc.accumulator(0), sc.accumulator(0), sc.accumulator({}, Sums())),
                      sc.accumulator(0), sc.accumulator({}, Latest(drops_closed_windows=True)),
                      sc.accumulator({}, Sums()))


# A source of partials: given the rules' options (rule_options), a streaming DataFrame of
# STREAM_PARTIAL_SCHEMA rows.
Source = Callable[[dict[str, str]], DataFrame]
# A sink: called with each micro-batch's ``key, value`` samples and the batch id.
Sink = Callable[[DataFrame, int], None]


def metrics_frame(spark: SparkSession, cfg: JobConfig, rules: Sequence[Rule],
                  counts: Counts | None = None, source: Source | None = None,
                  state_format: int = STATE_FORMAT,
                  publisher: RulesetPublisher | None = None, once: bool = False,
                  recheck_ms: int = RECHECK_MS) -> DataFrame:
    """The query's output: ``key, value`` samples of every updated counter series and gauge
    window. ``source`` replaces the Kafka source (the in-memory test harness).
    ``state_format`` is the checkpoint's, 7 or 2 (:mod:`l2m.state.format`). ``publisher``:
    the job's live rules (:mod:`l2m.streaming.rulesets`), started with ``rules``; without
    one, the rules are fixed for the query's life. ``recheck_ms``: how often a window key
    with no new logs is looked at, an idle source ticking for it (docs/streaming.md, "Ticks");
    ``once`` (``Trigger.AvailableNow``): :func:`timers`."""
    recheck_ms, tick_ms = timers(once, state_format, recheck_ms)
    if publisher is not None:
        versions = publisher.start(rules)
    else:
        routing = plan_for(rules, cfg.timestamp_field, cfg.max_future_ms,
                           cfg.limits.max_label_value_length, cfg.limits.series)
        versions = Versions(ruleset_version(snapshot(rules), cfg), routing_option(routing))
    option = versions.option
    options = rule_options(cfg, versions, publisher.current_file if publisher else None,
                           state_format, tick_ms)
    read = source(options) if source is not None else source_frame(spark, cfg, options)
    status = F.col("rule") == F.lit(STATUS_RULE)
    # Only the times of logs the rules see move the watermark: a malformed or future-dated
    # record (dated by its Kafka time, which may itself be wrong) must not close windows.
    unrouted = status & ~F.col("series").isin(*ROUTED_STATUS_SERIES)
    partials = (read
                .withColumn("window", F.coalesce("window", F.lit(CUMULATIVE)))
                # The input statuses share one key: one exact late-log count (l2m.state.counters).
                .withColumn("shard", F.when(status, F.lit(0)).otherwise(
                    shard_column(cfg.counter_shards, state_format)))
                # The watermark's event time: every log has a status row carrying its own.
                .withColumn("event_time", F.timestamp_millis(
                    F.when(unrouted, F.lit(0)).otherwise(
                        F.coalesce("ts", F.greatest("window", F.lit(0))))))
                .withWatermark("event_time", f"{cfg.grace_ms} milliseconds"))
    tally = None if counts is None else counts.tally
    counters = CounterState(RuleTable(option, "counter", versions), cfg.counter_ttl_ms,
                            None if counts is None else counts.late, tally)
    gauges = GaugeState(RuleTable(option, "gauge", versions), recheck_ms=recheck_ms,
                        tally=tally, grace_ms=cfg.grace_ms, publish_delay_ms=cfg.publish_delay)
    reduction = None if counts is None else counts.reduction
    activity = None if counts is None else counts.activity
    if state_format == STATE_FORMAT:
        processor = MetricProcessor(counters, gauges, reduction, CapsTable(option, versions),
                                    activity, cfg.counter_shards)
        return partials.groupBy(*STATE_KEY).transformWithStateInPandas(
            processor.deferred(), OUTPUT_SCHEMA, "Update", "ProcessingTime")
    # Format 2 (0.1.0, 0.2.0): series placed by (rule, series), so no series caps.
    return partials.groupBy(*STATE_KEY).applyInPandasWithState(
        MetricState(counters, gauges, reduction, activity), OUTPUT_SCHEMA, STATE_SCHEMA,
        "update", GroupStateTimeout.ProcessingTimeTimeout)


def timers(once: bool, state_format: int, recheck_ms: int) -> tuple[int, int]:
    """How often a window key without logs is looked at, and how often an idle source ticks
    for it (0: never), for a query of the checkpoint's ``state_format``. ``once``: format 9
    looks at every open window key in each batch and the source ticks once after the data,
    so the run's last batch publishes every window final by then; format 2 publishes no
    final windows (docs/prometheus.md, "Limits of this version") and its timeouts last a
    whole recheck from the key's last look, so a tick right after the data would run none:
    no tick, no batch for nothing."""
    if not once:
        return recheck_ms, recheck_ms
    if state_format == STATE_FORMAT:
        return 1, 1
    return recheck_ms, 0


def shard_column(shards: int, state_format: int) -> Column:
    """The state shard of each partial (not the input statuses', which share shard 0). State
    format 9: a rule's series go to its placement's shard
    (:func:`l2m.engine.admission.placement_shard`: its account's), so every cap is counted in
    one key — the read task computed it from the rules its batch was planned with (``place``,
    :mod:`l2m.engine.rulesets`), so a rule added while the job runs is placed as at a start;
    l2m's own rows (label cuts) and format 2: hash(rule, series)."""
    spread = F.pmod(F.hash("rule", "series"), F.lit(shards))
    if state_format != STATE_FORMAT:
        return spread
    own = F.col("rule").startswith("__")  # l2m's own rows (label cuts): spread
    return F.when(own, spread).otherwise(F.col(PLACE_COLUMN))


class HadoopFiles:
    """The checkpoint marker's file operations (:class:`l2m.state.checkpoint.Files`) through
    Spark's Hadoop file systems: an object-store checkpoint (``s3a://``, ``gs://``…) is marked
    like a local one, with the credentials and settings the job's Spark has."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _fs(self, path: str) -> tuple[Any, Any]:
        assert self._jvm is not None
        p = self._jvm.org.apache.hadoop.fs.Path(path)
        return p.getFileSystem(self._conf), p

    def read(self, path: str) -> str | None:
        fs, p = self._fs(path)
        if not fs.exists(p):
            return None
        stream = fs.open(p)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(  # type: ignore[union-attr]
                stream, "UTF-8"))
        finally:
            stream.close()

    def write(self, path: str, text: str) -> None:
        fs, p = self._fs(path)
        out = fs.create(p, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()

    def is_dir(self, path: str) -> bool:
        fs, p = self._fs(path)
        return bool(fs.exists(p) and fs.getFileStatus(p).isDirectory())

    def names(self, folder: str) -> list[str]:
        fs, p = self._fs(folder)
        if not fs.exists(p):
            return []
        return sorted(str(s.getPath().getName()) for s in fs.listStatus(p) if s.isFile())

    def delete(self, path: str) -> None:
        fs, p = self._fs(path)
        fs.delete(p, False)


@dataclass
class Job:
    query: StreamingQuery
    counts: Counts | None = None
    rulesets: RulesetPublisher | None = None  # where a changed rule set is published
    accounts: AccountMetrics | None = None  # l2m's per-account samples, written off the batch

    @property
    def queries(self) -> list[StreamingQuery]:
        return [self.query]

    def close(self) -> None:
        """After the query: write what its last batches left to write (the per-account
        samples), without waiting more than a few seconds."""
        if self.accounts is not None:
            self.accounts.close()


def start_job(spark: SparkSession, cfg: JobConfig, rules: Sequence[Rule],
              once: bool = False, source: Source | None = None,
              sink: Sink | None = None, recheck_ms: int | None = None) -> Job:
    """Start the query; ``once`` processes what is available now and stops. ``source`` and
    ``sink`` replace Kafka (the in-memory test harness, :mod:`l2m.dev.memory`);
    ``recheck_ms``: :func:`metrics_frame`'s, by default the job's (``cfg.recheck_ms``)."""
    if recheck_ms is None:
        recheck_ms = cfg.recheck_ms
    register(spark)
    remote = local_checkpoint(cfg.checkpoint) is None
    state_format = check_checkpoint(cfg.checkpoint, QUERY, HadoopFiles(spark) if remote else None)
    if state_format != STATE_FORMAT:
        print(f"l2m run: warning: checkpoint {cfg.checkpoint} holds state format "
              f"{state_format}, whose shards do not hold whole accounts: series caps "
              f"(limits.max_series_*) are not enforced on it. Start a new checkpoint to "
              "enforce them (docs/streaming.md, \"Upgrading\").", file=sys.stderr, flush=True)

    counts = Counts.create(spark)
    publisher = RulesetPublisher(spark, cfg, QUERY, HadoopFiles(spark) if remote else None,
                                 live=state_format == STATE_FORMAT)
    book = AccountBook(cfg.monitoring.top_accounts)

    accounts = AccountMetrics(book, lambda samples: produce_samples(
        samples, cfg.topics.metrics, cfg.sink, timeout_s=ACCOUNT_FLUSH_S))

    def kafka_sink(frame: DataFrame, batch_id: int) -> None:
        write_batch(frame, cfg.topics.metrics, cfg.sink, (cfg.topics.dead_letters, cfg.kafka))
        # The accumulators now hold this batch's state tasks: l2m's per-tenant view follows
        # it, written while the next batch runs (l2m.streaming.accountmetrics).
        accounts.batch_done(batch_id, publisher.accounts,
                            counts.tally.value if counts.tally is not None else {},
                            task_sums(counts))

    writer = (metrics_frame(spark, cfg, rules, counts, source, state_format, publisher, once,
                            recheck_ms)
              .writeStream
              .queryName(f"l2m-{QUERY}").outputMode("update").foreachBatch(sink or kafka_sink)
              .option("checkpointLocation", f"{cfg.checkpoint}/{QUERY}"))
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
    # Processing-time timeouts make Spark run a batch after every batch, data or not, to
    # look for timed-out keys (≈ 1 s of fixed cost each here), and availableNow would never
    # end. Timers run in the batches the source plans instead: those with data, and an idle
    # source's ticks when timers are due (l2m.kafka.source.Ticker, docs/streaming.md
    # "Ticks"). The setting is captured when the query starts.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    try:
        query = writer.start()
    finally:
        spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    _freeze_once()
    return Job(query=query, counts=counts, rulesets=publisher,
               accounts=None if sink is not None else accounts)


_FROZEN: list[bool] = []


def _freeze_once() -> None:
    """What is alive once the first query of this process has started (the rules, their
    routing, the session) lives as long as the process: frozen, it is not scanned by the
    driver's full collections, which the accumulators' updates set off every batch (with
    100,000 rules 0.2–0.28 s of driver CPU a batch).
    Collected first, so that no garbage is frozen; once per process (a restart after an
    outage starts the query again in the same process)."""
    if not _FROZEN:
        _FROZEN.append(True)
        gc.collect()
        gc.freeze()


# Spark settings the streaming job needs regardless of the configuration file.
STREAMING_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.metricsEnabled": "true",
    # Losing an executor (benchmarks/RESULTS.md, "executor loss"): state tasks prefer the
    # executor that last held their state and would wait spark.locality.wait (3 s) for a dead
    # one; the driver would wait 5 s after the disconnect before removing it; a fetch from it
    # would be retried 3 × 5 s. Measured gap after a kill: 11.6 s by default, 6.5 s with these.
    "spark.locality.wait": "0s",
    "spark.standalone.executorRemoveDelayOnDisconnection": "0s",
    "spark.shuffle.io.maxRetries": "1",
    "spark.shuffle.io.retryWait": "1s",
    "spark.scheduler.revive.interval": "200ms",
    # The state a surviving executor reloads is the last snapshot plus the changelogs since:
    # snapshots every 5 versions, uploaded by maintenance every 15 s, keep that replay short
    # (gap after a kill 6.6 s → 5.5 s).
    "spark.sql.streaming.stateStore.minDeltasForSnapshot": "5",
    "spark.sql.streaming.stateStore.maintenanceInterval": "15s",
    # The state function carries the job's rules (l2m.engine.pipeline.RuleTable). Past this
    # size pyspark ships a pickled function as a broadcast variable, which
    # transformWithStateInPandas' driver-side runner cannot load: with 100,000 rules the
    # query failed to start (BROADCAST_VARIABLE_NOT_LOADED). Sent inline instead, to the few
    # state tasks of a batch.
    "spark.broadcast.UDFCompressionThreshold": str(1 << 30),
}
# Checkpoints on a local disk (a laptop, CI, a Kubernetes volume). Spark's default writer of
# checkpoint files goes through Hadoop's FileContext, whose rename asks for the link status
# of both paths; without Hadoop's native library (pip's pyspark has none) each ask forks a
# `readlink` process from the JVM. Every micro-batch renames its offset and commit log
# entries and each state partition's changelog: 40-45 ms for each log entry, ~0.1 s per
# batch of a 2-core drain. The FileSystem-based writer renames with java.io (atomic on a
# local disk, as before): offset log 42 -> 8 ms, commit log 45 -> 13 ms. Object stores keep
# Spark's default.
LOCAL_CHECKPOINT_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager",
}


def streaming_conf(checkpoint: str) -> dict[str, str]:
    """The Spark settings of a streaming job whose checkpoint is ``checkpoint``."""
    local = local_checkpoint(checkpoint) is not None
    return {**STREAMING_CONF, **(LOCAL_CHECKPOINT_CONF if local else {})}
