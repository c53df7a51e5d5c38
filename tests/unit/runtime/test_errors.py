"""Operator-grade errors: one line, ``l2m: error [CODE]: message``, with the real cause (the
Python or Java exception's own message, never py4j's wrapper); tracebacks only with
``--debug``."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from l2m.errors import (
    OPERATOR_ERRORS,
    ConfigError,
    DataLossError,
    InputError,
    KafkaUnavailableError,
    RuleSnapshotError,
    SinkError,
    SparkError,
    StateFormatError,
)
from l2m.runtime.failures import failure, retriable
from l2m.runtime.progress import lag
from tests.support.tools import cli

ROOT = Path(__file__).resolve().parents[3]


def test_each_operator_error_class_has_its_own_stable_code():
    codes = {cls: cls("x").code for cls in (ConfigError, InputError, DataLossError, SinkError,
                                            KafkaUnavailableError, StateFormatError,
                                            SparkError)}
    assert codes == {ConfigError: "CONFIG", InputError: "INPUT", DataLossError: "DATA_LOSS",
                     SinkError: "SINK", KafkaUnavailableError: "KAFKA_UNAVAILABLE",
                     StateFormatError: "STATE_FORMAT", SparkError: "SPARK"}
    assert SinkError("no ack").render() == "l2m: error [SINK]: no ack"


QUERY_FAILURE = """\
[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to stage \
failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0:
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/pyspark/worker.py", line 1, in main
  File "/x/l2m/sink.py", line 120, in write
l2m.errors.SinkError: Kafka did not acknowledge 3 of 3 samples for topic 'metrics'
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)
Caused by: java.lang.RuntimeException: wrapped
"""


def test_l2m_errors_inside_spark_failures_keep_their_class_and_message():
    error = failure(QUERY_FAILURE)
    assert isinstance(error, SinkError)
    assert error.message == "Kafka did not acknowledge 3 of 3 samples for topic 'metrics'"
    assert retriable(error)
    assert not retriable(failure(QUERY_FAILURE.replace("SinkError", "StateFormatError")))


def test_every_error_a_worker_can_raise_is_recognised_in_spark_s_failure_text():
    """An l2m error raised in a Python worker reaches the driver as text: those it may raise
    are known by name, so each keeps its own code (RuleSnapshotError was once missing and
    would have been reported as [SPARK])."""
    assert sorted(OPERATOR_ERRORS) == [
        "BrokerError", "ConfigError", "DataLossError", "InputError", "KafkaUnavailableError",
        "RuleSnapshotError", "SinkError", "StateFormatError"]
    rendered = {name: failure(QUERY_FAILURE.replace("SinkError", name)).render()
                for name in OPERATOR_ERRORS}
    message = "Kafka did not acknowledge 3 of 3 samples for topic 'metrics'"
    assert rendered == {name: f"l2m: error [{cls('x').code}]: {message}"
                        for name, cls in OPERATOR_ERRORS.items()}
    assert rendered["RuleSnapshotError"] == f"l2m: error [RULE_SNAPSHOT]: {message}"
    assert isinstance(failure(QUERY_FAILURE.replace("SinkError", "RuleSnapshotError")),
                      RuleSnapshotError)


def test_a_java_cause_is_found_under_py4j_wrappers():
    text = ("An error occurred while calling o123.toPythonIterator.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: boom\n"
            "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages\n"
            "Caused by: java.io.EOFException: Unexpected end of input stream\n")
    error = failure(text)
    assert isinstance(error, SparkError)
    assert error.message == "EOFException: Unexpected end of input stream"
    assert "o123" not in error.render()


def test_kafka_transport_failures_are_retried():
    error = failure("KafkaException: KafkaError{code=_TRANSPORT,val=-195,str=\"Failed to get "
                    "metadata: Local: Broker transport failure\"}")
    assert isinstance(error, KafkaUnavailableError) and retriable(error)


def test_lag_of_a_replayed_batch_is_unknown_not_a_crash():
    replayed = {"sources": [{"latestOffset": "null",
                             "endOffset": '{"topic": "t", "partitions": {"0": 5}}'}]}
    assert lag(replayed) is None
    assert lag({"sources": [{"latestOffset": None, "endOffset": None}]}) is None
    normal = {"sources": [{"latestOffset": {"topic": "t", "partitions": {"0": 9, "1": 3}},
                           "endOffset": '{"topic": "t", "partitions": {"0": 5, "1": 3}}'}]}
    assert lag(normal) == 4


def test_missing_input_and_output_over_input_are_input_errors(tmp_path):
    logs = tmp_path / "logs.jsonl"
    logs.write_text("{}\n")
    res = cli("backfill", "--rules", str(ROOT / "rules"), "--input", str(tmp_path / "nope"),
              "--output", str(tmp_path / "o.jsonl"))
    assert res.returncode == 1
    assert res.stderr.strip() == f"l2m: error [INPUT]: {tmp_path / 'nope'}: no such file or " \
                                 "directory"
    res = cli("backfill", "--rules", str(ROOT / "rules"), "--input", str(logs),
              "--output", str(logs))
    assert res.returncode == 1 and "[INPUT]" in res.stderr
    assert logs.read_text() == "{}\n"


# Exceptions l2m raises that never reach a user: each is caught and turned into an L2mError
# (or is a programming error) where it is raised. Anything else raised in l2m/ must be an
# L2mError, so the one line a user sees always has a stable code.
INTERNAL_RAISES = {
    ("l2m/engine/parse.py", "KeyError"),  # a column lookup protocol inside the parse plan
    ("l2m/config/decode.py", "TypeError"),  # a record field type without a decoder: a bug
    ("l2m/__init__.py", "AttributeError"),  # the lazy API's module __getattr__
    ("l2m/streaming/topology.py", "LookupError"),  # the topology names a missing module: a bug
    ("l2m/runtime/forkserver.py", "ValueError"),  # a request it cannot read: answered "run it
                                                  # yourself", the process starts as ever
    ("l2m/authoring/testfile.py", "ValueError"),  # parse_series: caught where a test file is
                                                  # read, reported with the file and line
    # native-histogram arithmetic and bucket keys: its callers' arguments checked (keys are
    # only ever written by l2m; schemas by the rule loader, which refuses with codes)
    ("l2m/semantics/exphist.py", "ValueError"),
    ("l2m/semantics/exphist.py", "AssertionError"),
    ("l2m/engine/nativebuckets.py", "ValueError"),
    # l2m load's Prometheus poll: a bad answer or an HTTP error is caught in
    # PrometheusWatcher.poll and counted as a failed poll (its last error reported)
    ("l2m/dev/loadwatch.py", "ValueError"),
    ("l2m/dev/loadwatch.py", "OSError"),
    # Skew built in code: l2m load's --skew is parsed by parse_skew, which refuses with codes
    ("l2m/dev/skew.py", "ValueError"),
}
BUILTIN_ERRORS = {name for name in dir(builtins) if name.endswith(("Error", "Exception"))}


def test_everything_l2m_raises_for_a_user_is_an_l2m_error():
    import ast

    import l2m.errors as errors

    ours = {name for name, value in vars(errors).items()
            if isinstance(value, type) and issubclass(value, BaseException)}
    assert all(issubclass(getattr(errors, name), errors.L2mError) for name in ours)
    found = set()
    for path in sorted((ROOT / "l2m").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) \
                    and isinstance(node.exc.func, ast.Name) \
                    and node.exc.func.id in BUILTIN_ERRORS:
                found.add((str(path.relative_to(ROOT)), node.exc.func.id))
    assert found == INTERNAL_RAISES


def test_a_client_setting_librdkafka_refuses_is_a_config_error_not_an_outage():
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with pytest.raises(KafkaException) as refused:
        AdminClient({"bootstrap.servers": "127.0.0.1:1", "foo.bar": "s3cret"})
    wrapped = KafkaUnavailableError(f"cannot read Kafka metadata: {refused.value}")
    error = failure(wrapped)
    assert isinstance(error, ConfigError) and not retriable(error)
    assert "kafka.foo.bar" in error.message and "s3cret" not in error.message
    with pytest.raises(KafkaException) as refused:
        AdminClient({"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": "s3cret"})
    error = failure(f"Caused by: {refused.value}")
    assert isinstance(error, ConfigError) and "s3cret" not in error.message
