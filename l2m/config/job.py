"""The job configuration as typed records: everything ``l2m run`` needs.

Input: none (plain values; :mod:`l2m.config.loader` builds them from a YAML file). Output:
:class:`JobConfig` and its sections, read by the streaming job, the runtime and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from l2m import defaults
from l2m.query.nodes import QueryConfig


@dataclass(frozen=True)
class Topics:
    logs: str = defaults.LOGS_TOPIC
    metrics: str = defaults.METRICS_TOPIC
    dead_letters: str = defaults.DEAD_LETTERS_TOPIC


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

    kafka: dict[str, str] = field(
        default_factory=lambda: {"bootstrap.servers": defaults.BOOTSTRAP_SERVERS})
    # Overrides of `kafka` for the metrics (sink) side, e.g. another cluster.
    sink_kafka: dict[str, str] = field(default_factory=dict)
    topics: Topics = Topics()
    rules: tuple[str, ...] = (defaults.RULES_PATH,)
    checkpoint: str = defaults.CHECKPOINT
    trigger_ms: int = defaults.TRIGGER_MS
    grace_ms: int = defaults.GRACE_MS
    # Event times further ahead of their record's Kafka time are counted as `future` and
    # dead-lettered instead of moving the watermark.
    max_future_ms: int = defaults.MAX_FUTURE_MS
    counter_ttl_ms: int = defaults.COUNTER_TTL_MS
    counter_shards: int = defaults.COUNTER_SHARDS
    text_fields: tuple[str, ...] = defaults.TEXT_FIELDS
    default_fields: tuple[str, ...] = defaults.DEFAULT_FIELDS
    timestamp_field: str = defaults.TIMESTAMP_FIELD
    source: SourceConfig = SourceConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    master: str = defaults.MASTER
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
