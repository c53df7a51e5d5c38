"""The source's options: every option ``format("l2m-kafka")`` takes, parsed and checked once.

Input: the options Spark hands a Python data source (names lower-cased). Output: a frozen
:class:`SourceOptions`, or a ``ValueError`` naming the option and what it must be. Every
``kafka.*`` option is passed to the client (TLS, SASL…); none is ever logged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def kafka_config(options: dict[str, str]) -> dict[str, str]:
    """The client configuration: every ``kafka.*`` option without its prefix."""
    return {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of the Kafka source (see :mod:`l2m.kafka.source`)."""

    topic: str
    kafka: dict[str, str]
    starting_offsets: str = "earliest"
    max_per_trigger: int | None = None
    max_per_task: int | None = None
    min_partitions: int | None = None
    balanced: bool = True
    fail_on_data_loss: bool = True
    group_id: str | None = None
    poll_timeout_s: float = 120.0
    dead_letter_topic: str | None = None
    stop_file: str | None = None  # while it exists no new data is admitted (graceful stop)
    plan_log: str | None = None  # benchmarks: each batch's task plan is appended here
    routing: str | None = None  # the job's rules (l2m.engine.pipeline.routing_option)
    parse_plan: str | None = None  # a JSON l2m.engine.parse.ParsePlan

    @staticmethod
    def parse(raw: dict[str, Any]) -> SourceOptions:
        """Parse and check the options; a bad one is a ``ValueError`` naming it."""
        options = {str(k).lower(): str(v) for k, v in raw.items()}
        kafka = kafka_config(options)
        if "topic" not in options or not options["topic"]:
            raise ValueError("option topic is required")
        if "bootstrap.servers" not in kafka:
            raise ValueError("option kafka.bootstrap.servers is required")
        planner = options.get("planner", "balanced").lower()
        if planner not in ("balanced", "partition"):
            raise ValueError(f"option planner must be balanced or partition, not {planner!r}")
        return SourceOptions(
            topic=options["topic"], kafka=kafka,
            starting_offsets=options.get("startingoffsets", "earliest"),
            max_per_trigger=_count(options, "maxrecordspertrigger"),
            max_per_task=_count(options, "maxrecordspertask"),
            min_partitions=_count(options, "minpartitions"),
            balanced=planner == "balanced",
            fail_on_data_loss=_flag(options, "failondataloss", True),
            group_id=options.get("groupid") or None,
            poll_timeout_s=_number(options, "polltimeoutms", 120_000) / 1000,
            dead_letter_topic=options.get("deadlettertopic") or None,
            stop_file=options.get("stopfile") or None,
            plan_log=options.get("planlog") or None,
            routing=options.get("routing") or None,
            parse_plan=options.get("parseplan") or None,
        )


def _count(options: dict[str, str], name: str) -> int | None:
    """A positive count; absent, empty or 0: none."""
    value = options.get(name)
    if value in (None, "", "0"):
        return None
    try:
        count = int(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f"option {name} must be a whole number, not {value!r}") from None
    if count < 0:
        raise ValueError(f"option {name} must not be negative, not {count}")
    return count


def _number(options: dict[str, str], name: str, default: float) -> float:
    value = options.get(name)
    if value in (None, ""):
        return default
    try:
        number = float(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f"option {name} must be a number, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"option {name} must be positive, not {value}")
    return number


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value in (None, ""):
        return default
    lowered = value.lower()  # type: ignore[union-attr]
    if lowered not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {value!r}")
    return lowered == "true"
