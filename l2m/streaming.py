"""The streaming job (SPEC §6): two queries in one Spark application, both reading the logs
topic through the l2m Kafka source.

counters: source(parse) → route → pre-aggregate (Arrow, per task, per rule/series/minute)
          → shuffle by (rule, shard) → applyInPandasWithState (cumulative state) → sink
gauges:   source(parse) → route → watermark → one-minute windows (Spark's partial
          aggregation before the shuffle, update mode) → format → sink

Counters and gauges are separate queries because applyInPandasWithState cannot share a query
with a streaming aggregation in update mode. Dead letters are written by the counters
query's source only, so each malformed log is sent once.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import Accumulator
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from l2m.aggregate import EXACT, partial_aggregates
from l2m.config import JobConfig
from l2m.route import STATUS_RULE, plan_for, route
from l2m.rules import Rule
from l2m.samples import Partial, cumulative_row_samples, family_samples, series_key, series_samples
from l2m.sink import KafkaSink, write_batch
from l2m.source import KafkaSource

# The input counter l2m keeps about itself: logs per parse status (ok, malformed, …).
INPUT_RULE = Rule(id="l2m-input", name="l2m_input_logs_total", kind="counter", query="*",
                  aggregation="count", file="<l2m>")

OUTPUT_SCHEMA = "key string, value string"
PARTIAL_SCHEMA = ("rule string, series string, le string, window bigint, matches bigint, "
                  "n bigint, sum double, exact_sum decimal(38,18), exact_n bigint, min double, "
                  "max double, ts bigint")
# One opaque blob per (rule, shard): the state schema never depends on the rules.
STATE_SCHEMA = "blob binary"


def stop_file(cfg: JobConfig) -> str:
    """While this file exists the sources admit no new data (graceful stop)."""
    return f"{cfg.checkpoint}/STOPPING"


def register(spark: SparkSession) -> None:
    spark.dataSource.register(KafkaSource)
    spark.dataSource.register(KafkaSink)


def source_frame(spark: SparkSession, cfg: JobConfig, plan_json: str,
                 dead_letters: bool, name: str = "") -> DataFrame:
    src = cfg.source
    reader = (spark.readStream.format("l2m-kafka")
              .option("topic", cfg.topics.logs)
              .option("parsePlan", plan_json)
              .option("startingOffsets", src.starting_offsets)
              .option("failOnDataLoss", str(src.fail_on_data_loss).lower())
              .option("pollTimeoutMs", str(src.poll_timeout_ms))
              .option("planner", src.planner)
              .option("minPartitions",
                      str(src.min_partitions or spark.sparkContext.defaultParallelism)))
    for key, value in cfg.kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    for option, value in (("maxRecordsPerTrigger", src.max_records_per_trigger),
                          ("maxRecordsPerTask", src.max_records_per_task)):
        if value:
            reader = reader.option(option, str(value))
    reader = reader.option("stopFile", stop_file(cfg))
    if src.plan_log:
        reader = reader.option("planLog", f"{src.plan_log}.{name}" if name else src.plan_log)
    if dead_letters:
        reader = reader.option("deadLetterTopic", cfg.topics.dead_letters)
        if src.group_id:
            reader = reader.option("groupId", src.group_id)
    return reader.load()


# --- counters ------------------------------------------------------------------------------


def preaggregate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Per task: match rows → one partial per (rule, series, le, minute), vectorised in Arrow.
    Exact sums run in 76-digit decimals and fall back (null) past what decimal(38,18) holds,
    like Spark's ``try_sum``."""
    collected = list(batches)
    if not collected or not sum(b.num_rows for b in collected):
        return
    table = pa.Table.from_batches(collected)
    table = table.set_column(table.schema.get_field_index("x"), "x",
                             pc.cast(table.column("x"), pa.decimal256(76, 18)))
    grouped = table.group_by(["rule", "series", "le", "window"], use_threads=False).aggregate([
        ([], "count_all"), ("v", "count"), ("v", "sum"), ("x", "sum"), ("x", "count"),
        ("v", "min"), ("v", "max"), ("ts", "max"),
    ])
    exact = grouped.column("x_sum")
    fits = pc.less(pc.abs(exact), pa.scalar(decimal.Decimal(10) ** 20, pa.decimal256(76, 18)))
    exact = pc.if_else(fits, exact, pa.nulls(len(exact), pa.decimal256(76, 18)))
    out = pa.table({
        "rule": grouped.column("rule"), "series": grouped.column("series"),
        "le": grouped.column("le"), "window": grouped.column("window"),
        "matches": grouped.column("count_all"), "n": grouped.column("v_count"),
        "sum": grouped.column("v_sum"), "exact_sum": pc.cast(exact, pa.decimal128(38, 18)),
        "exact_n": grouped.column("x_count"), "min": grouped.column("v_min"),
        "max": grouped.column("v_max"), "ts": grouped.column("ts_max"),
    })
    yield from out.to_batches(max_chunksize=10_000)


def counted(function: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
            rows_in: Accumulator[int], rows_out: Accumulator[int]
            ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``function`` with its input and output rows counted into Spark accumulators (how the
    pre-aggregation's reduction ratio is reported)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def source() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                rows_in.add(batch.num_rows)
                yield batch

        for out in function(source()):
            rows_out.add(out.num_rows)
            yield out

    return run


def _signature(rule: Rule) -> list[Any]:
    """What makes accumulated totals meaningful: when it changes, a series restarts at 0."""
    return [rule.aggregation, rule.field, list(rule.bucket_labels), list(rule.group_by)]


@dataclass
class CounterState:
    """The applyInPandasWithState function for counters, keyed by (rule, shard).

    State: one blob per key — orjson of ``{"sig": signature, "series": {series: [last_seen_ms,
    {le: [matches, n, sum, exact|None, ts]}]}}`` — so many series are updated per Python call
    and the state schema does not depend on the rules. Series idle for longer than the TTL
    are dropped (a later log restarts them at 0, a counter reset for PromQL)."""

    rules: dict[str, Rule]
    ttl_ms: int

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        rule_id = key[0]
        rule = INPUT_RULE if rule_id == STATUS_RULE else self.rules.get(rule_id)
        now = state.getCurrentProcessingTimeMs()
        stored = orjson.loads(state.get[0]) if state.exists else {}
        series: dict[str, list[Any]] = stored.get("series", {})
        if rule is not None and stored.get("sig") not in (None, _signature(rule)):
            series = {}
        touched: set[str] = set()
        if not state.hasTimedOut:
            for frame in frames:
                self._merge(frame, series, touched, now)
        cutoff = now - self.ttl_ms
        series = {s: v for s, v in series.items() if v[0] >= cutoff}
        if not series:
            state.remove()
        else:
            sig = _signature(rule) if rule is not None else stored.get("sig")
            state.update((orjson.dumps({"sig": sig, "series": series}),))
            state.setTimeoutDuration(self.ttl_ms)
        if rule is None or not touched:
            return
        keys: list[str] = []
        values: list[str] = []
        for name in sorted(touched):
            labels = list(orjson.loads(name).items())
            parts = {le: _partial(v) for le, v in series[name][1].items()}
            if rule.aggregation == "histogram":
                produced = family_samples(rule, labels, None, parts)
            else:
                agg = next(iter(parts.values()))
                produced = series_samples(rule, labels, agg.ts or 0, agg)
            for s in produced:
                keys.append(series_key(s).decode())
                values.append(orjson.dumps(s).decode())
        yield pd.DataFrame({"key": keys, "value": values})

    @staticmethod
    def _merge(frame: pd.DataFrame, series: dict[str, list[Any]], touched: set[str],
               now: int) -> None:
        columns = [frame[c].tolist() for c in
                   ("series", "le", "matches", "n", "sum", "exact_sum", "exact_n", "ts")]
        for name, le, matches, n, total, exact, exact_n, ts in zip(*columns, strict=True):
            entry = series.setdefault(name, [now, {}])
            entry[0] = now
            bucket = "" if le is None else le
            part = Partial(int(matches), int(n), float(total) if total == total else 0.0,
                           exact if exact is not None and exact_n == n else None,
                           None, None, None if ts is None or ts != ts else int(ts))
            old = entry[1].get(bucket)
            merged = part if old is None else _partial(old).merge(part)
            entry[1][bucket] = [merged.matches, merged.n, merged.sum,
                                None if merged.exact is None else str(merged.exact), merged.ts]
            touched.add(name)


def _partial(stored: list[Any]) -> Partial:
    matches, n, total, exact, ts = stored
    return Partial(matches, n, total, None if exact is None else decimal.Decimal(exact),
                   None, None, ts)


@dataclass
class Reduction:
    """Rows into and out of the counters' pre-aggregation, summed over the query's life."""

    rows_in: Accumulator[int]
    rows_out: Accumulator[int]


def counters_frame(spark: SparkSession, cfg: JobConfig, rules: Sequence[Rule],
                   reduction: Reduction | None = None) -> DataFrame:
    """The counters query's output: ``key, value`` samples for every updated series."""
    routing = plan_for([r for r in rules if r.kind == "counter"], cfg.timestamp_field)
    parsed = source_frame(spark, cfg, routing.plan.to_json(), dead_letters=True,
                          name="counters")
    routed = route(parsed, routing, with_status=True, minute_for_counters=True).select(
        "rule", F.to_json(F.map_from_entries("labels")).alias("series"), "le", "window", "ts", "v",
        F.col("v").try_cast(EXACT).alias("x"),
    )
    function = preaggregate
    if reduction is not None:
        function = counted(preaggregate, reduction.rows_in, reduction.rows_out)
    partials = routed.mapInArrow(function, PARTIAL_SCHEMA)
    sharded = partials.withColumn(
        "shard", F.pmod(F.hash("rule", "series"), F.lit(cfg.counter_shards)))
    state = CounterState({r.id: r for r in routing.rules}, cfg.counter_ttl_ms)
    return sharded.groupBy("rule", "shard").applyInPandasWithState(
        state, OUTPUT_SCHEMA, STATE_SCHEMA, "update", GroupStateTimeout.ProcessingTimeTimeout)


# --- gauges --------------------------------------------------------------------------------


def format_gauges(rules: dict[str, Rule]) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys: list[str] = []
            values: list[str] = []
            for row in batch.to_pylist():
                rule = rules.get(row["rule"])
                if rule is None:
                    continue
                labels = [(e["name"], e["value"]) for e in row["labels"]]
                for s in cumulative_row_samples(rule, labels, row["le"], row["window"],
                                                Partial.from_row(row)):
                    keys.append(series_key(s).decode())
                    values.append(orjson.dumps(s).decode())
            yield pa.RecordBatch.from_pydict({"key": keys, "value": values},
                                             schema=pa.schema([("key", pa.string()),
                                                               ("value", pa.string())]))

    return run


def gauges_frame(spark: SparkSession, cfg: JobConfig, rules: Sequence[Rule]) -> DataFrame:
    """The gauges query's output: ``key, value`` samples for every updated window."""
    routing = plan_for([r for r in rules if r.kind == "gauge"], cfg.timestamp_field)
    parsed = source_frame(spark, cfg, routing.plan.to_json(), dead_letters=False,
                          name="gauges")
    routed = (route(parsed, routing, with_status=False, cumulative=True)
              .withColumn("event_time", F.timestamp_millis("et"))
              .withWatermark("event_time", f"{cfg.grace_ms} milliseconds"))
    windows = (routed.groupBy(F.window("event_time", "1 minute").alias("w"), "rule", "labels",
                              "le")
               .agg(*partial_aggregates())
               .withColumn("window", F.unix_millis(F.col("w.start"))).drop("w"))
    return windows.mapInArrow(format_gauges({r.id: r for r in routing.rules}), OUTPUT_SCHEMA)


# --- the job -------------------------------------------------------------------------------


@dataclass
class Job:
    counters: StreamingQuery
    gauges: StreamingQuery
    reduction: Reduction | None = None

    @property
    def queries(self) -> list[StreamingQuery]:
        return [self.counters, self.gauges]


def start_job(spark: SparkSession, cfg: JobConfig, rules: Sequence[Rule],
              once: bool = False) -> Job:
    """Start both queries; ``once`` processes what is available now and stops."""
    register(spark)

    def sink(frame: DataFrame, batch_id: int) -> None:
        write_batch(frame, cfg.topics.metrics, cfg.sink)

    def start(name: str, frame: DataFrame) -> StreamingQuery:
        writer = (frame.writeStream.queryName(f"l2m-{name}").outputMode("update")
                  .foreachBatch(sink)
                  .option("checkpointLocation", f"{cfg.checkpoint}/{name}"))
        if once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
        return writer.start()

    # Processing-time timeouts make Spark run a batch after every batch, data or not, to
    # look for timed-out keys: availableNow would never end. Counters take their timeouts
    # with the next batch that has data; the setting is captured when a query starts.
    reduction = Reduction(spark.sparkContext.accumulator(0), spark.sparkContext.accumulator(0))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    counters = start("counters", counters_frame(spark, cfg, rules, reduction))
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    gauges = start("gauges", gauges_frame(spark, cfg, rules))
    return Job(counters=counters, gauges=gauges, reduction=reduction)


# Spark settings the streaming job needs regardless of the configuration file.
STREAMING_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.metricsEnabled": "true",
}
