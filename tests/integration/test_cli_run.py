"""`l2m run --config FILE --once` as a user runs it: a subprocess against the real broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.test_streaming import generated
from tests.support.kafka_helpers import consume_all, fresh_topics, job_yaml, latest_samples, produce

ROOT = Path(__file__).resolve().parents[2]


def test_run_once_processes_everything_and_exits_zero(broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    lines = generated(400, seed=41, malformed_ratio=0.02)
    produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    config = job_yaml(t, tmp_path)
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(config),
                          "--once"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "l2m run: 17 rules" in res.stderr
    assert "metrics  batch     0  in      402 rows" in res.stderr
    assert "preagg " in res.stderr  # the reduction ratio of the pre-aggregation
    assert (tmp_path / "checkpoint" / "metrics" / "offsets").is_dir()
    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    rules = {s["rule"] for s in samples}
    assert {"http-requests", "http-latency-avg", "l2m-input"} <= rules
    dead = consume_all(t.bootstrap, t.topics.dead_letters)
    inputs = {s["labels"]["status"]: s["value"] for s in samples if s["rule"] == "l2m-input"}
    assert inputs["malformed"] == len(dead) > 0


def test_run_with_a_bad_config_exits_one(tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("kafka: {bootstrap.servers: x}\ntrigger: soon\n")
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert "trigger: 'soon' is not a duration" in res.stderr
