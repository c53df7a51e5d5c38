"""Job configuration files (``topology/*.yaml``) → a typed :class:`JobConfig`.

Relative paths (rules, checkpoint) are resolved against the configuration file's folder, so a
job runs the same from any working directory. Unknown keys are errors, as in rule files."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from l2m import yamlsafe
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
_SECRET_SECTIONS = ("kafka", "sink_kafka")  # client settings: values never printed


def load_config(path: str | Path) -> JobConfig:
    """Read and check a job configuration file. Every error names the file, the line and the
    key; none ever quotes the file's text or a Kafka client value (they hold secrets)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") \
            from None
    try:
        root = yamlsafe.compose(text)
    except yaml.YAMLError as exc:
        line, column, problem = yamlsafe.position(exc)
        raise ConfigError(f"{path}:{line}:{column}: invalid YAML: {problem}") from None
    for _code, mark, problem in yamlsafe.tag_problems(root):
        raise ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {problem}")
    loader = yamlsafe.SafeLoader("")
    try:
        data = loader.construct_document(root) if root is not None else {}
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return config_from_dict(_expand(data), path, _lines(root))


def _lines(root: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """1-based line of every key, by its path (``("source", "planner")``)."""
    lines: dict[tuple[str, ...], int] = {}
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())] if root is not None else []
    while stack:
        node, at = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    here = (*at, str(key.value))
                    lines[here] = key.start_mark.line + 1
                    stack.append((value, here))
    return lines


def _expand(value: Any) -> Any:
    """``${VAR}`` in string values from the environment (secrets stay out of the file)."""
    if isinstance(value, str):
        return os.path.expandvars(value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def config_from_dict(data: dict[str, Any], path: Path | None = None,
                     lines: dict[tuple[str, ...], int] | None = None) -> JobConfig:
    """A :class:`JobConfig` from parsed YAML, every value checked by type; errors name the
    key and, with ``lines``, its line."""
    check = _Checker(path, lines or {})
    unknown = sorted(set(map(str, data)) - _TOP)
    if unknown:
        raise check.error((), f"unknown key(s): {', '.join(unknown)} "
                              f"(allowed: {', '.join(sorted(_TOP))})")
    base = path.resolve().parent if path else Path.cwd()

    def resolve(p: str) -> str:
        return str((base / p).resolve()) if not Path(p).is_absolute() else p

    kafka = check.client_settings(data, "kafka")
    sink_kafka = check.client_settings(data, "sink_kafka")
    if "bootstrap.servers" not in kafka:
        raise check.error(("kafka",), "'bootstrap.servers' is required")
    spark = check.mapping(data, "spark")
    master = check.string(spark, ("spark", "master"), "local[*]")
    spark_conf = {str(k): check.scalar(v, ("spark", str(k)))
                  for k, v in spark.items() if k != "master"}
    topics = check.mapping(data, "topics")
    check.known(topics, ("topics",), Topics)
    source = check.mapping(data, "source")
    check.known(source, ("source",), SourceConfig)
    planner = check.string(source, ("source", "planner"), "balanced")
    if planner not in ("balanced", "partition"):
        raise check.error(("source", "planner"),
                          f"expected balanced or partition, got '{planner}'")
    return JobConfig(
        kafka=kafka,
        sink_kafka=sink_kafka,
        topics=Topics(**{f: check.string(topics, ("topics", f), getattr(Topics(), f))
                         for f in Topics.__dataclass_fields__}),
        rules=tuple(resolve(r) for r in check.strings(data, ("rules",), ["rules"])),
        checkpoint=resolve(check.string(data, ("checkpoint",), "checkpoints/l2m")),
        trigger_ms=check.duration(data, ("trigger",), "5 seconds"),
        grace_ms=check.duration(data, ("grace",), "20 minutes"),
        max_future_ms=check.duration(data, ("max_future_skew",), "5 minutes"),
        counter_ttl_ms=check.duration(data, ("counter_ttl",), "7 days"),
        counter_shards=check.integer(data, ("counter_shards",), 8, minimum=1),
        text_fields=tuple(check.strings(data, ("text_fields",), ["message"])),
        default_fields=tuple(check.strings(data, ("default_fields",), ["message"])),
        timestamp_field=check.string(data, ("timestamp_field",), "@timestamp"),
        source=SourceConfig(
            starting_offsets=_offsets_spec(check, source),
            max_records_per_trigger=check.optional_int(
                source, ("source", "max_records_per_trigger")),
            max_records_per_task=check.optional_int(
                source, ("source", "max_records_per_task"), SourceConfig.max_records_per_task),
            min_partitions=check.optional_int(source, ("source", "min_partitions")),
            planner=planner,
            plan_log=check.optional_string(source, ("source", "plan_log")),
            fail_on_data_loss=check.boolean(source, ("source", "fail_on_data_loss"), True),
            group_id=check.optional_string(source, ("source", "group_id")),
            poll_timeout_ms=check.integer(source, ("source", "poll_timeout_ms"),
                                          SourceConfig.poll_timeout_ms, minimum=1),
        ),
        master=master,
        spark=spark_conf,
        path=str(path) if path else None,
    )


def _offsets_spec(check: _Checker, source: dict[str, Any]) -> str:
    value = source.get("starting_offsets", "earliest")
    if isinstance(value, dict):  # {"0": 1234, "1": -2} written as YAML
        return json.dumps({str(k): v for k, v in value.items()})
    return check.string(source, ("source", "starting_offsets"), "earliest")


class _Checker:
    """Typed reads of configuration values; errors say ``file:line: key: problem``."""

    def __init__(self, path: Path | None, lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def error(self, key: tuple[str, ...], problem: str) -> ConfigError:
        where = str(self.path) if self.path else "config"
        line = self.lines.get(key) or (self.lines.get(key[:1]) if key else None)
        prefix = f"{where}:{line}" if line else where
        name = ".".join(key)
        return ConfigError(f"{prefix}: {name}: {problem}" if name else f"{prefix}: {problem}")

    def _got(self, key: tuple[str, ...], value: Any) -> str:
        if (key and key[0] in _SECRET_SECTIONS) or isinstance(value, dict | list):
            return f"a {_type_name(value)}"  # never a client value: it may be a secret
        return f"{_type_name(value)} {value!r}"

    def mapping(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        value = data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error((name,), f"expected a mapping, got {self._got((name,), value)}")
        return value

    def known(self, section: dict[str, Any], key: tuple[str, ...], cls: type) -> None:
        allowed = set(cls.__dataclass_fields__)
        bad = sorted(set(map(str, section)) - allowed)
        if bad:
            raise self.error(key, f"unknown key(s): {', '.join(bad)} "
                                  f"(allowed: {', '.join(sorted(allowed))})")

    def scalar(self, value: Any, key: tuple[str, ...]) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"  # as librdkafka and Spark spell booleans
        if isinstance(value, str | int | float):
            return str(value)
        raise self.error(key, "expected a string, number or boolean, got "
                              f"{self._got(key, value)}")

    def client_settings(self, data: dict[str, Any], name: str) -> dict[str, str]:
        return {str(k): self.scalar(v, (name, str(k)))
                for k, v in self.mapping(data, name).items()}

    def string(self, data: dict[str, Any], key: tuple[str, ...], default: str) -> str:
        value = data.get(key[-1], default)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise self.error(key, f"expected a non-empty string, got {self._got(key, value)}")

    def optional_string(self, data: dict[str, Any], key: tuple[str, ...]) -> str | None:
        return None if data.get(key[-1]) is None else self.string(data, key, "")

    def strings(self, data: dict[str, Any], key: tuple[str, ...],
                default: list[str]) -> list[str]:
        value = data.get(key[-1], default)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(
                isinstance(v, str) and v for v in value):
            raise self.error(key, f"expected a list of strings, got {self._got(key, value)}")
        return value

    def integer(self, data: dict[str, Any], key: tuple[str, ...], default: int,
                minimum: int = 0) -> int:
        value = data.get(key[-1], default)
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {self._got(key, value)}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        return value

    def optional_int(self, data: dict[str, Any], key: tuple[str, ...],
                     default: int | None = None) -> int | None:
        if key[-1] not in data:
            return default
        if data[key[-1]] in (None, 0):
            return None  # 0 or null: no limit
        return self.integer(data, key, 0, minimum=1)

    def boolean(self, data: dict[str, Any], key: tuple[str, ...], default: bool) -> bool:
        value = data.get(key[-1], default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {self._got(key, value)}")
        return value

    def duration(self, data: dict[str, Any], key: tuple[str, ...], default: str) -> int:
        value = data.get(key[-1], default)
        if not isinstance(value, bool) and isinstance(value, str | int | float):
            try:
                return duration_ms(value, key[-1])
            except ConfigError:
                pass
        raise self.error(key, f"'{value}' is not a duration (e.g. '5 seconds', '20 minutes')")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)
