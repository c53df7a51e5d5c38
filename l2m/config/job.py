"""The job configuration as typed records: everything ``l2m run`` needs.

Input: none (plain values; :mod:`l2m.config.loader` builds them from a YAML file). Output:
:class:`JobConfig` and its sections, read by the streaming job, the runtime and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from l2m.query.nodes import QueryConfig


@dataclass(frozen=True)
class Topics:
    logs: str = "logs"
    metrics: str = "metrics"
    dead_letters: str = "logs-dead-letters"


@dataclass(frozen=True)
class SourceConfig:
    starting_offsets: str = "earliest"
    max_records_per_trigger: int | None = None
    max_records_per_task: int | None = 100_000
    min_partitions: int | None = None  # default: Spark's default parallelism
    planner: str = "balanced"  # or "partition": one task per partition range
    plan_log: str | None = None  # benchmarks: a file each batch's task sizes are appended to
    fail_on_data_loss: bool = True
    group_id: str | None = None
    poll_timeout_ms: int = 120_000


@dataclass(frozen=True)
class MonitoringConfig:
    """Where the driver serves ``/metrics``, ``/healthz`` and ``/readyz`` (docs/metrics.md);
    port 0: a free one (the endpoint reports it); no port: not served."""

    port: int | None = None
    host: str = "0.0.0.0"


@dataclass(frozen=True)
class JobConfig:
    """Everything ``l2m run`` needs. See ``topology/production.yaml`` for each key."""

    kafka: dict[str, str] = field(default_factory=lambda: {"bootstrap.servers": "127.0.0.1:9092"})
    # Overrides of `kafka` for the metrics (sink) side, e.g. another cluster.
    sink_kafka: dict[str, str] = field(default_factory=dict)
    topics: Topics = Topics()
    rules: tuple[str, ...] = ("rules",)
    checkpoint: str = "checkpoints/l2m"
    trigger_ms: int = 5_000
    grace_ms: int = 20 * 60_000
    # Event times further ahead of their record's Kafka time are counted as `future` and
    # dead-lettered instead of moving the watermark.
    max_future_ms: int = 5 * 60_000
    counter_ttl_ms: int = 7 * 86_400_000
    counter_shards: int = 8
    text_fields: tuple[str, ...] = ("message",)
    default_fields: tuple[str, ...] = ("message",)
    timestamp_field: str = "@timestamp"
    source: SourceConfig = SourceConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    master: str = "local[*]"
    spark: dict[str, str] = field(default_factory=dict)
    path: str | None = None

    @property
    def query_config(self) -> QueryConfig:
        return QueryConfig(text_fields=self.text_fields, default_fields=self.default_fields)

    @property
    def sink(self) -> dict[str, str]:
        return {**self.kafka, **self.sink_kafka}

    def with_bootstrap(self, bootstrap: str) -> JobConfig:
        return replace(self, kafka={**self.kafka, "bootstrap.servers": bootstrap})
