"""The Kafka source's settings, one type end to end: the job's ``source:`` section
(:class:`~l2m.config.job.SourceConfig`) travels to ``format("l2m-kafka")`` as Spark options
and comes back as the same record.

Input: the options Spark hands a Python data source (names compared case-insensitively).
Output: a frozen :class:`SourceOptions` — the topic, the client settings, a
:class:`~l2m.config.job.SourceConfig` and the settings only the running job knows — or a
:class:`~l2m.errors.ConfigError` naming the option and what it must be (code ``CONFIG``).
:meth:`SourceOptions.spark_options` is the way back (what the streaming job sets).

The options' names are the documented camelCase ones (:data:`OPTIONS`, the one table mapping
them to ``SourceConfig``'s fields); values are read as the configuration file's are
(:mod:`l2m.config.decode`), an absent or empty option taking ``SourceConfig``'s default (null
for an optional one: ``maxRecordsPerTask=""`` or ``"0"`` is no limit). Every ``kafka.*``
option is passed to the client (TLS, SASL…); none is ever logged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from l2m.config.decode import Decoder, client_setting_problem, shown
from l2m.config.job import SourceConfig
from l2m.errors import ConfigError

# librdkafka's own log level for every client l2m creates: critical only. Its errors (a broker
# unreachable, a refused connection) repeat what l2m reports once, as one line, with the cause
# (l2m.runtime.failures); at level 3 each retry printed a handful of "FAIL" lines too.
CLIENT_LOG_LEVEL = "2"

# format("l2m-kafka")'s option → the SourceConfig field it sets.
OPTIONS: dict[str, str] = {
    "startingOffsets": "starting_offsets",
    "maxRecordsPerTrigger": "max_records_per_trigger",
    "maxRecordsPerTask": "max_records_per_task",
    "minPartitions": "min_partitions",
    "planner": "planner",
    "planLog": "plan_log",
    "failOnDataLoss": "fail_on_data_loss",
    "groupId": "group_id",
    "pollTimeoutMs": "poll_timeout_ms",
}
# Options only the running job sets (not in the configuration file) → SourceOptions' fields.
RUNTIME: dict[str, str] = {
    "deadLetterTopic": "dead_letter_topic",
    "stopFile": "stop_file",
    "routing": "routing",
    "parsePlan": "parse_plan",
    "ruleset": "ruleset",
    "rulesetFile": "ruleset_file",
    "shards": "shards",
    "pack": "pack",
    "tickMs": "tick_ms",
}


def kafka_config(options: dict[str, str], prefix: str = "kafka.") -> dict[str, str]:
    """The client configuration: every ``kafka.*`` option (or ``prefix``'s) without the
    prefix."""
    return {k[len(prefix):]: v for k, v in options.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class SourceOptions:
    """Everything the Kafka source reads (see :mod:`l2m.kafka.source`)."""

    topic: str
    kafka: dict[str, str]
    source: SourceConfig = field(default_factory=SourceConfig)
    dead_letter_topic: str | None = None  # malformed logs go here (original bytes, reason)
    stop_file: str | None = None  # while it exists no new data is admitted (graceful stop)
    routing: str | None = None  # the job's rules (l2m.engine.pipeline.routing_option)
    parse_plan: str | None = None  # a JSON l2m.engine.parse.ParsePlan
    # Live rules (l2m.engine.rulesets): the version of ``routing``; the driver's file naming
    # the version to plan new batches with; the state shards a partial's ``place`` counts.
    ruleset: str | None = None
    ruleset_file: str | None = None
    shards: str | None = None
    pack: str | None = None  # "1": each state key's partials in one row (the current state format)
    tick_ms: str | None = None  # an idle source's tick interval (l2m.kafka.source.Ticker)

    @staticmethod
    def parse(raw: dict[str, Any]) -> SourceOptions:
        """Parse and check the options; a bad one is a :class:`ConfigError` naming it."""
        options = {str(k).lower(): str(v) for k, v in raw.items()}
        if not options.get("topic"):
            raise ConfigError("l2m-kafka option topic is required")
        kafka = kafka_config(options)
        for name in kafka:
            problem = client_setting_problem(name, prefix="kafka.")
            if problem:
                raise _fail((f"kafka.{name}",), problem)
        if "bootstrap.servers" not in kafka:
            raise ConfigError("l2m-kafka option kafka.bootstrap.servers is required")
        given = {name: options[name.lower()] for name in OPTIONS if name.lower() in options}
        source = Decoder(_fail, text=True).record(
            SourceConfig, given, names={f: name for name, f in OPTIONS.items()})
        runtime = {f: options.get(name.lower()) or None for name, f in RUNTIME.items()}
        return SourceOptions(topic=options["topic"], kafka=kafka, source=source, **runtime)

    def spark_options(self) -> dict[str, str]:
        """The options that :meth:`parse` reads back as this (every ``SourceConfig`` field
        written out, so the job's settings, not the defaults, apply)."""
        options = {"topic": self.topic, **{f"kafka.{k}": v for k, v in self.kafka.items()}}
        for name, f in OPTIONS.items():
            options[name] = _text(getattr(self.source, f))
        for name, f in RUNTIME.items():
            value = getattr(self, f)
            if value is not None:
                options[name] = value
        return options


def _text(value: Any) -> str:
    """A setting as an option's text: null is empty, booleans as Spark spells them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fail(at: tuple[str, ...], problem: str, *, line_at: tuple[str, ...] | None = None,
          hide_key: bool = False) -> ConfigError:
    """A bad option (:class:`l2m.config.decode.Fail`): ``l2m-kafka option NAME: problem``."""
    return ConfigError(f"l2m-kafka option {'.'.join(map(shown, at))}: {problem}")
