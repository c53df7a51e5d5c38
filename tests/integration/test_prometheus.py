"""A real Prometheus (Debian's 2.42, started here on 127.0.0.1) scrapes `l2m run` on the
embedded broker: PromQL sees the job's metrics, ``l2m_input_logs_total`` equals the logs
produced, and ``promtool check metrics`` accepts a scrape."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from typing import Any

from tests.integration.test_streaming import generated
from tests.support.kafka_helpers import consume_all, fresh_topics, job_yaml, produce
from tests.support.tools import tool
from tests.support.web import get


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])



def promql(base: str, query: str) -> list[dict[str, Any]]:
    status, body = get(f"{base}/api/v1/query?query={urllib.parse.quote(query)}")
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def value(base: str, query: str) -> float | None:
    result = promql(base, query)
    return float(result[0]["value"][1]) if result else None


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_prometheus_scrapes_the_job_and_counts_every_log(broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    lines = generated(500, seed=9, malformed_ratio=0.02)
    closers = produce(t.bootstrap, t.topics.logs, lines, t.partitions)
    produced = len(lines) + closers
    port = free_port()
    config = job_yaml(t, tmp_path, "trigger: 1 second",
                      f"monitoring: {{port: {port}, host: 127.0.0.1}}")
    job = subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: l2m\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    prometheus = subprocess.Popen(
        [tool("prometheus"), f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{prom_port}"
    endpoint = f"http://127.0.0.1:{port}"
    try:
        # The endpoint answers before Spark is up: alive, not ready.
        wait_for(lambda: _answers(f"{endpoint}/healthz"), 60, "/healthz")
        assert get(f"{endpoint}/healthz") == (200, "ok\n")
        total = wait_for(lambda: value(base, "sum(l2m_input_logs_total)") == produced,
                         180, f"sum(l2m_input_logs_total) == {produced}")
        assert total
        assert get(f"{endpoint}/readyz") == (200, "ready\n")
        dead = consume_all(t.bootstrap, t.topics.dead_letters)
        assert value(base, 'l2m_dead_letters_total{reason="malformed"}') == \
            value(base, 'l2m_input_logs_total{status="malformed"}') == len(dead) > 0
        assert value(base, "l2m_input_records_total") == produced
        assert value(base, "sum(l2m_source_lag_records)") == 0
        assert value(base, "count(l2m_source_committed_offset)") == t.partitions
        assert value(base, "l2m_batches_total") >= 1
        assert value(base, 'l2m_executor_batch_tasks{executor="driver"}') is not None
        assert value(base, "l2m_executors") == 1
        assert value(base, "l2m_executors_expected") == 0
        assert value(base, "l2m_trigger_interval_seconds") == 1
        assert value(base, "l2m_rules") == 20
        assert value(base, 'l2m_rule_matches_total{rule="http-requests"}') > 0
        assert value(base, 'l2m_rule_series{rule="http-requests"}') > 0
        assert value(base, "l2m_preaggregate_rows_in_total") > \
            value(base, "l2m_preaggregate_rows_out_total") > 0
        assert value(base, "l2m_query_active") == 1
        # Spark reports the watermark a batch moved with the next batch: a second wave.
        more = generated(50, seed=10)
        produced += len(more) + produce(t.bootstrap, t.topics.logs, more, t.partitions)
        wait_for(lambda: value(base, "sum(l2m_input_logs_total)") == produced,
                 120, f"sum(l2m_input_logs_total) == {produced}")
        assert value(base, "l2m_watermark_timestamp_seconds") > 0
        assert value(base, "l2m_event_time_max_timestamp_seconds") > 0
        assert value(base, "l2m_event_time_delay_seconds") > 0
        status, scrape = get(f"{endpoint}/metrics")
        assert status == 200
        check = subprocess.run([tool("promtool"), "check", "metrics"], input=scrape,
                               capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr
        print(scrape)  # a sample of /metrics from a run (pytest -s shows it)
    finally:
        prometheus.terminate()
        os.killpg(job.pid, signal.SIGTERM)
        try:
            _, err = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            _, err = job.communicate()
        prometheus.wait(timeout=30)
    assert job.returncode == 0, err[-3000:]
    assert f"metrics on :{port}/metrics" in err and "Traceback" not in err


def _answers(url: str) -> bool:
    try:
        return get(url)[0] in (200, 503)
    except OSError:
        return False
