"""The Kafka sink: a metrics broker that is down fails the job clearly; once it is back, a
restart on the same checkpoint delivers everything (the failed batch is replayed)."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from l2m.broker import EmbeddedBroker, create_topics, free_port
from l2m.rules import load_text
from l2m.runner import Runner

from .kafka_helpers import canonical, consume_all, fresh_topics, job_config, latest_samples, produce
from .test_streaming import COUNTER_RULES, backfill_samples, generated, run_once

pytestmark = pytest.mark.spark


def test_metrics_broker_down_fails_clearly_and_restart_loses_nothing(spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    rules, _ = load_text(COUNTER_RULES)
    lines = generated(500, seed=31)
    produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    port = free_port()
    sink = {"bootstrap.servers": f"127.0.0.1:{port}", "message.timeout.ms": "3000"}
    cfg = replace(job_config(t, tmp_path), sink_kafka=sink)

    out = io.StringIO()
    runner = Runner(cfg, rules, once=True, out=out, spark=spark)
    runner.start()
    assert runner.wait(poll=0.5) == 1
    assert "failed" in out.getvalue() and "Kafka did not acknowledge" in out.getvalue()

    with EmbeddedBroker(port=port) as metrics_broker:
        create_topics(metrics_broker.bootstrap, [t.topics.metrics])
        run_once(spark, cfg, rules)
        got = latest_samples(consume_all(metrics_broker.bootstrap, t.topics.metrics))
    expected = backfill_samples(spark, rules, lines, tmp_path)
    assert canonical(s for s in got if s["rule"] != "l2m-input") == canonical(expected)
