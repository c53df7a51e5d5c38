"""The driver's metrics about the job itself (docs/metrics.md), in a ``prometheus_client``
registry that :mod:`l2m.runtime.endpoint` serves.

Input, after each micro-batch: Spark's query progress (rates, durations, offsets, watermark,
state; read by :mod:`l2m.runtime.progress`), the job's accumulators
(:class:`l2m.streaming.job.Counts`: pre-aggregation rows, matches per rule, what each state
key last reported) and Spark's status store (the tasks each executor ran in the batch, and
the records they read: :mod:`l2m.runtime.sparkstatus`). Output: ``l2m_*`` metrics. Counters
that come from the state (``l2m_input_logs_total``, ``l2m_late_logs_total``,
``l2m_dead_letters_total``, ``l2m_label_values_cut_total``) are exact and continue across
restarts; the others count since the driver started."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from l2m.config.job import JobConfig
from l2m.engine.status import DEAD_LETTERED, STATUS_NAMES
from l2m.rules.model import Rule
from l2m.runtime.progress import epoch_seconds, input_rates, input_records, partition_offsets
from l2m.runtime.reload import ReloadStatus
from l2m.runtime.sparkstatus import ExecutorLoad
from l2m.state.accounts import STATS_HELP, AccountBook, AccountStats, account_totals
from l2m.state.tally import (
    CutCount,
    InputCount,
    LateCount,
    MatchCount,
    RefusedCount,
    SeriesCount,
    task_sums,
)
from l2m.version import __version__

BATCH_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
DEAD_LETTER_REASONS = tuple(STATUS_NAMES[c] for c in DEAD_LETTERED)
# A watch loop that has not ticked for this long is stuck: /healthz says so.
STALL_S = 60.0


class RunObserver:
    """What the runner (:class:`l2m.runtime.runner.Runner`) tells about the job it runs: a
    query started, a tick of its watch loop, a completed micro-batch, a failure, a restart,
    a stop. This base ignores all of it — a runner without metrics (``--once`` tests, the
    demo, the benchmarks) is given one —, :class:`Telemetry` turns it into metrics."""

    # Whether :meth:`batch` wants each executor's work in the batch, which the runner reads
    # from Spark's status store (not free): only when something is done with it.
    per_executor: bool = False

    def started(self, counts: Any) -> None:
        """A (new) query is running; ``counts`` are its accumulators
        (:class:`l2m.streaming.job.Counts` or None)."""

    def tick(self) -> None:
        """The watch loop is alive."""

    def batch(self, progress: dict[str, Any],
              executors: dict[str, ExecutorLoad] | None = None,
              registered: int | None = None) -> None:
        """A completed micro-batch: its progress, and (with :attr:`per_executor`) what each
        executor did in it and how many executors are registered."""

    def failed_batch(self, code: str) -> None:
        """A query failed with this error code."""

    def restarted(self, code: str) -> None:
        """The query was started again after a retriable failure with this code."""

    def failed_job(self) -> None:
        """The job failed for good: the runner exits."""

    def stopping(self) -> None:
        """The query is stopping or being restarted."""


class Telemetry(RunObserver):
    """The job's metrics. :meth:`batch` after each completed micro-batch; the runner marks
    start, restarts, failures and each tick of its watch loop; ``/healthz`` and ``/readyz``
    read :meth:`healthy` and :attr:`ready`. Thread-safe: the HTTP server collects from its
    own threads. ``reload``: what live rules last did (:mod:`l2m.runtime.reload`), shown
    as the ``l2m_rules_*`` metrics; None: rules not watched."""

    per_executor = True

    def __init__(self, cfg: JobConfig, rules: Sequence[Rule],
                 registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = time.time,
                 reload: ReloadStatus | None = None) -> None:
        self.cfg = cfg
        self.rules = [r.id for r in rules]
        self.accounts = {r.id: r.account for r in rules}
        self.registry = registry or CollectorRegistry()
        self.clock = clock
        self.ready = False
        self.failed = False
        self._beat = time.monotonic()
        self._lock = threading.Lock()
        # Accumulators restart with each query; these hold what earlier queries counted.
        self._counts: Any = None
        self._base = {"in": 0.0, "out": 0.0}
        # Per rule, what tasks summed (l2m.state.tally.task_sums): the earlier queries', the
        # current one's.
        self._sums_base: dict[Any, float] = {}
        self._sums: dict[Any, float] = {}
        self._book = AccountBook(cfg.monitoring.top_accounts)
        # The state keys' last reports: the earlier queries' (without their gauge windows,
        # which the current query reports again while they are open), the current one's. The
        # driver drops closed windows from the query's own (tally.Latest).
        self._latest_base: dict[Any, float] = {}
        self._latest: dict[Any, float] = {}
        r = self.registry

        def gauge(name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
            return Counter(name, doc, labels, registry=r)

        self.batches = counter("l2m_batches", "Micro-batches completed.")
        self.duration = Histogram("l2m_batch_duration_seconds",
                                  "Duration of each micro-batch (Spark's triggerExecution).",
                                  buckets=BATCH_BUCKETS, registry=r)
        self.last_duration = gauge("l2m_last_batch_duration_seconds",
                                   "Duration of the last micro-batch.")
        self.last_time = gauge("l2m_last_batch_timestamp_seconds",
                               "Unix time the last micro-batch completed.")
        self.last_id = gauge("l2m_last_batch_id", "Id of the last micro-batch.")
        self.batch_records = gauge("l2m_batch_input_records", "Records the last batch read.")
        self.records = counter("l2m_input_records", "Records read from the logs topic.")
        self.input_rate = gauge("l2m_input_records_per_second",
                                "Spark's input rate of the last micro-batch.")
        self.processed_rate = gauge("l2m_processed_records_per_second",
                                    "Spark's processing rate of the last micro-batch.")
        gauge("l2m_trigger_interval_seconds", "The configured trigger interval.").set(
            cfg.trigger_ms / 1000)
        self.committed = gauge("l2m_source_committed_offset",
                               "Next offset to read after the last batch.", ("topic", "partition"))
        self.latest = gauge("l2m_source_latest_offset",
                            "End of the partition when the last batch was planned.",
                            ("topic", "partition"))
        self.lag = gauge("l2m_source_lag_records", "Records behind the end after the last batch.",
                         ("topic", "partition"))
        self.executors = gauge("l2m_executors", "Executors registered with the driver.")
        gauge("l2m_executors_expected",
              "spark.executor.instances (or dynamic allocation's minimum); 0 in local mode."
              ).set(expected_executors(cfg))
        self.executor_tasks = gauge("l2m_executor_batch_tasks",
                                    "Tasks the executor ran in the last batch.", ("executor",))
        self.executor_records = gauge("l2m_executor_batch_records",
                                      "Records the executor's tasks read in the last batch.",
                                      ("executor",))
        self.tasks_max = gauge("l2m_batch_executor_tasks_max",
                               "Most tasks one executor ran in the last batch.")
        self.tasks_mean = gauge("l2m_batch_executor_tasks_mean",
                                "Mean tasks per executor in the last batch.")
        self.records_max = gauge("l2m_batch_executor_records_max",
                                 "Most records one executor read in the last batch.")
        self.records_mean = gauge("l2m_batch_executor_records_mean",
                                  "Mean records per executor in the last batch.")
        self.watermark = gauge("l2m_watermark_timestamp_seconds",
                               "The gauge windows' watermark.")
        self.event_max = gauge("l2m_event_time_max_timestamp_seconds",
                               "Largest event time seen by the last batch.")
        self.event_delay = gauge("l2m_event_time_delay_seconds",
                                 "Now minus the largest event time of the last batch with data.")
        self.sink_failures = counter("l2m_sink_failures",
                                     "Batches that failed because the metrics topic could not "
                                     "take them.")
        self.restarts = counter("l2m_query_restarts",
                                "Query restarts after a retriable failure.", ("code",))
        self.active = gauge("l2m_query_active", "1 while the query runs.")
        self.state_rows = gauge("l2m_state_rows", "Rows in the state store after the last batch.")
        self.state_bytes = gauge("l2m_state_memory_bytes",
                                 "State store memory after the last batch.")
        self.rule_count = gauge("l2m_rules", "Rules the job runs.")
        self.rule_count.set(len(self.rules))
        # Live rules (l2m.runtime.reload): what the watcher last did; None: not watched.
        self.reload = reload
        gauge("l2m_build_info", "l2m's version.", ("version",)).labels(__version__).set(1)
        self._seen_executors: set[str] = set()
        self._seen_partitions: set[str] = set()
        r.register(_FromTasks(self))
        r.register(_Rules(self))

    def rules_changed(self, rules: Sequence[Rule]) -> None:
        """A new rule set is live: the per-rule metrics follow it."""
        enabled = [r for r in rules if r.enabled]
        with self._lock:
            self.rules = [r.id for r in enabled]
            # A removed rule's lifetime counts stay its account's: per-account counters
            # never go backwards.
            self.accounts = {**self.accounts, **{r.id: r.account for r in enabled}}
        self.rule_count.set(len(enabled))

    # -- the runner's life cycle ------------------------------------------------------------

    def started(self, counts: Any) -> None:
        """A (new) query is running; ``counts`` are its accumulators
        (:class:`l2m.streaming.job.Counts` or None)."""
        with self._lock:
            self._fold()
            self._counts = counts
        self.ready = True
        self.active.set(1)

    def stopping(self) -> None:
        """The query is stopping or being restarted: not ready."""
        self.ready = False
        self.active.set(0)

    def restarted(self, code: str) -> None:
        self.restarts.labels(code).inc()

    def failed_batch(self, code: str) -> None:
        """A query failed with this error code; SINK failures are the sink's."""
        if code == "SINK":
            self.sink_failures.inc()

    def failed_job(self) -> None:
        self.failed = True
        self.stopping()

    def tick(self) -> None:
        """The watch loop is alive."""
        self._beat = time.monotonic()

    def healthy(self) -> bool:
        return not self.failed and time.monotonic() - self._beat < STALL_S

    # -- after each micro-batch -------------------------------------------------------------

    def batch(self, progress: dict[str, Any],
              executors: dict[str, ExecutorLoad] | None = None,
              registered: int | None = None) -> None:
        """Record a completed micro-batch: its progress, and (when known) what each executor
        did in it and how many executors are registered."""
        seconds = float((progress.get("durationMs") or {}).get("triggerExecution", 0)) / 1000
        rows = input_records(progress)
        self.batches.inc()
        self.duration.observe(seconds)
        self.last_duration.set(seconds)
        started = epoch_seconds(progress.get("timestamp"))
        self.last_time.set(started + seconds if started is not None else self.clock())
        self.last_id.set(int(progress.get("batchId", -1)))
        self.batch_records.set(rows)
        self.records.inc(rows)
        arriving, processed = input_rates(progress)
        self.input_rate.set(arriving)
        self.processed_rate.set(processed)
        self._offsets(progress)
        self._event_time(progress, rows)
        state = progress.get("stateOperators") or []
        self.state_rows.set(sum(int(s.get("numRowsTotal") or 0) for s in state))
        self.state_bytes.set(sum(int(s.get("memoryUsedBytes") or 0) for s in state))
        if executors is not None:
            self._executors(executors)
        if registered is not None:
            self.executors.set(registered)
        with self._lock:
            self._absorb()

    def _offsets(self, progress: dict[str, Any]) -> None:
        topic = self.cfg.topics.logs
        for source in progress.get("sources") or []:
            end = partition_offsets(source.get("endOffset")) or {}
            latest = partition_offsets(source.get("latestOffset"))
            for partition, offset in end.items():
                self.committed.labels(topic, str(partition)).set(int(offset))
                self._seen_partitions.add(str(partition))
            if latest is None:  # a replayed batch is not planned: no latest, lag unknown
                continue
            for partition, offset in latest.items():
                self.latest.labels(topic, str(partition)).set(int(offset))
                behind = max(0, int(offset) - int(end.get(partition, 0)))
                self.lag.labels(topic, str(partition)).set(behind)

    def _event_time(self, progress: dict[str, Any], rows: int) -> None:
        event = progress.get("eventTime") or {}
        watermark = epoch_seconds(event.get("watermark"))
        if watermark is not None and watermark > 0:
            self.watermark.set(watermark)
        newest = epoch_seconds(event.get("max"))
        # A log the rules do not see (blank, malformed, future) carries event time 0 to the
        # watermark: a batch of only those reports the epoch as its newest, not a time.
        if newest is not None and newest > 0 and rows:
            self.event_max.set(newest)
            self.event_delay.set(max(0.0, self.clock() - newest))

    def _executors(self, loads: dict[str, ExecutorLoad]) -> None:
        # An executor that ran nothing in this batch shows 0, not its last busy batch.
        for gone in self._seen_executors - set(loads):
            self.executor_tasks.labels(gone).set(0)
            self.executor_records.labels(gone).set(0)
        self._seen_executors |= set(loads)
        for executor, load in loads.items():
            self.executor_tasks.labels(executor).set(load.tasks)
            self.executor_records.labels(executor).set(load.records)
        tasks = [load.tasks for load in loads.values()] or [0]
        records = [load.records for load in loads.values()] or [0]
        self.tasks_max.set(max(tasks))
        self.tasks_mean.set(sum(tasks) / len(tasks))
        self.records_max.set(max(records))
        self.records_mean.set(sum(records) / len(records))

    # -- accumulators (under the lock) -------------------------------------------------------

    def _absorb(self) -> None:
        """Take the current query's accumulator values."""
        counts = self._counts
        if counts is None:
            return
        self._sums = task_sums(counts)
        if counts.tally is not None:
            self._latest = {**self._latest_base, **counts.tally.value}

    def _fold(self) -> None:
        """A query ends: what its accumulators counted becomes the base of the next one's."""
        counts = self._counts
        if counts is None:
            return
        self._absorb()
        self._latest_base = {k: n for k, n in self._latest.items()
                             if not (isinstance(k, SeriesCount) and k.windowed)}
        self._base["in"] += counts.reduction.rows_in.value
        self._base["out"] += counts.reduction.rows_out.value
        for key, n in self._sums.items():
            self._sums_base[key] = self._sums_base.get(key, 0) + n
        self._sums = {}

    def account_view(self, totals: dict[str, AccountStats]) -> dict[str, AccountStats]:
        """The per-tenant view at this scrape (sticky top accounts, monotonic __other__)."""
        with self._lock:
            return self._book.view(totals)

    def snapshot(self) -> tuple[dict[str, float], dict[Any, float], dict[Any, float]]:
        """(pre-aggregation rows in/out, what tasks summed per rule — matches, refusals,
        samples —, the state keys' last reports), over every query this driver ran."""
        with self._lock:
            counts = self._counts
            rows = dict(self._base)
            if counts is not None:
                rows["in"] += counts.reduction.rows_in.value
                rows["out"] += counts.reduction.rows_out.value
                self._sums = task_sums(counts)
            sums = dict(self._sums_base)
            for key, n in self._sums.items():
                sums[key] = sums.get(key, 0) + n
            return rows, sums, dict(self._latest)


class _FromTasks:
    """Metrics computed at scrape time from what the tasks reported (accumulators)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.t = telemetry

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        rows, sums, latest = self.t.snapshot()
        matches = {key.rule: n for key, n in sums.items() if isinstance(key, MatchCount)}
        yield _counter("l2m_preaggregate_rows_in",
                       "Match rows into the in-task pre-aggregation.", rows["in"])
        yield _counter("l2m_preaggregate_rows_out",
                       "Partial rows out of the pre-aggregation.", rows["out"])
        statuses = {name: 0.0 for name in dict.fromkeys(STATUS_NAMES)}
        for key, n in latest.items():
            if isinstance(key, InputCount):
                statuses[key.status] = n
        family = CounterMetricFamily("l2m_input_logs", "Logs read, by input status (exact: "
                                     "from the job's state).", labels=["status"])
        for status, n in statuses.items():
            family.add_metric([status], n)
        yield family
        yield _counter("l2m_late_logs", "Logs that came after their gauge window closed "
                       "(exact: from the job's state).", latest.get(LateCount(), 0.0))
        family = CounterMetricFamily("l2m_dead_letters", "Records sent to the dead-letter "
                                     "topic, by reason (exact: from the job's state).",
                                     labels=["reason"])
        for reason in DEAD_LETTER_REASONS:
            family.add_metric([reason], statuses.get(reason, 0.0))
        yield family
        family = CounterMetricFamily("l2m_label_values_cut", "Label values from logs cut to "
                                     "limits.max_label_value_length, per rule (exact: from the "
                                     "job's state).", labels=["rule"])
        for rule in self.t.rules:
            family.add_metric([rule], latest.get(CutCount(rule), 0.0))
        yield family
        family = CounterMetricFamily("l2m_rule_matches", "Logs each rule matched.",
                                     labels=["rule"])
        for rule in self.t.rules:
            family.add_metric([rule], matches.get(rule, 0.0))
        yield family
        series = dict.fromkeys(self.t.rules, 0.0)
        for key, n in latest.items():
            if isinstance(key, SeriesCount) and key.rule in series:
                series[key.rule] += n
        gauge = GaugeMetricFamily("l2m_rule_series", "Live series (counters) or open windows' "
                                  "series (gauges) in the state.", labels=["rule"])
        for rule, n in series.items():
            gauge.add_metric([rule], n)
        yield gauge
        family = CounterMetricFamily("l2m_series_refused", "Logs counted into a rule's overflow "
                                     "series because they would have opened a series past a "
                                     "cap (limit: rule, metric or account).",
                                     labels=["rule", "account", "limit"])
        for key, n in sorted(sums.items(), key=lambda kv: str(kv[0])):
            if isinstance(key, RefusedCount):
                family.add_metric([key.rule, key.account, key.limit], n)
        yield family
        view = self.t.account_view(account_totals(self.t.accounts, latest, sums))
        for field_name, (name, kind, text) in STATS_HELP.items():
            if kind == "gauge":
                stats: GaugeMetricFamily | CounterMetricFamily = GaugeMetricFamily(
                    name, text, labels=["account"])
            else:
                stats = CounterMetricFamily(name.removesuffix("_total"), text,
                                            labels=["account"])
            for account, values in view.items():
                stats.add_metric([account], getattr(values, field_name))
            yield stats


class _Rules:
    """The live rule set's version and the reloads (docs/metrics.md, "Live rules")."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.t = telemetry

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        status = self.t.reload
        if status is None:
            return
        info = GaugeMetricFamily("l2m_rules_version_info", "The rule set new micro-batches use "
                                 "(its version: a digest of the rules).", labels=["version"])
        info.add_metric([status.version], 1)
        yield info
        yield GaugeMetricFamily("l2m_rules_loaded_timestamp_seconds",
                                "When the rule set in use was loaded.", value=status.loaded_at)
        reloads = CounterMetricFamily("l2m_rules_reloads", "Rule set reloads, by result "
                                      "(failure: the changed set did not validate and was "
                                      "refused whole).", labels=["result"])
        reloads.add_metric(["success"], status.successes)
        reloads.add_metric(["failure"], status.failures)
        yield reloads
        yield GaugeMetricFamily("l2m_rules_last_reload_successful",
                                "0 while the newest rule files are refused (the job runs its "
                                "last good set).", value=1 if status.last_ok else 0)
        yield GaugeMetricFamily("l2m_rules_last_reload_timestamp_seconds",
                                "When a reload was last tried (0: never).",
                                value=status.last_at)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def expected_executors(cfg: JobConfig) -> int:
    """The executors the configuration asks for: 0 in local mode."""
    if not cfg.master.startswith(("k8s://", "spark://", "yarn", "local-cluster")):
        return 0
    spark = cfg.spark
    if spark.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        return int(spark.get("spark.dynamicAllocation.minExecutors", "0"))
    if cfg.master.startswith("local-cluster"):
        return int(cfg.master.split("[")[1].split(",")[0])
    return int(spark.get("spark.executor.instances", "2"))
