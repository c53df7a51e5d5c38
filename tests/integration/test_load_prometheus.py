"""`l2m load --prometheus` against the real thing (issue 57): the embedded broker, a real
`l2m run` (one-second trigger), `l2m deliver` remote-writing into a real Prometheus (Debian's
2.42, tests/integration/prometheus_server.py), and `l2m load` asking that Prometheus for
``sum(l2m_input_logs_total)`` — the delay until the logs are queryable, next to the latency
measured on the metrics topic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.test_load import wait_for
from tests.integration.test_prometheus import value
from tests.support.kafka_helpers import fresh_topics, job_yaml
from tests.support.tools import l2m_run, stop

RATE = 1000
SECONDS = 5
PARTITIONS = 2
TANSU_TAIL = 250  # logs: at most ~110 seen per partition, 2 partitions
DRAIN_S = 10


def test_load_measures_the_delay_until_prometheus_counts_the_logs(
        broker: Any, prometheus: str, tmp_path: Path) -> None:
    t = fresh_topics(broker.bootstrap, partitions=PARTITIONS)
    # One Prometheus for everyone: no tenant header, so l2m's own samples (no account) go.
    config = job_yaml(t, tmp_path, "trigger: 1 second",
                      f'remote_write: {{poll: 200 ms, endpoints: [{{url: '
                      f'"{prometheus}/api/v1/write", name: prom, tenant_header: null}}]}}')
    log, deliver_log = tmp_path / "run.txt", tmp_path / "deliver.txt"
    with l2m_run(config, log) as job, deliver_log.open("w") as err:
        deliver = subprocess.Popen(
            [sys.executable, "-m", "l2m.cli", "deliver", "--config", str(config)],
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            wait_for(log, "batch     0", job, 180)
            assert deliver.poll() is None, deliver_log.read_text()[-3000:]
            done = subprocess.run(
                [sys.executable, "-m", "l2m.cli", "load", "--bootstrap", t.bootstrap,
                 "--topic", t.topics.logs, "--rate", str(RATE), "--duration", f"{SECONDS}s",
                 "--watch", t.topics.metrics, "--prometheus", prometheus,
                 "--drain", f"{DRAIN_S}s", "--json"],
                capture_output=True, text=True, timeout=120)
            counted = value(prometheus, "sum(l2m_input_logs_total)")
        finally:
            try:
                deliver_code = stop(deliver)
            finally:
                if deliver.poll() is None:
                    os.killpg(deliver.pid, signal.SIGKILL)
        assert stop(job) == 0, log.read_text()[-3000:]
    assert deliver_code == 0, deliver_log.read_text()[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    print(json.dumps({k: result[k] for k in ("sent", "latency", "prometheus")}))  # pytest -s
    sent = result["sent"]
    assert sent == RATE * SECONDS and result["failed"] == 0
    prom = result["prometheus"]
    assert prom is not None and prom["polls"] > 0, result
    # Prometheus answered every query (before the first sample: an empty answer, 0).
    assert prom["failed"] == 0 and prom["last_error"] is None, prom
    # The topic and Prometheus are fresh: what it counts is the load's logs — every one, but
    # for the tail tansu may leave unread (a partition's end is its last batch's base + 1, so
    # its last records wait for more: docs/load-testing.md, "The embedded broker's end").
    # queryable_after_s is null until the watcher's answer reaches the logs sent.
    assert sent - TANSU_TAIL <= counted <= sent, (counted, sent, done.stderr[-2000:])
    after = prom["queryable_after_s"]
    delays = [d for _, d in prom["series"]]
    assert delays, prom
    if counted == sent:
        assert after is not None and after in delays, (counted, prom)
    else:
        assert after is None, (counted, prom)
    # A log is queryable only after a trigger, its micro-batch, the metrics topic, deliver's
    # poll and the watcher's next query: well within a minute on a job that keeps up. (Not
    # bounded below by the topic's quickest latency: that is a sample's newest log, while a
    # delay dates the V-th log counted from the load's timeline — one run measured 0.651 s
    # against a quickest sample of 0.652 s.) The last log, counted, came through all of it.
    quickest = result["latency"]["min_ms"] / 1000
    assert all(0 < d < 60 for d in delays), prom
    if after is not None:
        assert quickest <= after < 60, (quickest, prom)
    times = [t for t, _ in prom["series"]]
    assert times == sorted(times) and times[0] > 0, prom
