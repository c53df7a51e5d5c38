"""Failures → operator errors: what stopped a query or a command, as one line with the real
cause.

Input: anything Spark, py4j or l2m raised — an exception raised inside a Python worker reaches
the driver only as text inside Spark's and py4j's wrappers. Output: an
:class:`~l2m.errors.L2mError` whose class (and so its stable code) is l2m's own error when
one is in the text, :class:`~l2m.errors.KafkaUnavailableError` for a Kafka client that cannot
reach its brokers, else :class:`~l2m.errors.SparkError` with the deepest Python or Java
exception's own message (never py4j's "An error occurred while calling o123.…")."""

from __future__ import annotations

import re
from typing import Any

from l2m.errors import (
    OPERATOR_ERRORS,
    ConfigError,
    KafkaUnavailableError,
    L2mError,
    SinkError,
    SparkError,
)

# One line of a Python traceback or a Java exception: ``[module.]Name: message``.
_CAUSE = re.compile(r"^\s*(?::\s*)?(?:Caused by: )?(?:[\w$]+\.)*(\w*(?:Error|Exception)): (.+)$")
# Wrappers that carry no cause of their own.
_WRAPPERS = {"StreamingQueryException", "Py4JJavaError", "PythonException", "SparkException",
             "ExecutionException", "UncheckedExecutionException", "QueryExecutionException"}
# Kafka client failures that mean "cannot reach Kafka right now".
_KAFKA_DOWN = re.compile(r"KafkaException|Connection refused|KafkaError\{code=(_TRANSPORT|"
                         r"_TIMED_OUT|_ALL_BROKERS_DOWN|_MSG_TIMED_OUT|NOT_LEADER|"
                         r"LEADER_NOT_AVAILABLE)")


def failure(exc: Any) -> L2mError:
    """The operator error behind a query failure or a Spark/py4j exception: l2m's own error
    when one is in the text (its class decides the code), else the deepest real cause. A
    Kafka client setting librdkafka refuses is a configuration error, whatever wraps it: no
    outage to wait out."""
    text = str(exc.desc if hasattr(exc, "desc") else exc).strip()
    setting = _CLIENT_SETTING.search(text)
    if setting is not None:
        # The property's name only: its value may be a secret.
        name = setting.group(1) or setting.group(2)
        return ConfigError(f"kafka.{name}: librdkafka does not accept this client setting "
                           "(see librdkafka's CONFIGURATION.md for the names and values)")
    if isinstance(exc, L2mError):
        return exc
    if isinstance(exc, BaseException) and _plain(exc) \
            and not any(map(_CAUSE.match, text.splitlines())):
        # An exception of the driver's own Python code (OSError, ValueError…): its message
        # is the cause.
        return SparkError(f"{type(exc).__name__}: {text}") if text else SparkError(repr(exc))
    ours: list[tuple[str, str]] = []
    causes: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _CAUSE.match(line)
        if not match or match.group(1) in _WRAPPERS:
            continue
        (ours if match.group(1) in OPERATOR_ERRORS else causes).append(
            (match.group(1), match.group(2).strip()))
    if ours:
        name, message = ours[-1]
        return OPERATOR_ERRORS[name](message)
    if _KAFKA_DOWN.search(text):
        name, message = causes[-1] if causes else ("KafkaException", text.splitlines()[0])
        return KafkaUnavailableError(f"{name}: {message}")
    if causes:
        name, message = causes[-1]
        return SparkError(f"{name}: {message}")
    return SparkError(text.splitlines()[0] if text else repr(exc))


# librdkafka refusing a setting when a client is created (confluent-kafka's KafkaException).
_CLIENT_SETTING = re.compile(r'No such configuration property: "([^"]+)"|'
                             r'Invalid value (?:"[^"]*" )?for configuration property "([^"]+)"')


def retriable(error: L2mError) -> bool:
    """Kafka outages are waited out; everything else stops the job."""
    return isinstance(error, KafkaUnavailableError | SinkError)


def _plain(exc: Any) -> bool:
    """A Python exception that is not a wrapper of a JVM or worker failure."""
    module = type(exc).__module__
    return not (module.startswith("py4j") or module.startswith("pyspark"))
