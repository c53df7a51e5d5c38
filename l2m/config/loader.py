"""Job configuration files (``topology/*.yaml``) → a typed :class:`JobConfig`.

Relative paths (rules, checkpoint) are resolved against the configuration file's folder, so a
job runs the same from any working directory; a URI (``s3a://bucket/l2m``) is kept as written.
Unknown keys are errors, as in rule files."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import yaml

from l2m import yamlsafe
from l2m.config.job import JobConfig, MonitoringConfig, SourceConfig, Topics
from l2m.errors import ConfigError

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?|"
                       r"d|days?)\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


# Past this a duration is a typo (and far past it, Spark's millisecond longs overflow).
MAX_DURATION_MS = 100 * 365 * 86_400_000


def duration_ms(text: str | int | float, key: str = "duration") -> int:
    """``"20 minutes"``, ``"5s"``, ``"250 ms"``, ``"7 days"`` → milliseconds; a number is
    seconds. At least 0, at most :data:`MAX_DURATION_MS`."""
    try:
        return _duration_ms(text)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def _duration_ms(text: str | int | float) -> int:
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise ValueError(f"'{text}' is not a duration (e.g. '5 seconds', '20 minutes')")
        ms = text * 1000
    else:
        match = _DURATION.fullmatch(str(text))
        if not match:
            raise ValueError(f"'{text}' is not a duration (e.g. '5 seconds', '20 minutes')")
        unit = match.group(2)
        unit = "ms" if unit.startswith("milli") or unit == "ms" else unit[0]
        ms = float(match.group(1)) * _UNIT_MS[unit]
    if ms > MAX_DURATION_MS:
        raise ValueError(f"'{text}' is longer than 100 years")
    return int(ms)


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_TOP = {"kafka", "sink_kafka", "topics", "rules", "checkpoint", "trigger", "grace", "counter_ttl",
        "counter_shards", "max_future_skew", "text_fields", "default_fields", "timestamp_field",
        "source", "spark", "monitoring"}
_SECRET_SECTIONS = ("kafka", "sink_kafka")  # client settings: values never printed
_MAX_INT = 2**31 - 1  # counts and limits reach Spark and Kafka as Java ints


def load_config(path: str | Path) -> JobConfig:
    """Read and check a job configuration file. Every error names the file, the line and the
    key; none ever quotes the file's text or a Kafka client value (they hold secrets)."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            # bounded: a configuration is a few hundred bytes; a wrong path may be a huge file
            data = stream.read(yamlsafe.MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > yamlsafe.MAX_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {yamlsafe.MAX_FILE_BYTES} bytes; is this the "
                          "job configuration?")
    try:
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read: not UTF-8 (byte "
                          f"{exc.object[exc.start]:#04x} at offset {exc.start})") from None
    root = _compose(path, text)
    loader = yamlsafe.SafeLoader("")
    try:
        parsed = loader.construct_document(root) if root is not None else {}
    except yaml.MarkedYAMLError as exc:  # not expected after the checks; never quote the text
        line, column, problem = yamlsafe.position(exc, text)
        raise ConfigError(f"{path}:{line}:{column}: {_redact(problem)}") from None
    finally:
        loader.dispose()
    if parsed is None:
        parsed = {}
    if not isinstance(parsed, dict):
        raise ConfigError(f"{path}:1: top level must be a mapping")
    return config_from_dict(_expand(parsed), path, _lines(root))


def _compose(path: Path, text: str) -> yaml.Node | None:
    """The checked node tree of a configuration: bounded aliases and nesting, merge keys
    (``<<: *base``) applied, no duplicate key, no explicit tag, every key a plain value."""
    try:
        root = yamlsafe.compose(text)
    except yaml.YAMLError as exc:
        line, column, problem = yamlsafe.position(exc, text)
        raise ConfigError(f"{path}:{line}:{column}: invalid YAML: {_redact(problem)}") from None

    def fail(node: yaml.Node, problem: str) -> ConfigError:
        mark = node.start_mark
        return ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {problem}")

    deep = yamlsafe.too_deep(root)
    if deep is not None:
        raise fail(deep, f"YAML nesting is deeper than {yamlsafe.MAX_DEPTH} levels")
    for key, kind in yamlsafe.complex_keys(root):
        raise fail(key, f"a mapping key must be a plain value, not a {kind}")
    mappings = [n for n in yamlsafe.nodes(root) if isinstance(n, yaml.MappingNode)]
    for node in mappings:
        seen: dict[str, yaml.Node] = {}
        for key, _ in node.value:
            if key.tag == _MERGE:
                continue
            first = seen.setdefault(str(key.value), key)
            if first is not key:
                # YAML would keep the last silently: a second `source:` section would
                # replace the first one whole.
                raise fail(key, f"key '{_shown(key.value)}' appears twice (first at line "
                                f"{first.start_mark.line + 1})")
    loader = yamlsafe.SafeLoader("")
    try:
        for node in mappings:
            loader.flatten_mapping(node)  # merge keys, as yaml.safe_load applies them
    except yaml.MarkedYAMLError as exc:
        line, column, problem = yamlsafe.position(exc, text)
        raise ConfigError(f"{path}:{line}:{column}: {_redact(problem)}") from None
    finally:
        loader.dispose()
    for code, mark, problem in yamlsafe.tag_problems(root):
        # an unknown tag's name is not shown: `sasl.password: !s3cret` is a tag to YAML
        what = "an explicit tag l2m does not read (only plain YAML values are allowed)" \
            if code == "YAML_UNKNOWN_TAG" else problem
        raise ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {what}")
    return root


_MERGE = "tag:yaml.org,2002:merge"
# PyYAML quotes names it did not understand: an alias (`sasl.password: *s3cret`), an anchor,
# a tag handle — pieces of the text, which may be a secret. Single characters and token
# names ('<stream end>') say what is wrong without that risk; l2m.yamlsafe's limits name the
# alias too.
_QUOTED = re.compile(r"'([^']*)'")
_HARMLESS = re.compile(r"\\?.|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|<[a-z ]+>")
_ALIAS = re.compile(r"\*[^\s)]+")
# A key that does not look like a setting name may be a value typed without its colon
# (`kafka: {sasl.password s3cret}` is the key "sasl.password s3cret"): not shown.
_KEY_NAME = re.compile(r"[A-Za-z0-9_.@-]+")


def _redact(problem: str) -> str:
    problem = _ALIAS.sub("*(not shown)", problem)
    return _QUOTED.sub(lambda m: m.group(0) if _HARMLESS.fullmatch(m.group(1)) else "(not shown)",
                       problem)


def _shown(key: object) -> str:
    return str(key) if _KEY_NAME.fullmatch(str(key)) else "(a key not shown)"


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
                    lines[here] = key.start_mark.line + 1  # the last wins, as in YAML
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
        raise check.error((), f"unknown key(s): {', '.join(map(_shown, unknown))} "
                              f"(allowed: {', '.join(sorted(_TOP))})")
    base = path.resolve().parent if path else Path.cwd()

    def resolve(p: str) -> str:
        # A URI (s3a://bucket/p, file:///p) names its own location: kept as written.
        if _URI.match(p) or Path(p).is_absolute():
            return p
        return str((base / p).resolve())

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
    monitoring = check.mapping(data, "monitoring")
    check.known(monitoring, ("monitoring",), MonitoringConfig)
    port = check.optional_int(monitoring, ("monitoring", "port"))
    if port is not None and port > 65535:
        raise check.error(("monitoring", "port"), f"{port} is not a TCP port (0-65535)")
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
        monitoring=MonitoringConfig(
            port=port, host=check.string(monitoring, ("monitoring", "host"), "0.0.0.0")),
        master=master,
        spark=spark_conf,
        path=str(path) if path else None,
    )


def _offsets_spec(check: _Checker, source: dict[str, Any]) -> str:
    """``earliest``, ``latest`` or per-partition offsets (-2 earliest, -1 latest), written as
    a YAML mapping or a JSON string, optionally under the topic's name — what
    :mod:`l2m.kafka.source` reads."""
    key = ("source", "starting_offsets")
    value = source.get("starting_offsets", "earliest")
    if value in ("earliest", "latest"):
        return str(value)
    expected = "expected earliest, latest or a mapping of partition to offset"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise check.error(key, f"{expected}, got {check.got(key, value)}") from None
    if not isinstance(value, dict) or not value:
        raise check.error(key, f"{expected}, got {check.got(key, value)}")
    per_topic = all(isinstance(v, dict) for v in value.values())
    for partitions in value.values() if per_topic else [value]:
        for partition, offset in partitions.items():
            if not re.fullmatch(r"[0-9]+", str(partition)):
                raise check.error(key, f"partition '{partition}' is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise check.error(key, f"offset of partition {partition} must be an integer, "
                                       f"-2 (earliest) or -1 (latest) or more, got "
                                       f"{check.got(key, offset)}")
    if per_topic:
        return json.dumps({str(t): {str(p): o for p, o in ps.items()} for t, ps in value.items()})
    return json.dumps({str(p): o for p, o in value.items()})


class _Checker:
    """Typed reads of configuration values; errors say ``file:line: key: problem``."""

    def __init__(self, path: Path | None, lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def error(self, key: tuple[str, ...], problem: str, *, hide_key: bool = False
              ) -> ConfigError:
        where = str(self.path) if self.path else "config"
        line = self.lines.get(key) or (self.lines.get(key[:1]) if key else None)
        prefix = f"{where}:{line}" if line else where
        name = ".".join(map(_shown, key[:-1] if hide_key else key))
        return ConfigError(f"{prefix}: {name}: {problem}" if name else f"{prefix}: {problem}")

    def got(self, key: tuple[str, ...], value: Any) -> str:
        if (key and key[0] in _SECRET_SECTIONS) or isinstance(value, dict | list):
            return f"a {_type_name(value)}"  # never a client value: it may be a secret
        return f"{_type_name(value)} {value!r}"

    def mapping(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        value = data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error((name,), f"expected a mapping, got {self.got((name,), value)}")
        return value

    def known(self, section: dict[str, Any], key: tuple[str, ...], cls: type) -> None:
        allowed = set(cls.__dataclass_fields__)
        bad = sorted(set(map(str, section)) - allowed)
        if bad:
            raise self.error(key, f"unknown key(s): {', '.join(map(_shown, bad))} "
                                  f"(allowed: {', '.join(sorted(allowed))})")

    def scalar(self, value: Any, key: tuple[str, ...]) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"  # as librdkafka and Spark spell booleans
        if isinstance(value, str | int | float):
            return str(value)
        if value is None and key[0] in _SECRET_SECTIONS:
            # `kafka: {bootstrap.servers: x, s3cret}`: the "key" may be a stray value
            raise self.error(key, "a setting on this line has no value", hide_key=True)
        raise self.error(key, "expected a string, number or boolean, got "
                              f"{self.got(key, value)}")

    def client_settings(self, data: dict[str, Any], name: str) -> dict[str, str]:
        return {str(k): self.scalar(v, (name, str(k)))
                for k, v in self.mapping(data, name).items()}

    def string(self, data: dict[str, Any], key: tuple[str, ...], default: str) -> str:
        value = data.get(key[-1], default)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise self.error(key, f"expected a non-empty string, got {self.got(key, value)}")

    def optional_string(self, data: dict[str, Any], key: tuple[str, ...]) -> str | None:
        return None if data.get(key[-1]) is None else self.string(data, key, "")

    def strings(self, data: dict[str, Any], key: tuple[str, ...],
                default: list[str]) -> list[str]:
        value = data.get(key[-1], default)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(
                isinstance(v, str) and v for v in value):
            got = "an empty list" if value == [] else self.got(key, value)
            raise self.error(key, f"expected a list of strings (at least one, none empty), "
                                  f"got {got}")
        return value

    def integer(self, data: dict[str, Any], key: tuple[str, ...], default: int,
                minimum: int = 0) -> int:
        value = data.get(key[-1], default)
        if isinstance(value, str) and re.fullmatch(r"\s*[0-9]+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {self.got(key, value)}")
        if value < minimum:
            raise self.error(key, f"must be at least {minimum}, got {value}")
        if value > _MAX_INT:
            raise self.error(key, f"must be at most {_MAX_INT}, got {value}")
        return value

    def optional_int(self, data: dict[str, Any], key: tuple[str, ...],
                     default: int | None = None) -> int | None:
        if key[-1] not in data:
            return default
        value = data[key[-1]]
        if value is None or (type(value) is int and value == 0):  # `false` is not 0 here
            return None  # 0 or null: no limit
        return self.integer(data, key, 0, minimum=1)

    def boolean(self, data: dict[str, Any], key: tuple[str, ...], default: bool) -> bool:
        value = data.get(key[-1], default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {self.got(key, value)}")
        return value

    def duration(self, data: dict[str, Any], key: tuple[str, ...], default: str) -> int:
        value = data.get(key[-1], default)
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.error(key, "expected a duration (e.g. '5 seconds', '20 minutes'), got "
                                  f"{self.got(key, value)}")
        try:
            return _duration_ms(value)
        except ValueError as exc:
            raise self.error(key, str(exc)) from None


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)
