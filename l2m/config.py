"""Job configuration files (``topology/*.yaml``) → a typed :class:`JobConfig`.

Relative paths (rules, checkpoint) are resolved against the configuration file's folder, so a
job runs the same from any working directory. Unknown keys are errors, as in rule files."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from l2m.errors import ConfigError
from l2m.query import QueryConfig

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?|"
                       r"d|days?)\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str | int | float, key: str = "duration") -> int:
    """``"20 minutes"``, ``"5s"``, ``"250 ms"``, ``"7 days"`` → milliseconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return int(text * 1000)
    match = _DURATION.fullmatch(str(text))
    if not match:
        raise ConfigError(f"{key}: '{text}' is not a duration (e.g. '5 seconds', '20 minutes')")
    unit = match.group(2)
    unit = "ms" if unit.startswith("milli") or unit == "ms" else unit[0]
    return int(float(match.group(1)) * _UNIT_MS[unit])


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


_TOP = {"kafka", "sink_kafka", "topics", "rules", "checkpoint", "trigger", "grace", "counter_ttl",
        "counter_shards", "max_future_skew", "text_fields", "default_fields", "timestamp_field",
        "source", "spark"}


def load_config(path: str | Path) -> JobConfig:
    """Read and check a job configuration file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return config_from_dict(_expand(data), path)


def _expand(value: Any) -> Any:
    """``${VAR}`` in string values from the environment (secrets stay out of the file)."""
    if isinstance(value, str):
        return os.path.expandvars(value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def config_from_dict(data: dict[str, Any], path: Path | None = None) -> JobConfig:
    where = f"{path}: " if path else ""
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ConfigError(f"{where}unknown key(s): {', '.join(unknown)}")
    base = path.resolve().parent if path else Path.cwd()

    def resolve(p: str) -> str:
        return str((base / p).resolve()) if not Path(p).is_absolute() else p

    def section(name: str, cls: type, renames: dict[str, str] | None = None) -> Any:
        raw = data.get(name) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}{name}: expected a mapping")
        allowed = {f for f in cls.__dataclass_fields__}
        bad = sorted(set(raw) - allowed)
        if bad:
            raise ConfigError(f"{where}{name}: unknown key(s): {', '.join(bad)} "
                              f"(allowed: {', '.join(sorted(allowed))})")
        return cls(**raw)

    rules = data.get("rules", ["rules"])
    if isinstance(rules, str):
        rules = [rules]
    spark = data.get("spark") or {}
    if not isinstance(spark, dict):
        raise ConfigError(f"{where}spark: expected a mapping")
    spark = dict(spark)
    master = str(spark.pop("master", "local[*]"))
    kafka = {str(k): str(v) for k, v in (data.get("kafka") or {}).items()}
    sink_kafka = {str(k): str(v) for k, v in (data.get("sink_kafka") or {}).items()}
    if "bootstrap.servers" not in kafka:
        raise ConfigError(f"{where}kafka: 'bootstrap.servers' is required")
    shards = int(data.get("counter_shards", 8))
    if shards < 1:
        raise ConfigError(f"{where}counter_shards: must be at least 1")
    return JobConfig(
        kafka=kafka,
        sink_kafka=sink_kafka,
        topics=section("topics", Topics),
        rules=tuple(resolve(r) for r in rules),
        checkpoint=resolve(str(data.get("checkpoint", "checkpoints/l2m"))),
        trigger_ms=duration_ms(data.get("trigger", "5 seconds"), "trigger"),
        grace_ms=duration_ms(data.get("grace", "20 minutes"), "grace"),
        max_future_ms=duration_ms(data.get("max_future_skew", "5 minutes"), "max_future_skew"),
        counter_ttl_ms=duration_ms(data.get("counter_ttl", "7 days"), "counter_ttl"),
        counter_shards=shards,
        text_fields=tuple(data.get("text_fields", ["message"])),
        default_fields=tuple(data.get("default_fields", ["message"])),
        timestamp_field=str(data.get("timestamp_field", "@timestamp")),
        source=section("source", SourceConfig),
        master=master,
        spark={str(k): str(v) for k, v in spark.items()},
        path=str(path) if path else None,
    )
