"""`l2m run --config FILE --once` as a user runs it: a subprocess against the real broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.integration.test_streaming import generated
from tests.support.kafka_helpers import consume_all, fresh_topics, job_yaml, latest_samples, produce
from tests.support.tools import l2m_run, stop

ROOT = Path(__file__).resolve().parents[2]


def test_run_once_processes_everything_and_exits_zero(broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    lines = generated(400, seed=41, malformed_ratio=0.02)
    produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    config = job_yaml(t, tmp_path)
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "run", "--config", str(config),
                          "--once"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "l2m run: 20 rules" in res.stderr
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


def test_ctrl_c_finishes_the_batch_and_stops_quietly(broker, tmp_path):
    """Ctrl-C as a terminal sends it (SIGINT to the process group) once the query runs: the
    runner's graceful stop, not pyspark's SIGINT handler, which the SparkContext installs
    over it (that one cancels every job: a traceback and no final batch)."""
    import signal
    import time

    t = fresh_topics(broker.bootstrap, partitions=2)
    produce(t.bootstrap, t.topics.logs, generated(200, seed=43), t.partitions)
    config = job_yaml(t, tmp_path, "trigger: 1 second")
    log = tmp_path / "stderr.txt"
    with l2m_run(config, log) as proc:
        deadline = time.monotonic() + 180
        while "batch     0" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        code = stop(proc, signal.SIGINT)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "l2m: SIGINT received, finishing the current batch" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert "l2m: interrupted" not in text
