"""The Kafka sink: a metrics broker that is down is said clearly and waited out (the query is
restarted with backoff on the same checkpoint); once it is back, everything is delivered (the
failed batch is replayed). `l2m run` says so in one line per retry, without Spark's and the
Python workers' stack traces of the failure (`--debug` shows them)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pandas as pd

from l2m.dev.broker import EmbeddedBroker, create_topics, free_port
from l2m.rules.loader import load_text
from l2m.runtime.runner import Runner
from tests.integration.test_streaming import backfill_samples, generated
from tests.support.kafka_helpers import (
    canonical,
    consume_all,
    fresh_topics,
    job_config,
    job_yaml,
    latest_samples,
    produce,
    rule_samples,
)
from tests.support.outputs import output_rows
from tests.support.rulesets import COUNTER_RULES


def test_metrics_broker_outage_is_ridden_out_and_loses_nothing(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    rules, _ = load_text(COUNTER_RULES)
    lines = generated(500, seed=31)
    produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    port = free_port()
    sink = {"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": "1500"}
    cfg = replace(job_config(t, tmp_path), sink_kafka=sink)

    out = io.StringIO()
    # Backoff capped at 1 s (a job's doubles to a minute): the restarts, not their waits.
    runner = Runner(cfg, rules, once=True, out=out, spark=spark, max_backoff_s=1.0)
    runner.start()
    result: dict[str, int] = {}
    watcher = threading.Thread(target=lambda: result.setdefault("code", runner.wait(poll=0.5)))
    watcher.start()
    deadline = time.monotonic() + 120
    while out.getvalue().count("retrying") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    # the outage is said, with the real cause, and the job keeps waiting
    assert "Kafka did not acknowledge" in out.getvalue() and watcher.is_alive()

    with EmbeddedBroker(port=port) as metrics_broker:
        create_topics(metrics_broker.bootstrap, [t.topics.metrics])
        watcher.join(240)
        assert result == {"code": 0}, out.getvalue()
        assert runner.restarts >= 2
        got = latest_samples(consume_all(metrics_broker.bootstrap, t.topics.metrics))
    expected = backfill_samples(spark, rules, lines, tmp_path)
    assert canonical(rule_samples(got)) == canonical(expected)


def test_without_retries_a_broker_outage_fails_with_the_sink_code(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=1)
    rules, _ = load_text(COUNTER_RULES)
    produce(t.bootstrap, t.topics.logs, generated(50, seed=32), t.partitions)
    sink = {"bootstrap.servers": f"127.0.0.1:{free_port()}", "message.timeout.ms": "2000"}
    cfg = replace(job_config(t, tmp_path), sink_kafka=sink)
    out = io.StringIO()
    runner = Runner(cfg, rules, once=True, out=out, spark=spark, retry=False)
    runner.start()
    assert runner.wait(poll=0.5) == 1
    assert runner.error is not None and runner.error.code == "SINK"
    assert out.getvalue().strip().splitlines()[-1].startswith("l2m: error [SINK]: Kafka did not")


STACK_TRACE = ("\tat ", "Traceback (most recent call last)", "py4j")
MODES = ("quiet", "debug")


def test_a_sink_retry_is_one_line_without_stack_traces(broker, tmp_path):
    """``l2m run`` and ``l2m --debug run`` side by side (two jobs, two checkpoints, one
    logs topic; each JVM start costs about 20 s of a core, waited for once): each says its
    retry in one line; only ``--debug`` shows Spark's failure logs with their stacks."""
    t = fresh_topics(broker.bootstrap, partitions=1)
    produce(t.bootstrap, t.topics.logs, generated(50, seed=33), t.partitions)
    runs: dict[str, subprocess.Popen[str]] = {}
    lines: dict[str, list[str]] = {mode: [] for mode in MODES}
    readers: list[threading.Thread] = []
    try:
        for mode in MODES:
            folder = tmp_path / mode
            folder.mkdir()
            config = job_yaml(t, folder, f"source: {{group_id: sink-{mode}}}",
                              f'sink_kafka: {{bootstrap.servers: "127.0.0.1:{free_port()}", '
                              'message.timeout.ms: "2000"}')
            command = [sys.executable, "-m", "l2m.cli", *(["--debug"] if mode == "debug" else []),
                       "run", "--config", str(config)]
            run = runs[mode] = subprocess.Popen(command, stderr=subprocess.PIPE,
                                                stdout=subprocess.DEVNULL, text=True,
                                                start_new_session=True)
            reader = threading.Thread(target=lambda run=run, out=lines[mode]: out.extend(
                run.stderr or ()))
            reader.start()
            readers.append(reader)
        deadline = time.monotonic() + 180
        waiting = set(MODES)
        while waiting and time.monotonic() < deadline:
            for mode in list(waiting):
                if any("retrying in" in x for x in lines[mode]):
                    runs[mode].send_signal(signal.SIGTERM)  # waiting out the outage: stops
                    waiting.discard(mode)                    # at once
                elif runs[mode].poll() is not None:  # ended on its own: its code says why
                    waiting.discard(mode)
            time.sleep(0.2)
        for mode in waiting:  # no retry said in time: stopped all the same
            runs[mode].send_signal(signal.SIGTERM)
        for mode in MODES:
            assert runs[mode].wait(120) == 0, (mode, "".join(lines[mode]))
    finally:
        for run in runs.values():
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        for reader in readers:
            reader.join(10)
    for mode in MODES:
        stderr = "".join(lines[mode])
        retries = [x for x in lines[mode] if x.startswith("l2m: sink: Kafka did not acknowledge")]
        assert retries and "retrying in 1 s (the batch will be replayed)" in retries[0], stderr
        traces = [x for x in lines[mode] if any(mark in x for mark in STACK_TRACE)]
        if mode == "debug":  # the operator's view: Spark's failure logs, Java and Python stacks
            assert any(x.startswith("\tat ") for x in traces), stderr
            assert any("Traceback (most recent call last)" in x for x in traces), stderr
        else:
            assert traces == [], stderr
            assert " ERROR " not in stderr and "Setting default log level" not in stderr, stderr


def test_a_sample_s_time_column_is_its_record_timestamp(spark, broker, tmp_path):
    """The state stage's micro-batch time (column ``time``) is each record's Kafka timestamp
    — the same on a replay — and without the column the producer stamps it."""
    from l2m.kafka.sink import write_batch

    topic = fresh_topics(broker.bootstrap, partitions=1).topics.metrics
    stamped = spark.createDataFrame([("a", '{"v": 1}', 1_700_000_000_123),
                                     ("b", '{"v": 2}', 1_700_000_000_123)],
                                    "key string, value string, time bigint")
    write_batch(stamped, topic, {"bootstrap.servers": broker.bootstrap})
    before = int(time.time() * 1000)
    plain = spark.createDataFrame([("c", '{"v": 3}')], "key string, value string")
    write_batch(plain, topic, {"bootstrap.servers": broker.bootstrap})
    records = consume_all(broker.bootstrap, topic)
    got = {m.key(): m.timestamp()[1] for m in records}
    assert got[b"a"] == got[b"b"] == 1_700_000_000_123
    assert before <= got[b"c"] <= int(time.time() * 1000)
    # the time again in a header (remote write reads it under LogAppendTime); none without
    assert {m.key(): m.headers() for m in records} == {
        b"a": [("l2m-time", b"1700000000123")], b"b": [("l2m-time", b"1700000000123")],
        b"c": None}


def test_a_state_call_s_packed_samples_are_produced_one_by_one(spark, broker, tmp_path):
    """A state call's many samples travel packed (l2m.engine.samples.samples_frame): the
    sink produces each of them as the rows are produced — its key, value, the batch's time as
    its timestamp, its mark as a header — rows and packs in one micro-batch alike."""
    from l2m.engine.samples import FINAL, MARK_HEADER, MARK_KEY, NEW, PACK_SAMPLES, samples_frame
    from l2m.kafka.sink import write_batch
    from l2m.state.output import OUTPUT_SCHEMA

    def samples(n: int, rule: str) -> list[dict]:
        return [{"name": f"{rule}_total", "kind": "counter", "labels": {"s": str(i)},
                 "value": float(i), "timestamp": 1_700_000_000_000, "account": "a",
                 "rule": rule, **({MARK_KEY: NEW} if i == 0 else {})} for i in range(n)]

    many, few = samples(PACK_SAMPLES + 6, "many"), samples(3, "few")
    frames = [samples_frame(many, 1_700_000_000_123), samples_frame(few, 1_700_000_000_123,
                                                                    FINAL)]
    assert frames[0]["pack"].notna().all() and frames[1]["pack"].isna().all()
    frame = spark.createDataFrame(pd.concat(frames, ignore_index=True), OUTPUT_SCHEMA)
    topic = fresh_topics(broker.bootstrap, partitions=1).topics.metrics
    write_batch(frame.repartition(1), topic, {"bootstrap.servers": broker.bootstrap})
    records = consume_all(broker.bootstrap, topic)
    got = {(m.key().decode(), m.value().decode(), m.timestamp()[1],
            dict(m.headers() or []).get(MARK_HEADER)) for m in records}
    expected = output_rows(frames)
    assert len(got) == PACK_SAMPLES + 9
    assert got == {(k, v, t, m.encode() if m else None) for k, v, t, m in expected}
    assert {dict(m.headers() or [])["l2m-time"] for m in records} == {b"1700000000123"}
    assert len(expected) == len(got)  # no two alike
